/* The resize of the crop-region decoder: PIL's antialiased filters, bilinear ("triangle") and
 * bicubic (a = -0.5), whose support grows with the downscale, as PIL's resize(box=...) computes
 * them, and OpenCV's INTER_AREA (each output pixel the mean of the source area it covers, FFCV's
 * resize), in 14-bit fixed point; separable: a horizontal pass over each decoded row (flipping
 * where asked), then a vertical one. */
#ifndef NATIVE_RESAMPLE_H
#define NATIVE_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

/* Fixed-point bits of the filter weights: 14 keeps a weight of 1.0 inside int16 (SSE2's pmaddwd
 * multiplies int16 pairs); PIL uses up to 22, the results differ by a grey level at most (two on a
 * pixel with bicubic, whose overshoot carries the first pass's rounding). */
#define PRECISION 14

/* The filters (FILTER_NAMES: the Python module's names for them, in this order). */
typedef enum { FILTER_BILINEAR, FILTER_BICUBIC, FILTER_AREA, FILTER_KINDS } filter_kind;
#define FILTER_NAMES {"bilinear", "bicubic", "area"}

/* The weights that map a line of source pixels onto `out` pixels. */
typedef struct {
    int *first;  /* first source index of each output pixel */
    int *count;  /* taps of each output pixel */
    int16_t *k;  /* out * taps weights, fixed point with PRECISION bits */
    int taps;    /* stride of k, and the most taps of any output pixel */
    int most;    /* the most taps any output pixel has (count's largest) */
    int32_t *quads; /* where most <= 4: out * QUAD_INTS, each output's weights as the AVX-512 pass reads them */
    double *w;   /* one output pixel's weights before normalising */
    size_t capacity_first, capacity_count, capacity_k, capacity_w, capacity_quads; /* kept from one image to the next */
} filter;

#define QUAD_INTS 8 /* an output pixel's weights in quads: taps 0-1 paired four times, then taps 2-3 */

/* Weights of filter `kind` mapping source pixels [lo, hi) (fractional) of a line of `length`
 * pixels onto `out` pixels; taps outside [lo, hi) but inside the line are used, as PIL's
 * resize(box=...) uses them. Returns 0, or -1 when memory runs out. */
int make_filter(filter *f, filter_kind kind, double lo, double hi, int length, int out);
void free_filter(filter *f);

/* Bytes a horizontal pass may read past its rows' last pixel (weighted 0: the AVX-512 pass reads 4
 * pixels from an output's first tap): its caller's buffer holds them. */
#define ROWS_OVERREAD 16

/* Horizontal pass: `rows` rows of RGBX pixels (4 bytes each, `stride` bytes apart, starting at
 * source column `origin`; ROWS_OVERREAD bytes past the last row readable) -> rows of `out` RGB pixels (`dst_stride` bytes apart, of which 3 * out
 * + 1 are written: one byte of slack), in mirrored order when `flip`. */
typedef void rows_fn(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride, const filter *f,
                     int out, int origin, int flip);
/* Vertical pass: dst[x] = sum_j rows[j * stride + x] * k[j] over `width` bytes, j < n. */
typedef void column_fn(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width);

/* One implementation of both passes; every one gives the same bytes. */
typedef struct {
    const char *name; /* "AVX512", "AVX2", "SSE2", "C" */
    rows_fn *rows;
    column_fn *column;
} resampler;

/* The resampler named `name`, or the fastest this CPU runs when `name` is NULL; NULL when that
 * one is unknown or this CPU lacks its instructions. */
const resampler *find_resampler(const char *name);

/* The names of the resamplers this CPU runs, fastest first, NULL-terminated. */
const char *const *resampler_names(void);

#endif
