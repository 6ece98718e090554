/* Crop-region JPEG decode + antialiased resize + flip, straight into a batch slot, GIL released.
 * Wrapped by train/decoder.py, which documents the contract.
 *
 * For each image: libjpeg-turbo decodes only the rows and columns the crop needs
 * (jpeg_crop_scanline, jpeg_skip_scanlines), at 1/2, 1/4 or 1/8 scale in the DCT when the crop is
 * at least twice the output; the decoded rows stream, a few at a time, through the resize
 * (resample.h: PIL's bilinear or bicubic filter, or OpenCV's area), whose horizontal pass also
 * flips; the vertical pass writes the slot as soon as its rows are in.
 *
 * Whatever the bytes and the arguments:
 * - every argument is checked before the GIL is released (arrays.h);
 * - every image gets a decompressor of its own, so nothing is carried from one image to the next
 *   (a JPEG without its own tables fails, or takes the standard Huffman tables, as it would alone),
 *   and a slot whose image fails is zeroed: the result does not depend on how images are chunked
 *   into calls, nor on the thread count;
 * - the header's pixel count is checked against max_pixels before libjpeg allocates anything for
 *   the image, libjpeg's full-image buffers (progressive and multi-scan JPEGs) are capped by its
 *   max_memory_to_use, and the crop is never held whole: one image's decode allocates at most
 *   memory_bound(max_pixels) bytes;
 * - libjpeg's first warning of damaged data ends the image's decode (CORRUPT), and so does a
 *   scan past the MAX_SCANS-th: damaged or lying files cost little time.
 *
 * CMYK and YCCK JPEGs decode here too, read as PIL reads them (see cmyk_to_rgbx).
 *
 * Status per image: OK; REFUSED (a JPEG in a colour space this path does not take, two components
 * say, or a lossless one: the caller tries PIL); CORRUPT (libjpeg's error, or a warning that the data is damaged, or
 * too many scans: the caller leaves the sample out); NOT_JPEG; TOO_LARGE (more pixels than
 * max_pixels, or more memory than its budget); OUT_OF_MEMORY (malloc failed: the machine's memory
 * is short, not the image's fault).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg_rules.h" /* shards/native: the statuses, limits, memory budget and libjpeg guard prepare keeps too */

#include "arrays.h"
#include "buffers.h"
#include "resample.h"
#include "seek.h"

#define MAX_SIZE 8192                     /* the largest output side */
#define ROW_GROUP 4                       /* decoded rows resized at once (the resize kernels do four rows) */
/* Our own scratch: a few rows of the crop, a window of resized rows, the filters' weights (under
 * 10 MiB at JPEG's widest and tallest image and any output size up to MAX_SIZE with bicubic's
 * filter, the widest; under 6 MiB with bilinear's; the AVX-512 pass's copy of the weights, 32 bytes
 * an output pixel, included). */
#define OWN_SCRATCH ((size_t)16 << 20)
/* Seeking (seekable shards): a window's small JPEG is built only where it is at most this many
 * bytes a pixel of it (photos need well under 1) and SEEK_HEADER bytes for its header (the
 * original's, APPn segments included), so that it and the table of where the intervals lie (16
 * bytes an interval: at most a quarter of a byte a pixel) stay under the 6 bytes a pixel of
 * libjpeg's budget (a baseline JPEG, the only kind that seeks, keeps no coefficients in libjpeg, and
 * the whole image's decompressor is gone before the small JPEG's is made): memory_bound holds for
 * both paths. A longer one (hostile bytes between the markers) decodes as usual. */
#define SEEK_BYTES_PER_PIXEL 4
#define SEEK_HEADER ((size_t)1 << 20)
/* A seek's buffers kept for the next image of the call up to this size (an ImageNet crop's small
 * JPEG is tens of KiB); larger ones are freed after their image, so that they never sit beside the
 * next image's libjpeg budget: the bound holds per image. */
#define SEEK_KEEP ((size_t)1 << 20)
/* Seek only where the intervals to decode are fewer than this share of the MCUs the usual path
 * Huffman-decodes (every row down to the crop's last, whole): the small JPEG costs its copy. Measured
 * on 300 ImageNet-like images (BENCHMARKS.md): a share of 0.95 gains on every band of box areas
 * (1.02x at 80% and more), 0.8 loses 3% there. */
#define SEEK_SHARE 0.95
/* Scaled pixels kept around the filters' reach in a seek's window: fancy upsampling of chroma
 * treats the window's edges as image edges, which changes the outermost pixel. 0 fails
 * tests/test_seekable.py, 1 passes it; 2 costs next to nothing (the window widens to whole MCUs).
 * (libjpeg-turbo also picks the upsampler by the width decoded: see seek_window.) */
#define SEEK_MARGIN 2

/* The most one decode of one image allocates: libjpeg's budget (jpeg_rules.h) and our scratch. */
static size_t memory_bound(int64_t max_pixels) {
    return libjpeg_budget(max_pixels) + OWN_SCRATCH;
}

/* ------------------------------------------------------------------ libjpeg's warnings */

/* The decoder's warning_policy (jpeg_rules.h). Warnings about bytes that are not pixels
 * (extraneous bytes before a marker: ImageNet has some; an unknown JFIF revision; a bad ICC
 * profile) are harmless; any other means the pixels are not what was encoded: the decode ends
 * there, CORRUPT. */
static int decoder_warning(int code) {
    return code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_BOGUS_ICC ? OK : CORRUPT;
}

/* A decompressor for one image: created before it, destroyed after it. */
typedef struct {
    struct jpeg_decompress_struct c;
    struct guard err;
    struct jpeg_progress_mgr progress;
    volatile int created; /* set after the setjmp, read after a longjmp */
} decompressor;

