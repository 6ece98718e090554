/* The resize of the crop-region decoder: see resample.h. Four implementations of the same fixed-
 * point arithmetic give the same bytes (the same integer sums): plain C (any CPU), SSE2 (every
 * x86-64 CPU), AVX2 (most x86-64 CPUs since 2013) and AVX-512 (F, BW and VL: Intel since Skylake-SP,
 * AMD since Zen 4), the fastest this CPU runs found at run time. Each call picks one
 * (find_resampler); nothing here is process-wide state, so threads decoding at once may use
 * different ones. */
#include "resample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "buffers.h"

/* ------------------------------------------------------------------ the filters */

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's bicubic_filter: Keys' cubic convolution with a = -0.5 (negative lobes: it sharpens). */
static double bicubic(double x) {
    const double a = -0.5;
    x = fabs(x);
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0)
        return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* One line's filter, as the tap functions below read it. Each writes output pixel i's weights
 * before normalising into w, for the source pixels from *first on, and returns their count.
 * `reach`: the most pixels either side of an output pixel's centre that the filter reads. */
typedef struct {
    filter_kind kind;
    double lo, scale, fscale, reach;
    int length;
} line_filter;

/* Taps [*xmin, *xmax) clamped to the line; none left (a crop thinner than a pixel at the edge):
 * the nearest pixel. Their count, at most `taps`. */
static int clamp_taps(int *xmin, int *xmax, int length, int taps) {
    if (*xmin < 0) *xmin = 0;
    if (*xmax > length) *xmax = length;
    if (*xmax <= *xmin) {
        *xmin = *xmin >= length ? length - 1 : *xmin;
        *xmax = *xmin + 1;
    }
    return *xmax - *xmin < taps ? *xmax - *xmin : taps;
}

/* PIL's rule (precompute_coeffs): centre of output i at lo + (i + 0.5) * scale, a kernel stretched
 * by the downscale (fscale, at least 1), taps rounded from centre -+ reach, clamped to the line. */
static int kernel_taps(const line_filter *l, int i, double *w, int taps, int *first) {
    double centre = l->lo + (i + 0.5) * l->scale;
    int xmin = (int)(centre - l->reach + 0.5), xmax = (int)(centre + l->reach + 0.5);
    int n = clamp_taps(&xmin, &xmax, l->length, taps);
    for (int j = 0; j < n; j++) {
        double x = (j + xmin - centre + 0.5) / l->fscale;
        w[j] = l->kind == FILTER_BICUBIC ? bicubic(x) : triangle(x);
    }
    *first = xmin;
    return n;
}

/* OpenCV's INTER_AREA: output i is the mean of the source over its cell [lo + i * scale, lo +
 * (i + 1) * scale), each pixel weighted by how much of it the cell covers (computeResizeAreaTab
 * when shrinking; its fractional linear weights when enlarging are the same overlaps). OpenCV's
 * where both axes shrink or both enlarge; a box shrunk one way and enlarged the other OpenCV
 * resizes with two taps an axis, which this does not copy. */
static int area_taps(const line_filter *l, int i, double *w, int taps, int *first) {
    double from = l->lo + i * l->scale, to = from + l->scale;
    int xmin = (int)floor(from), xmax = (int)ceil(to);
    int n = clamp_taps(&xmin, &xmax, l->length, taps);
    for (int j = 0; j < n; j++) {
        double left = xmin + j > from ? xmin + j : from, right = xmin + j + 1 < to ? xmin + j + 1 : to;
        w[j] = right > left ? right - left : 0.0;
    }
    *first = xmin;
    return n;
}

/* A weight in PRECISION bits, rounded half away from zero as PIL rounds. Bicubic's may be
 * negative, and at an edge (its lobes cut off) a little over 1: never 2, which int16 would not
 * hold, but clamped all the same. */
static int16_t fixed_point(double weight) {
    long v = lround(weight * (1 << PRECISION));
    return (int16_t)(v < INT16_MIN ? INT16_MIN : v > INT16_MAX ? INT16_MAX : v);
}

