/* The rules both native JPEG modules keep, in one place: the crop-region decoder of `train`
 * (train/native/jpegcrop.c, with seek.c) and the lossless rewrite with restart markers of `prepare`
 * (prepare/native/restarts.c). Here because `shards` is what the two stages share (docs/architecture.md:
 * they never import each other): the statuses both report to Python and their numbers, the pixel
 * ceiling, the scan limit, libjpeg's memory budget, the guard that turns libjpeg's errors and
 * warnings into a status, and the grid of restart intervals prepare writes and train seeks in.
 *
 * Header-only, every function `static inline`: each module gets its own copy, so nothing here is an
 * exported symbol that one extension's copy could interpose on the other's when both are loaded in
 * one process (a .c compiled into both would need hidden visibility for that), nothing is added to
 * the link or to pyproject's sources, and the compiler sees the guard's callbacks where they are set.
 * No Python here: seek.c, plain C, reads the grid's rule too.
 *
 * What stays each module's own: which libjpeg warnings it tolerates (a warning_policy: the guard
 * asks it), its messages, its argument checks beyond max_pixels, and the decoder's own scratch
 * beyond libjpeg's budget (jpegcrop.c: memory_bound). */
#ifndef SHARDS_NATIVE_JPEG_RULES_H
#define SHARDS_NATIVE_JPEG_RULES_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <jerror.h>

/* ------------------------------------------------------------------ statuses */

/* Per image, as both modules report it to Python (train._jpegcrop.OK, prepare._restarts.OK, ...):
 * the numbers are part of their interface. */
enum { OK = 0, REFUSED = 1, CORRUPT = 2, NOT_JPEG = 3, TOO_LARGE = 4, OUT_OF_MEMORY = 5 };

typedef struct {
    const char *name;
    int value;
} named_status;

/* The statuses by name, for each module's constants; ends with a NULL name. (A function, not a
 * table: a static table would be an unused variable in a file that includes this for the grid.) */
static inline const named_status *status_names(void) {
    static const named_status names[] = {{"OK", OK},           {"REFUSED", REFUSED},     {"CORRUPT", CORRUPT},
                                         {"NOT_JPEG", NOT_JPEG}, {"TOO_LARGE", TOO_LARGE}, {"OUT_OF_MEMORY", OUT_OF_MEMORY},
                                         {NULL, 0}};
    return names;
}

/* ------------------------------------------------------------------ limits */

/* The most max_pixels a caller may ask for: 4x the dataset's limit (shards/limits.py: 2**26). */
#define PIXELS_CEILING ((int64_t)1 << 28)

static inline int max_pixels_allowed(long long max_pixels) {
    return max_pixels >= 1 && max_pixels <= PIXELS_CEILING;
}

/* After jpeg_read_header: whether the header claims more pixels than max_pixels. Checked before
 * libjpeg allocates anything for the image's pixels or coefficients. */
static inline int too_many_pixels(const struct jpeg_decompress_struct *c, int64_t max_pixels) {
    return (int64_t)c->image_width * (int64_t)c->image_height > max_pixels;
}

/* After jpeg_read_header: whether the JPEG is lossless (SOF3 and kin, which libjpeg-turbo 3 reads, and PIL):
 * no DCT, so no coefficients to rewrite and no decode at a reduced scale or of a region (jpeg_crop_scanline
 * and jpeg_skip_scanlines fail on one, as damage would). libjpeg keeps the process in its private master;
 * the public mark is the data unit jpeg_read_header sets, until jpeg_start_decompress: one sample for a
 * lossless JPEG, a DCT block (DCTSIZE) for every other. */
static inline int lossless_jpeg(const struct jpeg_decompress_struct *c) {
    return c->min_DCT_scaled_size == 1;
}

/* A progressive JPEG may hold thousands of legal scans, each a pass over the whole image's
 * coefficients (seconds each at the pixel limit): past this many it is damage or an attack.
 * libjpeg-turbo's own fuzzers stop at 100 (fuzz/decompress.cc); ordinary encoders write under 12.
 * prepare stops where the training decoder stops, so that it never stores what train would refuse. */
#define MAX_SCANS 100

/* libjpeg's row buffers (as wide as the image: about 13 MiB at JPEG's widest, 65,500 px) and the
 * padding of its coefficient buffers to whole MCUs. */
#define LIBJPEG_SLACK ((size_t)48 << 20)

/* libjpeg's max_memory_to_use: a JPEG whose coefficients libjpeg holds whole (a progressive or
 * multi-scan JPEG in the decoder; every JPEG in the rewrite, which reads all the coefficients
 * before it writes) takes 2 bytes a coefficient, 64 per 8x8 block of each component: 6 bytes a
 * pixel for three full-resolution components. */
static inline size_t libjpeg_budget(int64_t max_pixels) {
    return 6 * (size_t)max_pixels + LIBJPEG_SLACK;
}

/* Whether the bytes start as a JPEG does (SOI), and are long enough to hold one at all. */
static inline int looks_like_jpeg(const uint8_t *data, size_t length) {
    return length >= 4 && data[0] == 0xFF && data[1] == 0xD8;
}

/* ------------------------------------------------------------------ the grid of restart intervals */

/* The MCU of the one interleaved scan of a seekable JPEG, in source pixels, from the header read
 * by jpeg_read_header (libjpeg sets MCUs_per_row only when decompression starts): one component, a
 * block; else the largest sampling factor's blocks. */