/* Called after the setjmp that guards the image: a failed create longjmps there too. Each create
 * reads libjpeg's JPEGMEM variable (getenv) with the GIL released: a thread that sets environment
 * variables while images decode races with it, as with every libjpeg user (PIL included). */
static void create_decompressor(decompressor *d, const uint8_t *data, size_t length, int64_t max_pixels) {
    d->c.err = guard_errors(&d->err, decoder_warning, NULL);
    jpeg_create_decompress(&d->c);
    d->created = 1;
    guard_decompressor(&d->c, &d->progress, max_pixels);
    jpeg_mem_src(&d->c, data, (unsigned long)length);
}

static void destroy_decompressor(decompressor *d) {
    if (d->created)
        jpeg_destroy_decompress(&d->c);
    d->created = 0;
}

static inline uint8_t muldiv255(int a, int b) { /* a * b / 255, rounded, as PIL's MULDIV255 */
    int t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* A row of a four-component JPEG (libjpeg's CMYK, YCCK converted) as PIL reads it, in place:
 * PIL inverts the samples of every such JPEG ("assume adobe conventions": rawmode CMYK;I), then
 * converts CMYK to RGB as its cmyk2rgb does (r = (255 - k) - c * (255 - k) / 255). So these images
 * decode as prepare and the PIL path always read them. */
static void cmyk_to_rgbx(uint8_t *row, JDIMENSION width) {
    for (JDIMENSION x = 0; x < width; x++, row += 4) {
        int nk = row[3]; /* 255 - (255 - k): the inverted k's complement */
        for (int ch = 0; ch < 3; ch++)
            row[ch] = (uint8_t)(nk - muldiv255(255 - row[ch], nk));
        row[3] = 255;
    }
}

/* ------------------------------------------------------------------ one image's crop */

/* Where a crop's work may stop, for the stage-by-stage profile (train.bench.stages): each stage
 * does the work of those before it, so that a stage's cost is its time less the one before's.
 * ENTROPY_ONLY is the floor beside them: the Huffman decode alone of the iMCU rows the crop reads
 * (those of the seek's small JPEG, or of the whole image from its top), no IDCT. The slot holds
 * garbage where a stage stops before the resize's vertical pass. */
typedef enum {
    HEADER_ONLY,  /* jpeg_read_header and its checks */
    FILTERS_ONLY, /* + the resize's filter weights (crop_filters) */
    SEEK_ONLY,    /* + the seek: the scan's walk, the small JPEG built, its header read */
    ENTROPY_ONLY, /* + the Huffman decode alone of the rows the crop reads (the floor) */
    PIXELS_ONLY,  /* + those rows decoded to RGBX: Huffman, IDCT, upsampling, colour conversion */
    ROWS_ONLY,    /* + the resize's horizontal pass (the flip folded in) */
    ALL_STAGES,   /* the whole crop, as decode_crops does unless told otherwise */
    STAGES
} stage;
#define STAGE_NAMES {"header", "filters", "seek", "entropy", "pixels", "rows", "all", NULL}

typedef struct {
    const uint8_t *data;
    size_t length;
    float box[4]; /* left, top, right, bottom in source pixels */
    int flip;
    int width, height; /* the output's, in pixels */
    size_t stride;     /* bytes from one output row to the next: a region of a larger slot is written in place */
    uint8_t *out;      /* the output's first pixel, RGB */
    int seek;     /* may decode only the restart intervals that cover the crop */
    int dct_scaling; /* may decode at 1/2-1/8 scale in the DCT (validation's exact grid: not) */
    filter_kind filter; /* the resize's */
    int fast_dct;       /* libjpeg's fast integer IDCT (TurboJPEG's TJFLAG_FASTDCT: FFCV's), not the accurate one */
    stage stop;         /* the profile's: where this image's work ends (ALL_STAGES: the whole crop) */
} job;

/* Whether a crop profiled to stop at j->stop goes on past `done` (never asked of ENTROPY_ONLY, a
 * branch of its own). */
static int go_on(const job *j, stage done) {
    return j->stop > done;
}

/* Buffers grown as needed and kept from one image to the next of a call; every byte read from them
 * was written for the current image first. */
typedef struct {
    filter fx, fy;
    uint8_t *rows;   /* up to ROW_GROUP decoded rows of the crop, RGBX, and one uncropped row of slack */
    uint8_t *window; /* horizontally resized rows, a sliding window over the crop's rows */
    size_t capacity_rows, capacity_window;
    seek_scratch seek;
} scratch;

static void free_scratch(scratch *s) {
    free_filter(&s->fx);
    free_filter(&s->fy);
    free(s->rows);
    free(s->window);
    free_seek_scratch(&s->seek);
}

/* The DCT scale (1, 2, 4 or 8) that keeps the crop at least the output's width and height. 4x2 and 2x4
 * chroma subsampling are decoded unscaled: libjpeg-turbo before 3.0 crops them wrongly when scaled. */
static int dct_shrink(const struct jpeg_decompress_struct *c, double w, double h, int width, int height) {
    for (int i = 0; i < c->num_components; i++)
        if (c->comp_info[i].h_samp_factor > 2 || c->comp_info[i].v_samp_factor > 2)
            return 1;
    double room = w / width < h / height ? w / width : h / height;
    int shrink = 1;
    while (shrink < 8 && room >= 2.0 * shrink)
        shrink *= 2;
    return shrink;
}

/* Up to `want` decoded rows into rows (stride bytes apart); the count, 0 on damage. */
static int read_rows(struct jpeg_decompress_struct *c, uint8_t *rows, size_t stride, int want) {
    int got = 0;
    while (got < want) {
        JSAMPROW row[ROW_GROUP];
        for (int r = got; r < want; r++)
            row[r - got] = rows + stride * r;
        JDIMENSION n = jpeg_read_scanlines(c, row, (JDIMENSION)(want - got));
        if (n == 0)
            return 0;
        got += (int)n;
    }
    return got;
}

/* After jpeg_read_header: TOO_LARGE, REFUSED, or OK and whether it is a CMYK or YCCK JPEG. */
static int header_check(const struct jpeg_decompress_struct *c, int64_t max_pixels, int *cmyk) {
    if (too_many_pixels(c, max_pixels))
        return TOO_LARGE;
    /* (libjpeg-turbo 2.x stops at the header of a 12-bit JPEG, CORRUPT; 3.x reads it, and then this) */
    *cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
    /* (a lossless JPEG: PIL decodes it whole, here a crop that is not the whole image would fail as damage) */
    if (c->data_precision != 8 || lossless_jpeg(c) || (!*cmyk && c->jpeg_color_space != JCS_YCbCr &&
                                   c->jpeg_color_space != JCS_GRAYSCALE && c->jpeg_color_space != JCS_RGB))
        return REFUSED;
    return OK;
}

/* The box, or the whole image where the box lies outside it (or is NaN). */
static void box_in(const job *j, double width, double height, double box[4]) {
    box[0] = j->box[0], box[1] = j->box[1], box[2] = j->box[2], box[3] = j->box[3];
    if (!(box[0] >= 0 && box[1] >= 0 && box[2] <= width && box[3] <= height && box[2] > box[0] && box[3] > box[1]))
        box[0] = 0, box[1] = 0, box[2] = width, box[3] = height;
}

/* The crop's filters, in the pixels of the whole image decoded at 1/shrink (as PIL maps a box
 * through draft()): computed the same way whether the whole image or a seek's window is decoded,
 * so that both give the same bytes. Returns the DCT scale, 0 when memory runs out. */
static int crop_filters(const struct jpeg_decompress_struct *c, const job *j, scratch *s) {
    double box[4];
    box_in(j, c->image_width, c->image_height, box);
    int shrink = j->dct_scaling ? dct_shrink(c, box[2] - box[0], box[3] - box[1], j->width, j->height) : 1;
    unsigned int width = (c->image_width + shrink - 1) / shrink, height = (c->image_height + shrink - 1) / shrink;
    double sx = (double)width / c->image_width, sy = (double)height / c->image_height;
    if (make_filter(&s->fx, j->filter, box[0] * sx, box[2] * sx, (int)width, j->width) ||
        make_filter(&s->fy, j->filter, box[1] * sy, box[3] * sy, (int)height, j->height))
        return 0;
    return shrink;
}

/* Decode the rows and columns that the filters (crop_filters) read, resize, flip, write j->out;
 * the header is read. The decoded image starts (origin_x, origin_y) pixels of the scaled output
 * into the whole one: (0, 0), or a seek's window. libjpeg's errors and warnings longjmp out of
 * here to decode_one. */
static int decode_region(struct jpeg_decompress_struct *c, const job *j, scratch *s, const resampler *rs,
                         int shrink, int origin_x, int origin_y, int cmyk) {
    c->scale_num = 1;
    c->scale_denom = (unsigned int)shrink;
    c->out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGBX; /* 4 bytes a pixel: the resize's loops vectorise */
    c->dct_method = j->fast_dct ? JDCT_IFAST : JDCT_ISLOW;
    jpeg_start_decompress(c);
    int out_width = j->width, out_height = j->height;
    filter *fx = &s->fx, *fy = &s->fy;
    for (int i = 0; i < out_width; i++)
        fx->first[i] -= origin_x;
    for (int i = 0; i < out_height; i++)
        fy->first[i] -= origin_y;
    /* Source rows and columns the filters read, plus one of margin: fancy upsampling treats the
       edges of a cropped region as image edges, so the outermost decoded pixels are not used. */
    int x0 = fx->first[0], x1 = fx->first[out_width - 1] + fx->count[out_width - 1];
    int y0 = fy->first[0], y1 = fy->first[out_height - 1] + fy->count[out_height - 1];
    int full_width = (int)c->output_width;
    JDIMENSION xoff = x0 > 0 ? x0 - 1 : 0;
    JDIMENSION width = (JDIMENSION)(x1 + 1 < full_width ? x1 + 1 : full_width) - xoff;
    if (xoff > 0 || (int)width < full_width)
        jpeg_crop_scanline(c, &xoff, &width); /* xoff moves left to an iMCU boundary, width grows */
    size_t stride = (size_t)c->output_width * 4; /* output_width is now the cropped width */
    size_t window_stride = (size_t)out_width * 3 + 1; /* one byte of slack: see resample.h */
    /* The window holds the rows of one output row's taps and a group read ahead; twice that, so
       that moving the live rows to its start happens once per many rows. */
    size_t window_rows = 2 * ((size_t)fy->taps + ROW_GROUP);
    /* one uncropped row of slack: some libjpeg-turbo 2.x upsamplers wrote past a cropped row */
    if (grow_buffer((void **)&s->rows, &s->capacity_rows, stride * ROW_GROUP + (size_t)full_width * 4 + ROWS_OVERREAD) ||
        grow_buffer((void **)&s->window, &s->capacity_window, window_stride * window_rows))
        return OUT_OF_MEMORY;
    int next = y0 > 0 ? y0 - 1 : 0; /* the next row libjpeg gives */
    if (next > 0)
        jpeg_skip_scanlines(c, (JDIMENSION)next);
    int base = next, filled = 0; /* window row i holds crop row base + i, for i < filled */
    for (int y = 0; y < out_height; y++) {
        int lo = fy->first[y], hi = lo + fy->count[y]; /* lo never decreases with y */
        while (next < hi) {
            if ((size_t)(filled + ROW_GROUP) > window_rows) { /* drop the rows above lo: no later output reads them */
                int from = lo < next ? lo : next, keep = next - from;
                memmove(s->window, s->window + (size_t)(from - base) * window_stride, (size_t)keep * window_stride);
                base = from, filled = keep;
            }
            int want = y1 - next < ROW_GROUP ? y1 - next : ROW_GROUP;
            if (read_rows(c, s->rows, stride, want) != want)
                return CORRUPT;
            for (int r = 0; cmyk && r < want; r++)
                cmyk_to_rgbx(s->rows + stride * r, c->output_width);
            if (go_on(j, PIXELS_ONLY))
                rs->rows(s->rows, stride, want, s->window + (size_t)filled * window_stride, window_stride, fx,
                         out_width, (int)xoff, j->flip);
            filled += want, next += want;
        }
        if (go_on(j, ROWS_ONLY))
            rs->column(s->window + (size_t)(lo - base) * window_stride, window_stride, fy->k + (size_t)y * fy->taps,
                       fy->count[y], j->out + (size_t)y * j->stride, out_width * 3);
    }
    return OK;
}

/* The profile's floor (ENTROPY_ONLY): the Huffman decode alone of the iMCU rows from the top of
 * what is decoded (the small JPEG's, or the whole image's) down to the last row the filters read,
 * into libjpeg's coefficient buffer, as jpeg_read_coefficients does (buffered-image mode:
 * jpeg_consume_input decodes an iMCU row a call), with no IDCT, upsampling or colour conversion. */
static int entropy_rows(struct jpeg_decompress_struct *c, const job *j, const scratch *s, int shrink, int origin_y) {
    c->scale_num = 1;
    c->scale_denom = (unsigned int)shrink;
    c->buffered_image = TRUE;
    jpeg_start_decompress(c);
    int last = j->height - 1;
    long rows = (long)s->fy.first[last] + s->fy.count[last] - origin_y + 1; /* decode_region's y1 and margin */
    long per_imcu = (long)c->max_v_samp_factor * c->min_DCT_scaled_size;
    JDIMENSION need = (JDIMENSION)((rows + per_imcu - 1) / per_imcu);
    while (c->input_iMCU_row < need) {
        int got = jpeg_consume_input(c);
        if (got == JPEG_SUSPENDED || got == JPEG_REACHED_EOI)
            break;
    }
    return OK;
}

/* What the small JPEG's header must say, as libjpeg reads it: the whole image's frame at the
 * window's size. */
typedef struct {
    unsigned int width, height, restart_interval;
    int components, color_space, sampling[MAX_COMPONENTS], ids[MAX_COMPONENTS], tables[MAX_COMPONENTS];
} frame_facts;

static frame_facts facts_of(const struct jpeg_decompress_struct *c, unsigned int width, unsigned int height) {
    frame_facts f = {.width = width, .height = height, .restart_interval = c->restart_interval,
                     .components = c->num_components, .color_space = c->jpeg_color_space};
    for (int k = 0; k < c->num_components && k < MAX_COMPONENTS; k++) {
        const jpeg_component_info *comp = &c->comp_info[k];
        f.sampling[k] = comp->h_samp_factor << 4 | comp->v_samp_factor;
        f.ids[k] = comp->component_id, f.tables[k] = comp->quant_tbl_no;
    }
    return f;
}

/* Whether each component that is upsampled horizontally keeps more than 2 samples a row in the
 * window: libjpeg-turbo upsamples smoothly (fancy) only then, so a narrower window would be
 * upsampled otherwise than the whole image (a lower bound: chroma may decode at a larger scale). */
static int window_upsampled_alike(const struct jpeg_decompress_struct *c, unsigned int width, int shrink) {
    for (int k = 0; k < c->num_components; k++) {
        unsigned int h = (unsigned int)c->comp_info[k].h_samp_factor, most = (unsigned int)c->max_h_samp_factor;
        if (h < most && ((size_t)width * h + most * shrink - 1) / (most * shrink) <= 2)
            return 0;
    }
    return 1;
}

/* Where seeking pays: the JPEG is a grid of restart intervals, the intervals that hold the pixels
 * the filters read (and SEEK_MARGIN more: the upsampling of chroma treats the window's edges as
 * the image's) are fewer than SEEK_SHARE of the MCUs the usual path reads, and their bytes stay
 * under the memory rule. Then the small JPEG is in s->seek.bytes, *length long, the window starts
 * (*origin_x, *origin_y) pixels into the whole image's scaled output, and *expect is what its
 * header must say. */
static int seek_window(const struct jpeg_decompress_struct *c, const job *j, scratch *s, int shrink, size_t *length,
                       int *origin_x, int *origin_y, frame_facts *expect) {
    seek_plan p;
    if (!j->seek || !seekable(c, j->data, &p))
        return 0;
    const filter *fx = &s->fx, *fy = &s->fy;
    int last = j->width - 1, bottom_row = j->height - 1;
    double left = fx->first[0] - SEEK_MARGIN, right = fx->first[last] + fx->count[last] + SEEK_MARGIN;
    double top = fy->first[0] - SEEK_MARGIN, bottom = fy->first[bottom_row] + fy->count[bottom_row] + SEEK_MARGIN;
    size_t mcus = plan_window(&p, left * shrink, top * shrink, right * shrink, bottom * shrink);
    /* MCUs are 8 to 32 px wide and high, a multiple of the DCT scale wherever it is not 1 (dct_shrink
       keeps 3x and 4x sampling unscaled): the window starts on an output pixel */
    int x = (int)(p.col0 * p.mcu_width / shrink), y = (int)(p.row0 * p.mcu_height / shrink);
    int width = (int)((p.window_width + shrink - 1) / shrink), height = (int)((p.window_height + shrink - 1) / shrink);
    if (mcus >= SEEK_SHARE * (double)p.row1 * p.mcus_per_row || !window_upsampled_alike(c, p.window_width, shrink) ||
        fx->first[0] < x || fy->first[0] < y || fx->first[last] + fx->count[last] > x + width ||
        fy->first[bottom_row] + fy->count[bottom_row] > y + height)
        return 0; /* (the window holds every pixel the filters read: the last tests are a guard) */
    size_t most = SEEK_HEADER + SEEK_BYTES_PER_PIXEL * (size_t)mcus * p.mcu_width * p.mcu_height;
    size_t built = build_window_jpeg(&p, j->data, j->length, most, &s->seek);
    if (built == 0 || built == (size_t)-1)
        return 0; /* not the promised grid (damage: decoded whole, as libjpeg meets it), too long, or no memory */
    *length = built, *origin_x = x, *origin_y = y, *expect = facts_of(c, p.window_width, p.window_height);
    return 1;
}

static int decode_one(const job *j, scratch *s, int64_t max_pixels, const resampler *rs, int *seeked) {
    if (!looks_like_jpeg(j->data, j->length))
        return NOT_JPEG;
    decompressor d = {.created = 0};
    int status, cmyk = 0;
    *seeked = 0;
    if (setjmp(d.err.jump)) {
        status = d.err.status;
    } else {
        create_decompressor(&d, j->data, j->length, max_pixels);
        jpeg_read_header(&d.c, TRUE);
        status = header_check(&d.c, max_pixels, &cmyk);
        int more = status == OK && go_on(j, HEADER_ONLY);
        int shrink = more ? crop_filters(&d.c, j, s) : 0, origin_x = 0, origin_y = 0;
        size_t length;
        frame_facts expect;
        if (more && shrink == 0)
            status = OUT_OF_MEMORY;
        if (status == OK && go_on(j, FILTERS_ONLY) &&
            seek_window(&d.c, j, s, shrink, &length, &origin_x, &origin_y, &expect)) {
            destroy_decompressor(&d); /* and decode the small JPEG instead */
            create_decompressor(&d, s->seek.bytes, length, max_pixels);
            jpeg_read_header(&d.c, TRUE);
            *seeked = 1;
            frame_facts got = facts_of(&d.c, d.c.image_width, d.c.image_height);
            if (memcmp(&got, &expect, sizeof(got)) != 0) { /* a guard: then the whole image, as usual */
                destroy_decompressor(&d);
                create_decompressor(&d, j->data, j->length, max_pixels);
                jpeg_read_header(&d.c, TRUE);
                *seeked = 0, origin_x = 0, origin_y = 0;
            }
        }
        if (status == OK && go_on(j, SEEK_ONLY))
            status = j->stop == ENTROPY_ONLY ? entropy_rows(&d.c, j, s, shrink, origin_y)
                                             : decode_region(&d.c, j, s, rs, shrink, origin_x, origin_y, cmyk);
    }
    destroy_decompressor(&d);
    return status;
}

/* ------------------------------------------------------------------ headers */

static int markers_whole(const uint8_t *data, size_t length);

/* Width and height from the header, TOO_LARGE past max_pixels; with check_markers, CORRUPT where
 * the marker structure is broken. */
static int read_size(const uint8_t *data, size_t length, int32_t *dims, int64_t max_pixels, int check_markers) {
    if (!looks_like_jpeg(data, length))
        return NOT_JPEG;
    decompressor d = {.created = 0};
    int status;
    if (setjmp(d.err.jump)) {
        status = d.err.status;
    } else {
        create_decompressor(&d, data, length, max_pixels);
        jpeg_read_header(&d.c, TRUE);
        dims[0] = (int32_t)d.c.image_width;
        dims[1] = (int32_t)d.c.image_height;
        status = too_many_pixels(&d.c, max_pixels) ? TOO_LARGE : OK;
    }
    destroy_decompressor(&d);
    if (status == OK && check_markers)
        status = markers_whole(data, length);
    return status;
}

/* Is the marker structure whole? Walks the segments from SOI to EOI and scans each entropy-coded
 * segment for the markers that may appear inside it (stuffed 0xFF00, restarts, fill bytes):
 * damage that overwrote entropy data with markers, or a file cut short, is CORRUPT. A cheap check
 * (memchr over the file) for --decode gpu, whose decoders may decode through such damage. */
static int markers_whole(const uint8_t *data, size_t length) {
    size_t i = 2; /* after SOI */
    for (;;) {
        while (i < length && data[i] != 0xFF) /* extraneous bytes before a marker: harmless, as in libjpeg */
            i++;
        while (i < length && data[i] == 0xFF) /* fill bytes */
            i++;
        if (i >= length)
            return CORRUPT; /* no EOI: cut short */
        uint8_t marker = data[i++];
        if (marker == 0xD9)
            return OK;
        if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01 || marker == 0x00)
            continue; /* no length */
        if (marker < 0xC0 || i + 2 > length)
            return CORRUPT; /* reserved: not written by an encoder */
        i += ((size_t)data[i] << 8) | data[i + 1];
        if (marker != 0xDA)
            continue;
        for (;;) { /* entropy-coded data up to the next marker that ends it */
            const uint8_t *ff = i < length ? memchr(data + i, 0xFF, length - i) : NULL;
            if (!ff)
                return CORRUPT;
            i = (size_t)(ff - data) + 1;
            while (i < length && data[i] == 0xFF)
                i++;
            if (i >= length)
                return CORRUPT;
            uint8_t next = data[i];
            if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
                i++;
                continue;
            }
            if (next < 0xC0)
                return CORRUPT;
            i = (size_t)(ff - data);
            break; /* EOI, or the tables and header of the next scan */
        }
    }
}