/* The most pixels either side of an output pixel's centre that `kind` reads at this scale. */
static double reach_of(filter_kind kind, double scale, double fscale) {
    if (kind == FILTER_AREA)
        return scale / 2 + 1.0; /* the cell, and the pixels its ends fall in */
    return (kind == FILTER_BICUBIC ? 2.0 : 1.0) * fscale;
}

/* Weights j and j + 1 as one int32 (k[j] in the low half), for pmaddwd; j + 1 = n: weight 0. */
static inline int32_t weight_pair(const int16_t *k, int j, int n) {
    uint32_t high = j + 1 < n ? (uint32_t)(uint16_t)k[j + 1] << 16 : 0;
    return (int32_t)((uint32_t)(uint16_t)k[j] | high);
}

/* Output i's taps 0-3 as QUAD_INTS int32, where no output has more than 4 (f->most): pairs 0-1 four
 * times, then 2-3 four times (0 past the count), as the AVX-512 pass lays its pixels out. */
static void make_quads(filter *f, int out) {
    for (int i = 0; i < out; i++) {
        const int16_t *k = f->k + (size_t)i * f->taps;
        int n = f->count[i];
        int32_t low = weight_pair(k, 0, n), high = n > 2 ? weight_pair(k, 2, n) : 0;
        for (int q = 0; q < 4; q++)
            f->quads[(size_t)i * QUAD_INTS + q] = low, f->quads[(size_t)i * QUAD_INTS + 4 + q] = high;
    }
}

int make_filter(filter *f, filter_kind kind, double lo, double hi, int length, int out) {
    double scale = (hi - lo) / out;
    line_filter l = {.kind = kind, .lo = lo, .scale = scale, .fscale = scale < 1.0 ? 1.0 : scale, .length = length};
    l.reach = reach_of(kind, scale, l.fscale);
    int taps = (int)ceil(l.reach) * 2 + 1;
    if (grow_buffer((void **)&f->first, &f->capacity_first, sizeof(int) * (size_t)out) ||
        grow_buffer((void **)&f->count, &f->capacity_count, sizeof(int) * (size_t)out) ||
        grow_buffer((void **)&f->k, &f->capacity_k, sizeof(int16_t) * (size_t)out * (size_t)taps) ||
        grow_buffer((void **)&f->w, &f->capacity_w, sizeof(double) * (size_t)taps) ||
        grow_buffer((void **)&f->quads, &f->capacity_quads, sizeof(int32_t) * QUAD_INTS * (size_t)out))
        return -1;
    double *w = f->w;
    memset(f->k, 0, sizeof(int16_t) * (size_t)out * (size_t)taps);
    f->taps = taps, f->most = 0;
    for (int i = 0; i < out; i++) {
        int xmin, n = kind == FILTER_AREA ? area_taps(&l, i, w, taps, &xmin) : kernel_taps(&l, i, w, taps, &xmin);
        double sum = 0.0;
        for (int j = 0; j < n; j++)
            sum += w[j];
        if (sum == 0.0) { /* no weight on the taps left (the edge): the first one */
            w[0] = 1.0, sum = 1.0;
            for (int j = 1; j < n; j++) w[j] = 0.0;
        }
        for (int j = 0; j < n; j++)
            f->k[(size_t)i * taps + j] = fixed_point(w[j] / sum);
        f->first[i] = xmin;
        f->count[i] = n;
        f->most = n > f->most ? n : f->most;
    }
    if (f->most <= 4)
        make_quads(f, out);
    return 0;
}

void free_filter(filter *f) {
    free(f->first);
    free(f->count);
    free(f->k);
    free(f->w);
    free(f->quads);
    memset(f, 0, sizeof(*f));
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Each pixel is stored with one 4-byte store that overlaps the next pixel's first byte, so pixels
 * are stored left to right and destination rows hold one byte of slack. */
static inline void store_rgb(uint8_t *dst, int32_t rgbx) {
    memcpy(dst, &rgbx, 4);
}

/* ------------------------------------------------------------------ plain C */

static void rows_c(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride, const filter *f,
                   int out, int origin, int flip) {
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < out; i++) {
            const int16_t *k = f->k + (size_t)i * f->taps;
            const uint8_t *p = src + stride * r + (size_t)(f->first[i] - origin) * 4;
            int32_t s[4] = {1 << (PRECISION - 1), 1 << (PRECISION - 1), 1 << (PRECISION - 1), 1 << (PRECISION - 1)};
            for (int j = 0; j < f->count[i]; j++)
                for (int c = 0; c < 4; c++)
                    s[c] += p[4 * j + c] * k[j];
            uint8_t *o = dst + dst_stride * r + (size_t)(flip ? out - 1 - i : i) * 3;
            for (int c = 0; c < 3; c++)
                o[c] = clip8(s[c]);
        }
    }
}

