/* A JPEG made seekable without loss: its DCT coefficients re-entropy-coded as a baseline JPEG with
 * restart markers every n MCUs, n dividing the MCUs of a row (as `jpegtran -restart nB`
 * writes it: the pixels stay exactly the original's). The training decoder can then decode a crop
 * from the restart intervals it covers alone. Wrapped by prepare/images.py (with_restarts).
 *
 * Whatever the bytes: a decompressor and a compressor per image, the header's pixel count checked
 * before libjpeg allocates the image's coefficients, libjpeg's max_memory_to_use capping them, the
 * first warning of damaged data, or a scan past the MAX_SCANS-th (as the training decoder stops,
 * train/native/jpegcrop.c), ends the transcode (CORRUPT).
 *
 * Every status but OK comes with a reason: for CORRUPT, libjpeg's own message (its warning or error,
 * e.g. "Corrupt JPEG data: premature end of data segment"), which prepare logs and lists in the
 * manifest as the image's damage; for REFUSED (a sound JPEG this rewrite cannot keep exactly),
 * what stopped it. The input is handed to libjpeg in chunks (`chunked_input`): with a whole file in
 * its buffer libjpeg-turbo's fast Huffman path decodes a bad code as zero without a word, so
 * damage in the middle of a baseline scan would go unseen. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "jpeg_rules.h" /* shards/native: the statuses, limits, memory budget and libjpeg guard train keeps too */

#define MOST_INTERVAL 65535 /* MCUs: the restart interval's field in a JPEG (DRI) is 16 bits */

/* The rewrite's warning_policy (jpeg_rules.h): warnings end the transcode, those about the data (a
 * bad code, a marker where data should be, the file ending early...) as CORRUPT, with libjpeg's
 * words; those about a header's harmless oddity (scan parameters a sequential JPEG ignores, an
 * unknown Adobe transform code) as REFUSED: the image decodes as before, kept as it is. Extraneous
 * bytes before a marker, an unknown JFIF revision and a bad ICC marker pass (sound files carry
 * them). */
static int rewrite_warning(int code) {
    if (code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC)
        return OK;
    return code == JWRN_NOT_SEQUENTIAL || code == JWRN_ADOBE_XFORM ? REFUSED : CORRUPT;
}

/* The input, handed to libjpeg at most CHUNK bytes at a time (no copy). libjpeg-turbo Huffman-decodes
 * a baseline MCU on its fast path only while a whole 512 bytes a block of the MCU are buffered, and
 * that path takes a bad code for zero silently; the slow path warns (JWRN_HUFF_BAD_CODE). At its end,
 * as jpeg_mem_src: a warning (JWRN_JPEG_EOF, which ends the transcode) and an EOI marker. */
#define CHUNK 256

typedef struct {
    struct jpeg_source_mgr pub;
    const JOCTET *data;
    size_t length, position;
} chunked_input;

static void input_start(j_decompress_ptr cinfo) { (void)cinfo; }

static boolean input_fill(j_decompress_ptr cinfo) {
    static const JOCTET eoi[2] = {0xFF, JPEG_EOI};
    chunked_input *s = (chunked_input *)cinfo->src;
    if (s->position >= s->length) {
        WARNMS(cinfo, JWRN_JPEG_EOF);
        s->pub.next_input_byte = eoi, s->pub.bytes_in_buffer = 2;
        return TRUE;
    }
    size_t n = s->length - s->position < CHUNK ? s->length - s->position : CHUNK;
    s->pub.next_input_byte = s->data + s->position, s->pub.bytes_in_buffer = n;
    s->position += n;
    return TRUE;
}

static void input_skip(j_decompress_ptr cinfo, long count) {
    chunked_input *s = (chunked_input *)cinfo->src;
    if (count <= 0)
        return;
    if ((size_t)count <= s->pub.bytes_in_buffer) {
        s->pub.next_input_byte += count, s->pub.bytes_in_buffer -= (size_t)count;
        return;
    }
    size_t beyond = (size_t)count - s->pub.bytes_in_buffer; /* past what is buffered: the next fill starts there */
    s->pub.bytes_in_buffer = 0;
    s->position = beyond < s->length - s->position ? s->position + beyond : s->length;
}