/* ------------------------------------------------------------------ Python bindings */

static int check_max_pixels(long long max_pixels) {
    if (!max_pixels_allowed(max_pixels)) {
        PyErr_Format(PyExc_ValueError, "max_pixels must be 1 to %lld, not %lld", (long long)PIXELS_CEILING,
                     max_pixels);
        return -1;
    }
    return 0;
}

static PyObject *py_image_sizes(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffers", "which", "offsets", "lengths", "dims", "status", "max_pixels",
                               "check_markers", NULL};
    PyObject *buffers, *which, *offsets, *lengths, *dims_o, *status_o, *result = NULL;
    long long max_pixels;
    int check_markers = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOL|p", keywords, &buffers, &which, &offsets, &lengths,
                                     &dims_o, &status_o, &max_pixels, &check_markers) ||
        check_max_pixels(max_pixels) < 0)
        return NULL;
    images im;
    Py_buffer dims = {0}, status = {0};
    if (open_images(&im, buffers, which, offsets, lengths) == 0 &&
        get_array(dims_o, &dims, "dims", SIGNED_INT, 4, 2, (const Py_ssize_t[]){im.n, 2}, 1) == 0 &&
        get_array(status_o, &status, "status", SIGNED_INT, 4, 1, (const Py_ssize_t[]){im.n}, 1) == 0) {
        int32_t *d = dims.buf, *st = status.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < im.n; i++)
            st[i] = read_size(im.data[i], im.length[i], d + 2 * i, max_pixels, check_markers);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    close_images(&im);
    release_view(&dims);
    release_view(&status);
    return result;
}