/* The bytes from x on, one at a time. */
static void column_c_from(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width, int x) {
    for (; x < width; x++) {
        int32_t s = 1 << (PRECISION - 1);
        for (int j = 0; j < n; j++)
            s += rows[j * stride + x] * k[j];
        dst[x] = clip8(s);
    }
}

static void column_c(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width) {
    column_c_from(rows, stride, k, n, dst, width, 0);
}

static const resampler plain_c = {"C", rows_c, column_c};

#if defined(__SSE2__)
#include <immintrin.h>

#include "cpu_features.h"

/* ------------------------------------------------------------------ SSE2 */

static inline __m128i two_pixels(const uint8_t *p) { /* r0 r1 g0 g1 b0 b1 x0 x1 as int16 */
    __m128i px = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)p), _mm_setzero_si128());
    return _mm_unpacklo_epi16(px, _mm_srli_si128(px, 8));
}

static inline __m128i one_pixel(const uint8_t *p) { /* r0 0 g0 0 b0 0 x0 0 as int16 */
    int32_t v;
    memcpy(&v, p, 4);
    __m128i zero = _mm_setzero_si128();
    return _mm_unpacklo_epi16(_mm_unpacklo_epi8(_mm_cvtsi32_si128(v), zero), zero);
}

static inline int32_t to_pixel(__m128i acc) {
    acc = _mm_srai_epi32(acc, PRECISION);
    return _mm_cvtsi128_si32(_mm_packus_epi16(_mm_packs_epi32(acc, acc), acc)); /* clip to 0-255 */
}

/* Four rows at a time (each weight pair loaded once for them), then the rest one by one; two taps
 * of all four channels per pmaddwd. */
static void rows_sse2(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride, const filter *f,
                      int out, int origin, int flip) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) {
        const uint8_t *s0 = src + stride * r;
        uint8_t *d0 = dst + dst_stride * r;
        for (int o = 0; o < out; o++) { /* output positions left to right: see store_rgb */
            int i = flip ? out - 1 - o : o;
            const int16_t *k = f->k + (size_t)i * f->taps;
            size_t at = (size_t)(f->first[i] - origin) * 4;
            int n = f->count[i], j = 0;
            __m128i a0 = _mm_set1_epi32(1 << (PRECISION - 1)), a1 = a0, a2 = a0, a3 = a0;
            for (; j + 1 < n; j += 2, at += 8) {
                __m128i kk = _mm_set1_epi32(weight_pair(k, j, n));
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(two_pixels(s0 + at), kk));
                a1 = _mm_add_epi32(a1, _mm_madd_epi16(two_pixels(s0 + stride + at), kk));
                a2 = _mm_add_epi32(a2, _mm_madd_epi16(two_pixels(s0 + 2 * stride + at), kk));
                a3 = _mm_add_epi32(a3, _mm_madd_epi16(two_pixels(s0 + 3 * stride + at), kk));
            }
            if (j < n) {
                __m128i kk = _mm_set1_epi32(weight_pair(k, j, n));
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(one_pixel(s0 + at), kk));
                a1 = _mm_add_epi32(a1, _mm_madd_epi16(one_pixel(s0 + stride + at), kk));
                a2 = _mm_add_epi32(a2, _mm_madd_epi16(one_pixel(s0 + 2 * stride + at), kk));
                a3 = _mm_add_epi32(a3, _mm_madd_epi16(one_pixel(s0 + 3 * stride + at), kk));
            }
            store_rgb(d0 + 3 * (size_t)o, to_pixel(a0));
            store_rgb(d0 + dst_stride + 3 * (size_t)o, to_pixel(a1));
            store_rgb(d0 + 2 * dst_stride + 3 * (size_t)o, to_pixel(a2));
            store_rgb(d0 + 3 * dst_stride + 3 * (size_t)o, to_pixel(a3));
        }
    }
    for (; r < rows; r++) {
        const uint8_t *s0 = src + stride * r;
        for (int o = 0; o < out; o++) {
            int i = flip ? out - 1 - o : o;
            const int16_t *k = f->k + (size_t)i * f->taps;
            size_t at = (size_t)(f->first[i] - origin) * 4;
            int n = f->count[i], j = 0;
            __m128i a0 = _mm_set1_epi32(1 << (PRECISION - 1));
            for (; j + 1 < n; j += 2, at += 8)
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(two_pixels(s0 + at), _mm_set1_epi32(weight_pair(k, j, n))));
            if (j < n)
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(one_pixel(s0 + at), _mm_set1_epi32(weight_pair(k, j, n))));
            store_rgb(dst + dst_stride * r + 3 * (size_t)o, to_pixel(a0));
        }
    }
}

