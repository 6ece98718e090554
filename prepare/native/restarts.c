/* A JPEG made seekable without loss: its DCT coefficients re-entropy-coded as a baseline JPEG with
 * restart markers every n MCUs, n dividing the MCUs of a row (as `jpegtran -restart nB`
 * writes it: the pixels stay exactly the original's). The training decoder can then decode a crop
 * from the restart intervals it covers alone. Wrapped by prepare/images.py (with_restarts).
 *
 * Whatever the bytes: a decompressor and a compressor per image, the header's pixel count checked
 * before libjpeg allocates the image's coefficients, libjpeg's max_memory_to_use capping them, the
 * first warning of damaged data, or a scan past the MAX_SCANS-th (as the training decoder stops,
 * train/native/jpegcrop.c), ends the transcode (CORRUPT). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

enum { OK = 0, REFUSED = 1, CORRUPT = 2, NOT_JPEG = 3, TOO_LARGE = 4, OUT_OF_MEMORY = 5 };

#define PIXELS_CEILING ((int64_t)1 << 28)
#define MAX_SCANS 100 /* the training decoder's limit: a file past it is damage or an attack */
#define LIBJPEG_SLACK ((size_t)48 << 20)

struct guard {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int status;
};

static void on_error(j_common_ptr cinfo) {
    struct guard *g = (struct guard *)cinfo->err;
    int code = g->pub.msg_code;
    g->status = code == JERR_NO_BACKING_STORE ? TOO_LARGE : code == JERR_OUT_OF_MEMORY ? OUT_OF_MEMORY : CORRUPT;
    longjmp(g->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) { /* warnings of damage end the transcode */
    struct guard *g = (struct guard *)cinfo->err;
    int code = g->pub.msg_code;
    if (level == -1 && code != JWRN_EXTRANEOUS_DATA && code != JWRN_JFIF_MAJOR && code != JWRN_BOGUS_ICC) {
        g->status = CORRUPT;
        longjmp(g->jump, 1);
    }
}

/* The restart interval, in MCUs: the largest divisor of the MCUs of a row that is at most `most`,
 * so that no interval straddles two rows (a decoder seeks to rows and columns of intervals). */
static unsigned int interval_dividing(unsigned int mcus_per_row, unsigned int most) {
    unsigned int n = most < mcus_per_row ? most : mcus_per_row;
    while (n > 1 && mcus_per_row % n != 0)
        n--;
    return n ? n : 1;
}

static void on_progress(j_common_ptr cinfo) {
    if (cinfo->is_decompressor && ((j_decompress_ptr)cinfo)->input_scan_number > MAX_SCANS) {
        struct guard *g = (struct guard *)cinfo->err;
        g->status = CORRUPT;
        longjmp(g->jump, 1);
    }
}

/* Whether the scans sent every bit of every coefficient. A progressive file whose script stops
 * short is decoded with block smoothing, which estimates the missing terms; rewritten, they would
 * be zeros: other pixels. Such a file is left as it is. */
static int every_bit_sent(const struct jpeg_decompress_struct *in) {
    if (!in->progressive_mode)
        return 1;
    for (int c = 0; c < in->num_components; c++)
        for (int k = 0; k < DCTSIZE2; k++)
            if (in->coef_bits[c][k] != 0)
                return 0;
    return 1;
}

/* Whether every coefficient fits 8-bit baseline Huffman coding: AC values of at most 10 bits and
 * DC values whose differences take at most 11, past which the standard tables have no codes (8-bit
 * samples give DC values from -1024 to 1016). Damaged or arithmetic-coded data can hold larger
 * ones, which libjpeg-turbo's SIMD encoder would write with no code and no error: other pixels. */
static int coefficients_fit(struct jpeg_decompress_struct *in, jvirt_barray_ptr *coefficients) {
    for (int c = 0; c < in->num_components; c++) {
        const jpeg_component_info *comp = &in->comp_info[c];
        JDIMENSION step = (JDIMENSION)comp->v_samp_factor; /* the rows libjpeg lets one access reach */
        for (JDIMENSION row = 0; row < comp->height_in_blocks; row += step) {
            JBLOCKARRAY rows = (*in->mem->access_virt_barray)((j_common_ptr)in, coefficients[c], row, step, FALSE);
            for (JDIMENSION r = 0; r < step && row + r < comp->height_in_blocks; r++)
                for (JDIMENSION b = 0; b < comp->width_in_blocks; b++) {
                    const JCOEF *block = rows[r][b];
                    if (block[0] < -1024 || block[0] > 1023)
                        return 0;
                    for (int k = 1; k < DCTSIZE2; k++)
                        if (block[k] < -1023 || block[k] > 1023)
                            return 0;
                }
        }
    }
    return 1;
}

/* The output, in a buffer this module owns: jpeg_mem_dest frees its old buffer as it grows but
 * hands the new one out only at the end, so after an error (out of memory while growing) the
 * caller would hold a freed pointer and the live buffer would leak. */
typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buffer;
    size_t capacity, length;
} growing_output;