static const char *const filter_names[] = FILTER_NAMES;
static const char *const stage_names[] = STAGE_NAMES;

/* The index of `name` among `count` `names` (NULL: `fallback`), or -1 with ValueError set: `rule`,
 * not `name`. */
static int find_name(const char *name, const char *const *names, int count, int fallback, const char *rule) {
    if (name == NULL)
        return fallback;
    for (int k = 0; k < count; k++)
        if (strcmp(name, names[k]) == 0)
            return k;
    PyErr_Format(PyExc_ValueError, "%s, not '%s'", rule, name);
    return -1;
}

/* The first of n regions (top, left, height, width; NULL: none) that is not at least a pixel inside a
 * height x width slot, or -1. 64-bit sums: no int32 overflows. */
static Py_ssize_t region_outside(const int32_t *r, Py_ssize_t n, Py_ssize_t height, Py_ssize_t width) {
    for (Py_ssize_t i = 0; r && i < n; i++) {
        int64_t top = r[4 * i], left = r[4 * i + 1], rows = r[4 * i + 2], columns = r[4 * i + 3];
        if (top < 0 || left < 0 || rows < 1 || columns < 1 || top + rows > height || left + columns > width)
            return i;
    }
    return -1;
}

/* A slot of `bytes` RGB bytes in one colour (NULL: black): where a region leaves it, the padding. */
static void fill_slot(uint8_t *slot, size_t bytes, const uint8_t *colour) {
    if (colour == NULL || (colour[0] == colour[1] && colour[1] == colour[2])) {
        memset(slot, colour ? colour[0] : 0, bytes);
        return;
    }
    for (size_t k = 0; k < bytes; k += 3)
        slot[k] = colour[0], slot[k + 1] = colour[1], slot[k + 2] = colour[2];
}