#define COLUMN_NAME column_sse2_from
#define COLUMN_TARGET
#define VEC __m128i
#define VBYTES 16
#define P(op) _mm_##op
#define LOADU(p) _mm_loadu_si128((const __m128i *)(p))
#define STOREU(p, v) _mm_storeu_si128((__m128i *)(p), (v))
#define ZERO() _mm_setzero_si128()
#define COLUMN_TAIL column_c_from
#include "resample_column.h"

static void column_sse2(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width) {
    column_sse2_from(rows, stride, k, n, dst, width, 0);
}

static const resampler sse2 = {"SSE2", rows_sse2, column_sse2};

/* ------------------------------------------------------------------ AVX2: two rows in the two 128-bit lanes */

#define AVX2 __attribute__((target("avx2")))

AVX2 static inline __m256i two_pixels_x2(const uint8_t *a, const uint8_t *b) {
    __m256i px = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)a)),
                                         _mm_loadl_epi64((const __m128i *)b), 1);
    px = _mm256_unpacklo_epi8(px, _mm256_setzero_si256());
    return _mm256_unpacklo_epi16(px, _mm256_srli_si256(px, 8));
}

AVX2 static inline __m256i one_pixel_x2(const uint8_t *a, const uint8_t *b) {
    int32_t va, vb;
    memcpy(&va, a, 4);
    memcpy(&vb, b, 4);
    __m256i px = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtsi32_si128(va)), _mm_cvtsi32_si128(vb), 1);
    px = _mm256_unpacklo_epi8(px, _mm256_setzero_si256());
    return _mm256_unpacklo_epi16(px, _mm256_setzero_si256());
}

AVX2 static inline void store_x2(uint8_t *a, uint8_t *b, __m256i acc) {
    acc = _mm256_srai_epi32(acc, PRECISION);
    acc = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc); /* clip to 0-255, in each lane */
    store_rgb(a, _mm256_cvtsi256_si32(acc));
    store_rgb(b, _mm_cvtsi128_si32(_mm256_extracti128_si256(acc, 1)));
}

/* Output positions [from, out) of four rows, two rows in each register's two lanes. */
AVX2 static void four_rows_avx2(const uint8_t *s0, size_t stride, uint8_t *d0, size_t dst_stride, const filter *f,
                                int out, int origin, int flip, int from) {
    const uint8_t *s1 = s0 + stride, *s2 = s1 + stride, *s3 = s2 + stride;
    uint8_t *d1 = d0 + dst_stride, *d2 = d1 + dst_stride, *d3 = d2 + dst_stride;
    for (int o = from; o < out; o++) { /* output positions left to right: see store_rgb */
        int i = flip ? out - 1 - o : o;
        const int16_t *k = f->k + (size_t)i * f->taps;
        size_t at = (size_t)(f->first[i] - origin) * 4;
        int n = f->count[i], j = 0;
        __m256i a01 = _mm256_set1_epi32(1 << (PRECISION - 1)), a23 = a01;
        for (; j + 1 < n; j += 2, at += 8) {
            __m256i kk = _mm256_set1_epi32(weight_pair(k, j, n));
            a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(two_pixels_x2(s0 + at, s1 + at), kk));
            a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(two_pixels_x2(s2 + at, s3 + at), kk));
        }
        if (j < n) {
            __m256i kk = _mm256_set1_epi32(weight_pair(k, j, n));
            a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(one_pixel_x2(s0 + at, s1 + at), kk));
            a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(one_pixel_x2(s2 + at, s3 + at), kk));
        }
        store_x2(d0 + 3 * (size_t)o, d1 + 3 * (size_t)o, a01);
        store_x2(d2 + 3 * (size_t)o, d3 + 3 * (size_t)o, a23);
    }
}