static inline unsigned int mcu_width(const struct jpeg_decompress_struct *c) {
    return DCTSIZE * (c->num_components == 1 ? 1 : (unsigned int)c->max_h_samp_factor);
}

static inline unsigned int mcu_height(const struct jpeg_decompress_struct *c) {
    return DCTSIZE * (c->num_components == 1 ? 1 : (unsigned int)c->max_v_samp_factor);
}

static inline unsigned int mcus_in_a_row(const struct jpeg_decompress_struct *c) {
    unsigned int width = mcu_width(c);
    return (c->image_width + width - 1) / width;
}

/* The rule of the grid: restart intervals that divide the MCUs of a row, so that no interval
 * straddles two rows and a crop's columns are whole intervals (the decoder seeks to rows and
 * columns of intervals). */
static inline int interval_divides_row(unsigned int mcus_per_row, unsigned int interval) {
    return interval != 0 && mcus_per_row % interval == 0;
}

/* The interval prepare writes, in MCUs: the largest one of at most `most` that keeps the rule (1
 * divides every row). The one definition: prepare/images.py's restart_interval calls it through
 * prepare._restarts.restart_interval. */
static inline unsigned int interval_dividing(unsigned int mcus_per_row, unsigned int most) {
    unsigned int n = most < mcus_per_row ? most : mcus_per_row;
    while (n > 1 && !interval_divides_row(mcus_per_row, n))
        n--;
    return n ? n : 1;
}

/* ------------------------------------------------------------------ the guard around libjpeg */

/* What a libjpeg warning (its msg_code) means to a module: OK to go on, or the status that ends the
 * image there. Each module has its own: what the decoder may decode past, the rewrite may not be
 * able to keep exactly. */
typedef int warning_policy(int code);

#define REASON_LENGTH JMSG_LENGTH_MAX /* libjpeg's messages fit, by its own definition */

/* libjpeg's error manager for one decompressor or compressor: its errors, the warnings its policy
 * does not pass and a scan past MAX_SCANS longjmp to `jump` (set by the caller, in the frame that
 * owns the libjpeg object) with `status` saying why, and, where `reason` is given, libjpeg's own
 * message (or the scan limit's) in it. */
struct guard {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int status;             /* what a longjmp means: CORRUPT, REFUSED, TOO_LARGE or OUT_OF_MEMORY */
    warning_policy *policy; /* the module's own */
    char *reason;           /* NULL, or REASON_LENGTH bytes the caller owns */
};

static inline void guard_stop(struct guard *g, j_common_ptr cinfo, int status) {
    g->status = status;
    if (g->reason)
        (*g->pub.format_message)(cinfo, g->reason); /* snprintf into JMSG_LENGTH_MAX bytes */
    longjmp(g->jump, 1);
}

static inline void guard_on_error(j_common_ptr cinfo) {
    struct guard *g = (struct guard *)cinfo->err;
    int code = g->pub.msg_code;
    /* jmemnobs (libjpeg-turbo's only memory back end) has no backing store: a full-image buffer
       beyond max_memory_to_use would end here. Defence in depth: libjpeg_budget covers every image
       of up to three full-resolution components within max_pixels (its worst MCU padding
       included), so no such image has reached it. */
    guard_stop(g, cinfo, code == JERR_NO_BACKING_STORE ? TOO_LARGE : code == JERR_OUT_OF_MEMORY ? OUT_OF_MEMORY : CORRUPT);
}

/* Level -1 is a warning, the module's policy judges it; higher levels are trace messages. */
static inline void guard_on_message(j_common_ptr cinfo, int level) {
    struct guard *g = (struct guard *)cinfo->err;
    int status = level == -1 ? g->policy(g->pub.msg_code) : OK;
    if (status != OK)
        guard_stop(g, cinfo, status);
}

/* Called as libjpeg works through the scans: past MAX_SCANS, the image is damaged. */
static inline void guard_on_progress(j_common_ptr cinfo) {
    if (cinfo->is_decompressor && ((j_decompress_ptr)cinfo)->input_scan_number > MAX_SCANS) {
        struct guard *g = (struct guard *)cinfo->err;
        g->status = CORRUPT;
        if (g->reason)
            snprintf(g->reason, REASON_LENGTH, "more than %d scans (the training decoder stops there)", MAX_SCANS);
        longjmp(g->jump, 1);
    }
}

/* Before jpeg_create_decompress or jpeg_create_compress: the guard as the object's error manager
 * (assign the result to its `err`). `reason`: NULL, or REASON_LENGTH bytes for libjpeg's message. */
static inline struct jpeg_error_mgr *guard_errors(struct guard *g, warning_policy *policy, char *reason) {
    struct jpeg_error_mgr *errors = jpeg_std_error(&g->pub);
    errors->error_exit = guard_on_error;
    errors->emit_message = guard_on_message;
    g->status = CORRUPT, g->policy = policy, g->reason = reason;
    return errors;
}

/* After jpeg_create_decompress: libjpeg's memory capped at its budget for max_pixels (the header's
 * pixels are checked against max_pixels before anything large is allocated) and the scan limit
 * watched through `progress`, which must live as long as the decompressor. */
static inline void guard_decompressor(j_decompress_ptr c, struct jpeg_progress_mgr *progress, int64_t max_pixels) {
    c->mem->max_memory_to_use = (long)libjpeg_budget(max_pixels);
    progress->progress_monitor = guard_on_progress;
    c->progress = progress;
}

#endif