static void output_start(j_compress_ptr cinfo) {
    growing_output *o = (growing_output *)cinfo->dest;
    size_t first = 64 << 10;
    o->buffer = malloc(first);
    if (!o->buffer)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 0);
    o->capacity = first, o->pub.next_output_byte = o->buffer, o->pub.free_in_buffer = first;
}

static boolean output_grow(j_compress_ptr cinfo) { /* libjpeg has filled the buffer */
    growing_output *o = (growing_output *)cinfo->dest;
    unsigned char *grown = realloc(o->buffer, 2 * o->capacity);
    if (!grown)
        ERREXIT1(cinfo, JERR_OUT_OF_MEMORY, 1); /* o->buffer is still ours, freed with the transcoder */
    o->pub.next_output_byte = grown + o->capacity, o->pub.free_in_buffer = o->capacity;
    o->buffer = grown, o->capacity *= 2;
    return TRUE;
}

static void output_end(j_compress_ptr cinfo) {
    growing_output *o = (growing_output *)cinfo->dest;
    o->length = o->capacity - o->pub.free_in_buffer;
}

typedef struct {
    struct jpeg_decompress_struct in;
    struct jpeg_compress_struct out;
    struct guard in_err, out_err;
    struct jpeg_progress_mgr progress;
    volatile int in_made, out_made;
    growing_output output;
} transcoder;