static PyObject *py_decode_crops(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffers", "which", "offsets", "lengths", "boxes", "flips", "out", "first", "status",
                               "max_pixels", "simd", "seek", "seeked", "dct_scaling", "interpolation", "fast_dct",
                               "stop_after", "regions", "fill", NULL};
    PyObject *buffers, *which, *offsets, *lengths, *boxes_o, *flips_o, *out_o, *status_o, *seeked_o = Py_None;
    PyObject *regions_o = Py_None, *fill_o = Py_None;
    PyObject *result = NULL;
    Py_ssize_t first;
    long long max_pixels;
    const char *simd = NULL, *interpolation = NULL, *stop_after = NULL;
    int seek = 1, dct_scaling = 1, fast_dct = 0, filter, stop;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOnOL|zpOpzpzOO", keywords, &buffers, &which, &offsets,
                                     &lengths, &boxes_o, &flips_o, &out_o, &first, &status_o, &max_pixels, &simd, &seek,
                                     &seeked_o, &dct_scaling, &interpolation, &fast_dct, &stop_after, &regions_o,
                                     &fill_o) ||
        check_max_pixels(max_pixels) < 0)
        return NULL;
    filter = find_name(interpolation, filter_names, FILTER_KINDS, FILTER_BILINEAR,
                       "interpolation must be 'bilinear', 'bicubic' or 'area'");
    if (filter < 0 ||
        (stop = find_name(stop_after, stage_names, STAGES, ALL_STAGES, "stop_after must be one of PROFILE_STAGES")) < 0)
        return NULL;
    const resampler *rs = find_resampler(simd);
    if (!rs) {
        PyErr_Format(PyExc_ValueError, "simd=%s is not available on this CPU", simd);
        return NULL;
    }
    images im;
    Py_buffer boxes = {0}, flips = {0}, out = {0}, status = {0}, seeked = {0}, regions = {0}, fill = {0};
    if (open_images(&im, buffers, which, offsets, lengths) == 0 &&
        get_array(boxes_o, &boxes, "boxes", FLOAT, 4, 2, (const Py_ssize_t[]){im.n, 4}, 0) == 0 &&
        get_array(flips_o, &flips, "flips", FLAG, 1, 1, (const Py_ssize_t[]){im.n}, 0) == 0 &&
        get_array(out_o, &out, "out", UNSIGNED_INT, 1, 4, (const Py_ssize_t[]){ANY_LENGTH, ANY_LENGTH, ANY_LENGTH, 3},
                  1) == 0 &&
        get_array(status_o, &status, "status", SIGNED_INT, 4, 1, (const Py_ssize_t[]){im.n}, 1) == 0 &&
        (seeked_o == Py_None ||
         get_array(seeked_o, &seeked, "seeked", FLAG, 1, 1, (const Py_ssize_t[]){im.n}, 1) == 0) &&
        (regions_o == Py_None ||
         get_array(regions_o, &regions, "regions", SIGNED_INT, 4, 2, (const Py_ssize_t[]){im.n, 4}, 0) == 0) &&
        (fill_o == Py_None || get_array(fill_o, &fill, "fill", UNSIGNED_INT, 1, 1, (const Py_ssize_t[]){3}, 0) == 0)) {
        Py_ssize_t slots = out.shape[0], height = out.shape[1], width = out.shape[2];
        const int32_t *r = regions.buf; /* NULL: each image fills its slot */
        Py_ssize_t bad = region_outside(r, im.n, height, width);
        if (height < 1 || height > MAX_SIZE || width < 1 || width > MAX_SIZE) {
            PyErr_Format(PyExc_ValueError, "out must be (slots, height, width, 3) with sides 1 to %d, not %zd x %zd",
                         MAX_SIZE, height, width);
        } else if (first < 0 || im.n > slots || first > slots - im.n) {
            PyErr_Format(PyExc_ValueError, "slots first=%zd to %zd: out has %zd", first, first + im.n, slots);
        } else if (bad >= 0) {
            PyErr_Format(PyExc_ValueError, "regions[%zd] = (top %d, left %d, height %d, width %d) is not a region of "
                         "at least a pixel inside the %zd x %zd slot", bad, r[4 * bad], r[4 * bad + 1],
                         r[4 * bad + 2], r[4 * bad + 3], height, width);
        } else {
            const float *b = boxes.buf;
            const uint8_t *f = flips.buf, *colour = fill.buf; /* NULL: black */
            int32_t *st = status.buf;
            uint8_t *sk = seeked.buf; /* NULL when not asked for */
            size_t row = (size_t)width * 3, slot = (size_t)height * row;
            uint8_t *slot0 = (uint8_t *)out.buf + (size_t)first * slot;
            Py_BEGIN_ALLOW_THREADS
            scratch s;
            memset(&s, 0, sizeof(s));
            for (Py_ssize_t i = 0; i < im.n; i++) {
                uint8_t *here = slot0 + (size_t)i * slot;
                int32_t top = 0, left = 0, rows = (int32_t)height, columns = (int32_t)width;
                if (r) {
                    top = r[4 * i], left = r[4 * i + 1], rows = r[4 * i + 2], columns = r[4 * i + 3];
                    if (rows < height || columns < width)
                        fill_slot(here, slot, colour);
                }
                job j = {.data = im.data[i], .length = im.length[i], .flip = f[i] != 0, .width = (int)columns,
                         .height = (int)rows, .stride = row, .out = here + (size_t)top * row + (size_t)left * 3,
                         .seek = seek, .dct_scaling = dct_scaling, .filter = (filter_kind)filter, .fast_dct = fast_dct,
                         .stop = (stage)stop};
                memcpy(j.box, b + 4 * i, sizeof(j.box));
                int seeked_here;
                st[i] = decode_one(&j, &s, max_pixels, rs, &seeked_here);
                if (sk)
                    sk[i] = (uint8_t)seeked_here;
                if (s.seek.capacity_bytes > SEEK_KEEP || s.seek.capacity_spans > SEEK_KEEP)
                    free_seek_scratch(&s.seek);
                if (st[i] != OK)
                    memset(here, 0, slot); /* what a failed decode wrote is not kept */
            }
            free_scratch(&s);
            Py_END_ALLOW_THREADS
            result = Py_NewRef(Py_None);
        }
    }
    close_images(&im);
    release_view(&boxes);
    release_view(&flips);
    release_view(&out);
    release_view(&status);
    release_view(&seeked);
    release_view(&regions);
    release_view(&fill);
    return result;
}