/* Four rows at a time; the rest by the SSE2 code. */
AVX2 static void rows_avx2(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride,
                           const filter *f, int out, int origin, int flip) {
    int r = 0;
    for (; r + 4 <= rows; r += 4)
        four_rows_avx2(src + stride * r, stride, dst + dst_stride * r, dst_stride, f, out, origin, flip, 0);
    if (r < rows)
        rows_sse2(src + stride * r, stride, rows - r, dst + dst_stride * r, dst_stride, f, out, origin, flip);
}

#define COLUMN_NAME column_avx2_from
#define COLUMN_TARGET AVX2
#define VEC __m256i
#define VBYTES 32
#define P(op) _mm256_##op
#define LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define STOREU(p, v) _mm256_storeu_si256((__m256i *)(p), (v))
#define ZERO() _mm256_setzero_si256()
#define COLUMN_TAIL column_sse2_from
#include "resample_column.h"

static void column_avx2(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width) {
    column_avx2_from(rows, stride, k, n, dst, width, 0);
}

static const resampler avx2 = {"AVX2", rows_avx2, column_avx2};

/* ------------------------------------------------------------------ AVX-512: four output pixels a register */

#define AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl")))

/* Two output pixels' four taps of one row as int16 paired for pmaddwd, the first's in lanes 0-1
 * (r0 r1 g0 g1 b0 b1 x0 x1, then the same of pixels 2 and 3), the second's in lanes 2-3: 16 bytes
 * from each of a and b, read up to 3 pixels past a last tap (weighted 0: ROWS_OVERREAD). */
AVX512 static inline __m512i two_outputs(const uint8_t *a, const uint8_t *b, __m512i order) {
    __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                            _mm_loadu_si128((const __m128i *)b), 1);
    return _mm512_shuffle_epi8(_mm512_cvtepu8_epi16(bytes), order);
}

/* Four output pixels' sums of one row (the taps of a, b, c, d at offsets in `at`), as RGB bytes at
 * dst: 12 bytes, or 16 (the last 4 for the next group to overwrite) where `wide`. */