static int transcode(transcoder *t, const uint8_t *data, size_t length, unsigned int most, int64_t max_pixels,
                     unsigned int *interval) {
    t->in.err = jpeg_std_error(&t->in_err.pub);
    t->in_err.pub.error_exit = on_error, t->in_err.pub.emit_message = on_message;
    t->out.err = jpeg_std_error(&t->out_err.pub);
    t->out_err.pub.error_exit = on_error, t->out_err.pub.emit_message = on_message;
    if (setjmp(t->in_err.jump))
        return t->in_err.status;
    jpeg_create_decompress(&t->in);
    t->in_made = 1;
    t->in.mem->max_memory_to_use = (long)(6 * (size_t)max_pixels + LIBJPEG_SLACK);
    t->progress.progress_monitor = on_progress;
    t->in.progress = &t->progress;
    jpeg_mem_src(&t->in, data, (unsigned long)length);
    for (int m = 0; m < 16; m++) /* APPn (EXIF, ICC, ...) and comments travel with the image */
        jpeg_save_markers(&t->in, JPEG_APP0 + m, 0xFFFF);
    jpeg_save_markers(&t->in, JPEG_COM, 0xFFFF);
    jpeg_read_header(&t->in, TRUE);
    if ((int64_t)t->in.image_width * (int64_t)t->in.image_height > max_pixels)
        return TOO_LARGE;
    if (t->in.data_precision != 8)
        return REFUSED;
    jvirt_barray_ptr *coefficients = jpeg_read_coefficients(&t->in);
    if (!every_bit_sent(&t->in) || !coefficients_fit(&t->in, coefficients))
        return REFUSED;
    if (setjmp(t->out_err.jump))
        return t->out_err.status;
    jpeg_create_compress(&t->out);
    t->out_made = 1;
    jpeg_copy_critical_parameters(&t->in, &t->out);
    /* libjpeg's standard Huffman tables: tables made for each image (optimize_coding) cost another
       pass, 2.1 ms an image instead of 0.95, to save 3% of bytes and 1% of decode time (BENCHMARKS.md) */
    t->out.optimize_coding = FALSE;
    /* the MCUs of a row of the one interleaved scan written (one component: an MCU is one block) */
    unsigned int mcu_width = t->in.num_components == 1 ? DCTSIZE : t->in.max_h_samp_factor * DCTSIZE;
    unsigned int mcus_per_row = (t->in.image_width + mcu_width - 1) / mcu_width;
    *interval = interval_dividing(mcus_per_row, most);
    t->out.restart_interval = *interval;
    t->output.pub.init_destination = output_start, t->output.pub.empty_output_buffer = output_grow;
    t->output.pub.term_destination = output_end;
    t->out.dest = &t->output.pub;
    jpeg_write_coefficients(&t->out, coefficients);
    for (jpeg_saved_marker_ptr m = t->in.marker_list; m; m = m->next) {
        int jfif = m->marker == JPEG_APP0 && m->data_length >= 5 && memcmp(m->data, "JFIF", 5) == 0;
        int adobe = m->marker == JPEG_APP0 + 14 && m->data_length >= 5 && memcmp(m->data, "Adobe", 5) == 0;
        if (!(jfif && t->out.write_JFIF_header) && !(adobe && t->out.write_Adobe_marker))
            jpeg_write_marker(&t->out, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&t->out);
    jpeg_finish_decompress(&t->in);
    return OK;
}

static void close_transcoder(transcoder *t) {
    if (t->out_made)
        jpeg_destroy_compress(&t->out);
    if (t->in_made)
        jpeg_destroy_decompress(&t->in);
    free(t->output.buffer);
}

static PyObject *py_add_restarts(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"data", "most", "max_pixels", NULL};
    Py_buffer view;
    long long most;
    long long max_pixels;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*LL", keywords, &view, &most, &max_pixels))
        return NULL;
    if (most < 1 || most > 65535 || max_pixels < 1 || max_pixels > PIXELS_CEILING) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "most must be 1 to 65535 and max_pixels 1 to %lld", (long long)PIXELS_CEILING);
        return NULL;
    }
    const uint8_t *data = view.buf;
    size_t length = (size_t)view.len;
    transcoder t;
    memset(&t, 0, sizeof(t));
    unsigned int interval = 0;
    int status;
    if (length < 4 || data[0] != 0xFF || data[1] != 0xD8) {
        status = NOT_JPEG;
    } else {
        Py_BEGIN_ALLOW_THREADS
        status = transcode(&t, data, length, (unsigned int)most, max_pixels, &interval);
        Py_END_ALLOW_THREADS
    }
    PyObject *result = status == OK ? Py_BuildValue("iy#I", status, (const char *)t.output.buffer, (Py_ssize_t)t.output.length,
                                                    interval)
                                    : Py_BuildValue("iOI", status, Py_None, 0u);
    close_transcoder(&t);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"add_restarts", (PyCFunction)(void (*)(void))py_add_restarts, METH_VARARGS | METH_KEYWORDS,
     "add_restarts(data, most, max_pixels) -> (status, bytes or None, interval): the JPEG's coefficients "
     "rewritten losslessly as a baseline JPEG with libjpeg's standard Huffman tables and a restart marker every "
     "`interval` MCUs, the largest divisor of the MCUs of a row at most `most`. Status REFUSED for a "
     "progressive JPEG whose scans leave coefficient bits unsent (decoders estimate those: no exact rewrite), "
     "and for coefficients past 8-bit baseline's range (damage: no code for them). "
     "The GIL is released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_restarts", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__restarts(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "OK", OK) < 0 || PyModule_AddIntConstant(m, "REFUSED", REFUSED) < 0 ||
              PyModule_AddIntConstant(m, "CORRUPT", CORRUPT) < 0 || PyModule_AddIntConstant(m, "NOT_JPEG", NOT_JPEG) < 0 ||
              PyModule_AddIntConstant(m, "TOO_LARGE", TOO_LARGE) < 0 ||
              PyModule_AddIntConstant(m, "OUT_OF_MEMORY", OUT_OF_MEMORY) < 0 ||
              PyModule_AddIntConstant(m, "MAX_SCANS", MAX_SCANS) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