static PyObject *py_gather(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"buffers", "which", "offsets", "lengths", "out", "at", NULL};
    PyObject *buffers, *which, *offsets, *lengths, *out_o, *result = NULL;
    Py_ssize_t at = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO|n", keywords, &buffers, &which, &offsets, &lengths,
                                     &out_o, &at))
        return NULL;
    images im;
    Py_buffer out = {0};
    if (open_images(&im, buffers, which, offsets, lengths) == 0 &&
        get_array(out_o, &out, "out", UNSIGNED_INT, 1, 1, (const Py_ssize_t[]){ANY_LENGTH}, 1) == 0) {
        size_t room = at >= 0 && at <= out.len ? (size_t)(out.len - at) : 0, total = 0;
        for (Py_ssize_t i = 0; i < im.n && total <= room; i++)
            total += im.length[i] <= room - total ? im.length[i] : room + 1; /* no overflow: stops past room */
        if (at < 0 || at > out.len || total > room) {
            PyErr_Format(PyExc_ValueError, "out holds %zd bytes, too few for the images from byte %zd", out.len, at);
        } else {
            uint8_t *o = (uint8_t *)out.buf + at;
            Py_BEGIN_ALLOW_THREADS
            for (Py_ssize_t i = 0; i < im.n; i++) {
                memcpy(o, im.data[i], im.length[i]);
                o += im.length[i];
            }
            Py_END_ALLOW_THREADS
            result = Py_NewRef(Py_None);
        }
    }
    close_images(&im);
    release_view(&out);
    return result;
}