AVX512 static inline void four_outputs(const uint8_t *row, const size_t at[4], __m512i wab, __m512i wcd,
                                       __m512i order, uint8_t *dst, int wide) {
    __m512i ab = _mm512_madd_epi16(two_outputs(row + at[0], row + at[1], order), wab);
    __m512i cd = _mm512_madd_epi16(two_outputs(row + at[2], row + at[3], order), wcd);
    /* lanes a01 a23 b01 b23 and c01 c23 d01 d23 -> a b c d, each the sum of its taps */
    __m512i sum = _mm512_add_epi32(_mm512_shuffle_i64x2(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_i64x2(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
    sum = _mm512_srai_epi32(_mm512_add_epi32(sum, _mm512_set1_epi32(1 << (PRECISION - 1))), PRECISION);
    __m128i rgbx = _mm512_cvtusepi32_epi8(_mm512_max_epi32(sum, _mm512_setzero_si512())); /* clip8's 0-255 */
    __m128i rgb = _mm_shuffle_epi8(rgbx, _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
    if (wide)
        _mm_storeu_si128((__m128i *)dst, rgb);
    else
        _mm_mask_storeu_epi8(dst, 0x0FFF, rgb);
}

/* Weights of outputs i and j as two_outputs lays out their pixels (make_quads). */
AVX512 static inline __m512i two_quads(const filter *f, int i, int j) {
    const int32_t *qi = f->quads + (size_t)i * QUAD_INTS, *qj = f->quads + (size_t)j * QUAD_INTS;
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qi)),
                              _mm256_loadu_si256((const __m256i *)qj), 1);
}

/* Where no output pixel has more than 4 taps (bilinear, up to 2x down: what DCT scaling leaves),
 * four output pixels of a row a register, the weights and offsets of each group of four read once
 * for four rows; otherwise, and for the last out % 4 pixels and rows % 4 rows, the AVX2 code. */
AVX512 static void rows_avx512(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride,
                               const filter *f, int out, int origin, int flip) {
    if (f->most > 4) {
        rows_avx2(src, stride, rows, dst, dst_stride, f, out, origin, flip);
        return;
    }
    const __m512i order = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15));
    int groups = out / 4, r = 0;
    for (; r + 4 <= rows; r += 4) {
        const uint8_t *s0 = src + stride * r;
        uint8_t *d0 = dst + dst_stride * r;
        for (int g = 0; g < groups; g++) { /* left to right: a group's 4 spare bytes are the next one's */
            int o = 4 * g, i[4];
            size_t at[4];
            for (int t = 0; t < 4; t++)
                i[t] = flip ? out - 1 - (o + t) : o + t, at[t] = (size_t)(f->first[i[t]] - origin) * 4;
            __m512i wab = two_quads(f, i[0], i[1]), wcd = two_quads(f, i[2], i[3]);
            int wide = o + 4 < out;
            for (int row = 0; row < 4; row++)
                four_outputs(s0 + stride * row, at, wab, wcd, order, d0 + dst_stride * row + 3 * (size_t)o, wide);
        }
        if (4 * groups < out)
            four_rows_avx2(s0, stride, d0, dst_stride, f, out, origin, flip, 4 * groups);
    }
    if (r < rows)
        rows_sse2(src + stride * r, stride, rows - r, dst + dst_stride * r, dst_stride, f, out, origin, flip);
}

#define COLUMN_NAME column_avx512_from
#define COLUMN_TARGET AVX512
#define VEC __m512i
#define VBYTES 64
#define P(op) _mm512_##op
#define LOADU(p) _mm512_loadu_si512((const void *)(p))
#define STOREU(p, v) _mm512_storeu_si512((void *)(p), (v))
#define ZERO() _mm512_setzero_si512()
#define COLUMN_TAIL column_avx2_from
#include "resample_column.h"

static void column_avx512(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width) {
    column_avx512_from(rows, stride, k, n, dst, width, 0);
}

static const resampler avx512 = {"AVX512", rows_avx512, column_avx512};

static int has_avx2(void) { return cpu_has_avx2(); }

static int has_avx512(void) { return cpu_has_avx512(); /* the subsets rows_avx512 uses */ }

const char *const *resampler_names(void) {
    static const char *const with_avx512[] = {"AVX512", "AVX2", "SSE2", "C", NULL},
                             *const with_avx2[] = {"AVX2", "SSE2", "C", NULL}, *const without[] = {"SSE2", "C", NULL};
    return has_avx512() ? with_avx512 : has_avx2() ? with_avx2 : without;
}

const resampler *find_resampler(const char *name) {
    if (name == NULL)
        return has_avx512() ? &avx512 : has_avx2() ? &avx2 : &sse2;
    if (strcmp(name, "AVX512") == 0)
        return has_avx512() ? &avx512 : NULL;
    if (strcmp(name, "AVX2") == 0)
        return has_avx2() ? &avx2 : NULL;
    if (strcmp(name, "SSE2") == 0)
        return &sse2;
    return strcmp(name, "C") == 0 ? &plain_c : NULL;
}
#else
const char *const *resampler_names(void) {
    static const char *const names[] = {"C", NULL};
    return names;
}

const resampler *find_resampler(const char *name) {
    return name == NULL || strcmp(name, "C") == 0 ? &plain_c : NULL;
}
#endif