static void input_end(j_decompress_ptr cinfo) { (void)cinfo; }

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
    chunked_input input;
    growing_output output;
    char reason[REASON_LENGTH]; /* why the status is not OK */
} transcoder;

static int transcode(transcoder *t, const uint8_t *data, size_t length, unsigned int most, int64_t max_pixels,
                     unsigned int *interval) {
    t->in.err = guard_errors(&t->in_err, rewrite_warning, t->reason);
    t->out.err = guard_errors(&t->out_err, rewrite_warning, t->reason);
    if (setjmp(t->in_err.jump))
        return t->in_err.status;
    jpeg_create_decompress(&t->in);
    t->in_made = 1;
    guard_decompressor(&t->in, &t->progress, max_pixels);
    t->input.pub.init_source = input_start, t->input.pub.fill_input_buffer = input_fill;
    t->input.pub.skip_input_data = input_skip, t->input.pub.resync_to_restart = jpeg_resync_to_restart;
    t->input.pub.term_source = input_end;
    t->input.data = data, t->input.length = length;
    t->in.src = &t->input.pub;
    for (int m = 0; m < 16; m++) /* APPn (EXIF, ICC, ...) and comments travel with the image */
        jpeg_save_markers(&t->in, JPEG_APP0 + m, 0xFFFF);
    jpeg_save_markers(&t->in, JPEG_COM, 0xFFFF);
    jpeg_read_header(&t->in, TRUE);
    if (too_many_pixels(&t->in, max_pixels)) {
        snprintf(t->reason, REASON_LENGTH, "%u x %u pixels, more than the limit of %lld", t->in.image_width,
                 t->in.image_height, (long long)max_pixels);
        return TOO_LARGE;
    }
    if (t->in.data_precision != 8) {
        snprintf(t->reason, REASON_LENGTH, "%d-bit samples (baseline JPEG has 8)", t->in.data_precision);
        return REFUSED;
    }
    if (lossless_jpeg(&t->in)) { /* libjpeg would fail on it as on damage ("Requested features are incompatible") */
        snprintf(t->reason, REASON_LENGTH, "a lossless JPEG (no DCT coefficients to rewrite)");
        return REFUSED;
    }
    jvirt_barray_ptr *coefficients = jpeg_read_coefficients(&t->in);
    if (!every_bit_sent(&t->in)) {
        snprintf(t->reason, REASON_LENGTH, "progressive scans leave coefficient bits unsent (decoders estimate them)");
        return REFUSED;
    }
    if (!coefficients_fit(&t->in, coefficients)) {
        snprintf(t->reason, REASON_LENGTH, "coefficients past 8-bit baseline's range");
        return REFUSED;
    }
    if (setjmp(t->out_err.jump))
        return t->out_err.status;
    jpeg_create_compress(&t->out);
    t->out_made = 1;
    jpeg_copy_critical_parameters(&t->in, &t->out);
    /* libjpeg's standard Huffman tables: tables made for each image (optimize_coding) cost another
       pass, 2.1 ms an image instead of 0.95, to save 3% of bytes and 1% of decode time (BENCHMARKS.md) */
    t->out.optimize_coding = FALSE;
    /* the grid of the one interleaved scan written, as train's decoder reads it (jpeg_rules.h) */
    *interval = interval_dividing(mcus_in_a_row(&t->in), most);
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

/* add_restarts and add_restarts_with_reason: one transcode, the reason returned by the second. */
static PyObject *rewrite(PyObject *args, PyObject *kwargs, int with_reason) {
    static char *keywords[] = {"data", "most", "max_pixels", NULL};
    Py_buffer view;
    long long most;
    long long max_pixels;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*LL", keywords, &view, &most, &max_pixels))
        return NULL;
    if (most < 1 || most > MOST_INTERVAL || !max_pixels_allowed(max_pixels)) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "most must be 1 to %d and max_pixels 1 to %lld", MOST_INTERVAL,
                     (long long)PIXELS_CEILING);
        return NULL;
    }
    const uint8_t *data = view.buf;
    size_t length = (size_t)view.len;
    transcoder t;
    memset(&t, 0, sizeof(t));
    unsigned int interval = 0;
    int status;
    if (!looks_like_jpeg(data, length)) {
        status = NOT_JPEG;
        snprintf(t.reason, REASON_LENGTH, "no JPEG start-of-image marker");
    } else {
        Py_BEGIN_ALLOW_THREADS
        status = transcode(&t, data, length, (unsigned int)most, max_pixels, &interval);
        Py_END_ALLOW_THREADS
    }
    t.reason[REASON_LENGTH - 1] = '\0';
    PyObject *result = NULL;
    if (status == OK) {
        result = with_reason ? Py_BuildValue("iy#IO", status, (const char *)t.output.buffer,
                                             (Py_ssize_t)t.output.length, interval, Py_None)
                             : Py_BuildValue("iy#I", status, (const char *)t.output.buffer,
                                             (Py_ssize_t)t.output.length, interval);
    } else if (!with_reason) {
        result = Py_BuildValue("iOI", status, Py_None, 0u);
    } else {
        /* libjpeg's messages are ASCII; Latin-1 takes any byte a parameter might have brought */
        PyObject *reason = t.reason[0] ? PyUnicode_DecodeLatin1(t.reason, (Py_ssize_t)strlen(t.reason), "replace")
                                       : (Py_INCREF(Py_None), Py_None);
        if (reason) {
            result = Py_BuildValue("iOIO", status, Py_None, 0u, reason);
            Py_DECREF(reason);
        }
    }
    close_transcoder(&t);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_add_restarts(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    return rewrite(args, kwargs, 0);
}