static PyObject *py_memory_bound(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"max_pixels", NULL};
    long long max_pixels;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L", keywords, &max_pixels) || check_max_pixels(max_pixels) < 0)
        return NULL;
    return PyLong_FromSize_t(memory_bound(max_pixels));
}

static PyMethodDef methods[] = {
    {"image_sizes", (PyCFunction)(void (*)(void))py_image_sizes, METH_VARARGS | METH_KEYWORDS,
     "image_sizes(buffers, which, offsets, lengths, dims, status, max_pixels, check_markers=False): width and "
     "height of each JPEG from its header into dims (int32 n x 2); status (int32 n) OK, NOT_JPEG, CORRUPT, or "
     "TOO_LARGE past max_pixels; with check_markers, CORRUPT also where the marker structure is broken. Image i "
     "is bytes [offsets[i], offsets[i] + lengths[i]) (int64) of buffers[which[i]] (int32). GIL released."},
    {"decode_crops", (PyCFunction)(void (*)(void))py_decode_crops, METH_VARARGS | METH_KEYWORDS,
     "decode_crops(buffers, which, offsets, lengths, boxes, flips, out, first, status, max_pixels, simd=None, "
     "seek=True, seeked=None, dct_scaling=True, interpolation=None, fast_dct=False, stop_after=None, "
     "regions=None, fill=None): "
     "decode each image's box (float32 n x 4: left, top, right, bottom), resize it to the slot's height x width, "
     "flip where flips (bool or uint8 n) is set, into slot first + i of out (uint8 slots x height x width x 3); "
     "with regions (int32 n x 4: top, left, height, width inside the slot), into that region alone, the rest of "
     "the slot in fill (uint8 3: an RGB colour; None: black), the padding of a letterbox or of a crop larger than "
     "the image; status (int32 n) per image; a slot whose image fails is zeroed. simd: 'AVX512', 'AVX2', 'SSE2', 'C' or None (the fastest here). "
     "seek: a JPEG with restart markers may decode only the intervals its crop covers, where that pays; "
     "seeked (bool or uint8 n), if given, says which did. dct_scaling: a crop at least twice the output may "
     "decode at 1/2 to 1/8 scale in the DCT (False: at full scale, the exact resize of the whole image's grid). "
     "interpolation: the resize's filter, 'bilinear' (None) or 'bicubic' (PIL's antialiased filters, whose "
     "taps reach past the box into the image) or 'area' (OpenCV's INTER_AREA: the mean over each output "
     "pixel's cell of the box). fast_dct: libjpeg's fast integer IDCT (TurboJPEG's TJFLAG_FASTDCT), not the "
     "accurate one. stop_after (the profile's, train.bench.stages): a name of PROFILE_STAGES, where each "
     "image's work stops ('entropy': the Huffman decode alone of the rows the crop reads); the slots then hold "
     "garbage. GIL released."},
    {"gather", (PyCFunction)(void (*)(void))py_gather, METH_VARARGS | METH_KEYWORDS,
     "gather(buffers, which, offsets, lengths, out, at=0): the images' bytes end to end into out (uint8) "
     "from byte `at` (the JPEGs of a --decode gpu batch). GIL released."},
    {"memory_bound", (PyCFunction)(void (*)(void))py_memory_bound, METH_VARARGS | METH_KEYWORDS,
     "memory_bound(max_pixels) -> int: the most bytes one decode of one image allocates, whatever its bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegcrop", NULL, -1, methods, NULL, NULL, NULL, NULL};

/* A list of the strings of a NULL-terminated array. */
static PyObject *string_list(const char *const *strings) {
    PyObject *names = PyList_New(0);
    for (const char *const *name = strings; names && *name; name++) {
        PyObject *text = PyUnicode_FromString(*name);
        if (!text || PyList_Append(names, text) < 0) {
            Py_XDECREF(text);
            Py_DECREF(names);
            return NULL;
        }
        Py_DECREF(text);
    }
    return names;
}

PyMODINIT_FUNC PyInit__jpegcrop(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    char version[32];
    snprintf(version, sizeof(version), "%d.%d.%d", LIBJPEG_TURBO_VERSION_NUMBER / 1000000,
             LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000, LIBJPEG_TURBO_VERSION_NUMBER % 1000);
    PyObject *names = string_list(resampler_names()), *stage_list = string_list(stage_names);
    int added = names && stage_list && PyModule_AddObjectRef(m, "SIMD", names) == 0 &&
                PyModule_AddObjectRef(m, "PROFILE_STAGES", stage_list) == 0 &&
                PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION", version) == 0;
    for (const named_status *s = status_names(); added && s->name; s++)
        added = PyModule_AddIntConstant(m, s->name, s->value) == 0;
    if (!added || PyModule_AddIntConstant(m, "MAX_SCANS", MAX_SCANS) < 0 ||
        PyModule_AddIntConstant(m, "MAX_SIZE", MAX_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "PIXELS_CEILING", (long)PIXELS_CEILING) < 0) {
        Py_XDECREF(names);
        Py_XDECREF(stage_list);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(names);
    Py_DECREF(stage_list);
    return m;
}