static PyObject *py_add_restarts_with_reason(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    return rewrite(args, kwargs, 1);
}

static PyObject *py_restart_interval(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"mcus_per_row", "most", NULL};
    long long mcus_per_row, most;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LL", keywords, &mcus_per_row, &most))
        return NULL;
    if (mcus_per_row < 1 || mcus_per_row > (long long)UINT_MAX || most < 1 || most > MOST_INTERVAL) {
        PyErr_Format(PyExc_ValueError, "mcus_per_row must be 1 to %u and most 1 to %d, not %lld and %lld", UINT_MAX,
                     MOST_INTERVAL, mcus_per_row, most);
        return NULL;
    }
    return PyLong_FromUnsignedLong(interval_dividing((unsigned int)mcus_per_row, (unsigned int)most));
}

static PyMethodDef methods[] = {
    {"add_restarts", (PyCFunction)(void (*)(void))py_add_restarts, METH_VARARGS | METH_KEYWORDS,
     "add_restarts(data, most, max_pixels) -> (status, bytes or None, interval): the JPEG's coefficients "
     "rewritten losslessly as a baseline JPEG with libjpeg's standard Huffman tables and a restart marker every "
     "`interval` MCUs, the largest divisor of the MCUs of a row at most `most`. Status REFUSED for a "
     "progressive JPEG whose scans leave coefficient bits unsent (decoders estimate those: no exact rewrite), "
     "for coefficients past 8-bit baseline's range (damage: no code for them), for a lossless JPEG (no DCT), "
     "and for a header oddity libjpeg "
     "warns about but decodes past; CORRUPT where libjpeg warns about or fails on the data. "
     "The GIL is released."},
    {"add_restarts_with_reason", (PyCFunction)(void (*)(void))py_add_restarts_with_reason,
     METH_VARARGS | METH_KEYWORDS,
     "add_restarts_with_reason(data, most, max_pixels) -> (status, bytes or None, interval, reason or None): "
     "add_restarts, and for every status but OK why: libjpeg's own message for CORRUPT (e.g. \"Corrupt JPEG "
     "data: premature end of data segment\"), what stopped the rewrite for the others. The GIL is released."},
    {"restart_interval", (PyCFunction)(void (*)(void))py_restart_interval, METH_VARARGS | METH_KEYWORDS,
     "restart_interval(mcus_per_row, most) -> int: the interval add_restarts writes for a row of mcus_per_row "
     "MCUs, and the one for a re-encode: the largest divisor of mcus_per_row that is at most `most` (1 to "
     "65535), so that the intervals form a grid the training decoder seeks in."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_restarts", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__restarts(void) {
    PyObject *m = PyModule_Create(&module);
    int added = m != NULL;
    for (const named_status *s = status_names(); added && s->name; s++)
        added = PyModule_AddIntConstant(m, s->name, s->value) == 0;
    if (m && (!added || PyModule_AddIntConstant(m, "MAX_SCANS", MAX_SCANS) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
