/* Crop-region JPEG decode + antialiased resize + flip, straight into a batch slot, GIL released.
 *
 * For each image: libjpeg-turbo decodes only the rows and columns the crop needs
 * (jpeg_crop_scanline, jpeg_skip_scanlines), at 1/2, 1/4 or 1/8 scale in the DCT when the crop is
 * at least twice the output; a separable triangle ("bilinear") filter whose support grows with the
 * downscale, as PIL's resize(box=...) computes it, resizes the crop to size x size; the row is
 * written mirrored when flipped. Wrapped by train/decoder.py, which documents the contract.
 *
 * Status per image: 0 decoded; 1 refused (a JPEG this path does not take: CMYK, 12-bit, lossless
 * ...: the caller decodes it with PIL); 2 corrupt (libjpeg's error, or a warning that the entropy
 * data is damaged: the caller leaves the sample out); 3 not a JPEG at all.
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000 /* the stable ABI of 3.11 (buffers entered it then): one build serves 3.11 and later */
#include <Python.h>

#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

enum { OK = 0, REFUSED = 1, CORRUPT = 2, NOT_JPEG = 3 };

/* Fixed-point bits of the filter weights: 14 keeps a weight of 1.0 inside int16 (SSE2's pmaddwd
 * multiplies int16 pairs); PIL uses 22 in int32, the results differ by a grey level at most. */
#define PRECISION 14

/* ------------------------------------------------------------------ libjpeg error handling */

struct guard {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int corrupt_warnings; /* damaged entropy data that libjpeg decodes through (grey blocks) */
};

static void on_error(j_common_ptr cinfo) {
    longjmp(((struct guard *)cinfo->err)->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    struct guard *g = (struct guard *)cinfo->err;
    /* level -1: a warning. Extraneous bytes before a marker are harmless (ImageNet has some);
       anything else means the pixels are not what was encoded. */
    if (level == -1 && g->pub.msg_code != JWRN_EXTRANEOUS_DATA)
        g->corrupt_warnings++;
}

/* ------------------------------------------------------------------ the filter (PIL's rule) */

typedef struct {
    int *first;    /* first source index of each output pixel */
    int *count;    /* taps of each output pixel */
    int16_t *k;    /* out * taps weights, fixed point with PRECISION bits */
    int taps;      /* stride of k */
    double *w;     /* one output pixel's weights before normalising */
    size_t capacity_first, capacity_count, capacity_k, capacity_w; /* kept from one image to the next */
} filter;

/* Grow *buffer to hold `need` bytes (kept between images: no malloc per image). */
static int reserve(void **buffer, size_t *capacity, size_t need) {
    if (need <= *capacity)
        return 0;
    void *grown = realloc(*buffer, need);
    if (!grown)
        return -1;
    *buffer = grown;
    *capacity = need;
    return 0;
}

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Weights mapping source pixels [lo, hi) (fractional) of a line of `length` pixels onto `out`
 * pixels: centre of output i at lo + (i + 0.5) * scale, support scale (at least 1), as PIL. */
static int make_filter(filter *f, double lo, double hi, int length, int out) {
    double scale = (hi - lo) / out;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * fscale;
    int taps = (int)ceil(support) * 2 + 1;
    if (reserve((void **)&f->first, &f->capacity_first, sizeof(int) * out) ||
        reserve((void **)&f->count, &f->capacity_count, sizeof(int) * out) ||
        reserve((void **)&f->k, &f->capacity_k, sizeof(int16_t) * (size_t)out * taps) ||
        reserve((void **)&f->w, &f->capacity_w, sizeof(double) * taps))
        return -1;
    double *w = f->w;
    memset(f->k, 0, sizeof(int16_t) * (size_t)out * taps);
    f->taps = taps;
    for (int i = 0; i < out; i++) {
        double centre = lo + (i + 0.5) * scale;
        int xmin = (int)(centre - support + 0.5);
        int xmax = (int)(centre + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > length) xmax = length;
        if (xmax <= xmin) { /* a crop thinner than a pixel at the edge: take the nearest one */
            xmin = xmin >= length ? length - 1 : xmin;
            xmax = xmin + 1;
        }
        int n = xmax - xmin;
        if (n > taps) n = taps;
        double sum = 0.0;
        for (int j = 0; j < n; j++) {
            w[j] = triangle((j + xmin - centre + 0.5) / fscale);
            sum += w[j];
        }
        if (sum == 0.0) { w[0] = 1.0; sum = 1.0; for (int j = 1; j < n; j++) w[j] = 0.0; }
        for (int j = 0; j < n; j++)
            f->k[(size_t)i * taps + j] = (int16_t)lround(w[j] / sum * (1 << PRECISION));
        f->first[i] = xmin;
        f->count[i] = n;
    }
    return 0;
}

static void free_filter(filter *f) {
    free(f->first);
    free(f->count);
    free(f->k);
    free(f->w);
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION;
    return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Horizontal pass: `rows` rows of RGBX pixels (4 bytes each; `stride` bytes apart, starting at
 * source column `origin`) -> rows of `out` RGB pixels (3 bytes each, `dst_stride` apart), in
 * mirrored order when `flip`. Each 4-byte store overlaps the next pixel's first byte, so pixels
 * are stored left to right and dst rows need one byte of slack. SSE2 (every x86-64 CPU) multiplies two taps of all four channels per
 * pmaddwd, for four rows at once; elsewhere plain C. */
static inline void store_rgb(uint8_t *dst, int32_t rgbx) {
    memcpy(dst, &rgbx, 4);
}

#if defined(__SSE2__)
#include <immintrin.h>

static inline __m128i pair_weights(const int16_t *k) { /* k0 k1 k0 k1 ... as int16 */
    return _mm_set1_epi32((int32_t)((uint16_t)k[0] | ((uint32_t)(uint16_t)k[1] << 16)));
}

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

static void resample_rows_sse2(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride,
                               const filter *f, int out, int origin, int flip) {
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
                __m128i kk = pair_weights(k + j);
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(two_pixels(s0 + at), kk));
                a1 = _mm_add_epi32(a1, _mm_madd_epi16(two_pixels(s0 + stride + at), kk));
                a2 = _mm_add_epi32(a2, _mm_madd_epi16(two_pixels(s0 + 2 * stride + at), kk));
                a3 = _mm_add_epi32(a3, _mm_madd_epi16(two_pixels(s0 + 3 * stride + at), kk));
            }
            if (j < n) {
                __m128i kk = _mm_set1_epi32((uint16_t)k[j]);
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(one_pixel(s0 + at), kk));
                a1 = _mm_add_epi32(a1, _mm_madd_epi16(one_pixel(s0 + stride + at), kk));
                a2 = _mm_add_epi32(a2, _mm_madd_epi16(one_pixel(s0 + 2 * stride + at), kk));
                a3 = _mm_add_epi32(a3, _mm_madd_epi16(one_pixel(s0 + 3 * stride + at), kk));
            }
            store_rgb(d0 + 3 * o, to_pixel(a0));
            store_rgb(d0 + dst_stride + 3 * o, to_pixel(a1));
            store_rgb(d0 + 2 * dst_stride + 3 * o, to_pixel(a2));
            store_rgb(d0 + 3 * dst_stride + 3 * o, to_pixel(a3));
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
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(two_pixels(s0 + at), pair_weights(k + j)));
            if (j < n)
                a0 = _mm_add_epi32(a0, _mm_madd_epi16(one_pixel(s0 + at), _mm_set1_epi32((uint16_t)k[j])));
            store_rgb(dst + dst_stride * r + 3 * (size_t)o, to_pixel(a0));
        }
    }
}

/* Vertical pass: dst[x] = sum_j rows[j][x] * k[j] over `width` bytes; two taps per pmaddwd on
 * bytes of two rows interleaved, 16 bytes at a time. */
static void resample_column_sse2(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width,
                                 int x) {
    const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(1 << (PRECISION - 1));
    for (; x + 16 <= width; x += 16) {
        __m128i a0 = half, a1 = half, a2 = half, a3 = half;
        int j = 0;
        for (; j < n; j += 2) {
            __m128i p = _mm_loadu_si128((const __m128i *)(rows + j * stride + x));
            __m128i q = j + 1 < n ? _mm_loadu_si128((const __m128i *)(rows + (j + 1) * stride + x)) : zero;
            __m128i kk = j + 1 < n ? pair_weights(k + j) : _mm_set1_epi32((uint16_t)k[j]);
            __m128i lo = _mm_unpacklo_epi8(p, q), hi = _mm_unpackhi_epi8(p, q); /* p0 q0 p1 q1 ... */
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), kk));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), kk));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), kk));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), kk));
        }
        a0 = _mm_srai_epi32(a0, PRECISION), a1 = _mm_srai_epi32(a1, PRECISION);
        a2 = _mm_srai_epi32(a2, PRECISION), a3 = _mm_srai_epi32(a3, PRECISION);
        _mm_storeu_si128((__m128i *)(dst + x), _mm_packus_epi16(_mm_packs_epi32(a0, a1), _mm_packs_epi32(a2, a3)));
    }
    for (; x < width; x++) {
        int32_t s = 1 << (PRECISION - 1);
        for (int j = 0; j < n; j++)
            s += rows[j * stride + x] * k[j];
        dst[x] = clip8(s);
    }
}

/* The same two passes with AVX2 (most x86-64 CPUs since 2013, chosen at import): the horizontal
 * pass holds two rows in the two 128-bit lanes of a register, the vertical one 32 bytes. Every
 * AVX2 operation here works within lanes, as the SSE2 code does on one. */
__attribute__((target("avx2"))) static inline __m256i two_pixels_x2(const uint8_t *a, const uint8_t *b) {
    __m256i px = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)a)),
                                         _mm_loadl_epi64((const __m128i *)b), 1);
    px = _mm256_unpacklo_epi8(px, _mm256_setzero_si256());
    return _mm256_unpacklo_epi16(px, _mm256_srli_si256(px, 8));
}

__attribute__((target("avx2"))) static inline __m256i one_pixel_x2(const uint8_t *a, const uint8_t *b) {
    int32_t va, vb;
    memcpy(&va, a, 4);
    memcpy(&vb, b, 4);
    __m256i px = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_cvtsi32_si128(va)), _mm_cvtsi32_si128(vb), 1);
    px = _mm256_unpacklo_epi8(px, _mm256_setzero_si256());
    return _mm256_unpacklo_epi16(px, _mm256_setzero_si256());
}

__attribute__((target("avx2"))) static inline void store_x2(uint8_t *a, uint8_t *b, __m256i acc) {
    acc = _mm256_srai_epi32(acc, PRECISION);
    acc = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc); /* clip to 0-255, in each lane */
    store_rgb(a, _mm256_cvtsi256_si32(acc));
    store_rgb(b, _mm_cvtsi128_si32(_mm256_extracti128_si256(acc, 1)));
}

__attribute__((target("avx2")))
static void resample_rows_avx2(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride,
                               const filter *f, int out, int origin, int flip) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) {
        const uint8_t *s0 = src + stride * r, *s1 = s0 + stride, *s2 = s1 + stride, *s3 = s2 + stride;
        uint8_t *d0 = dst + dst_stride * r, *d1 = d0 + dst_stride, *d2 = d1 + dst_stride, *d3 = d2 + dst_stride;
        for (int o = 0; o < out; o++) { /* output positions left to right: see store_rgb */
            int i = flip ? out - 1 - o : o;
            const int16_t *k = f->k + (size_t)i * f->taps;
            size_t at = (size_t)(f->first[i] - origin) * 4;
            int n = f->count[i], j = 0;
            __m256i a01 = _mm256_set1_epi32(1 << (PRECISION - 1)), a23 = a01;
            for (; j + 1 < n; j += 2, at += 8) {
                __m256i kk = _mm256_set1_epi32((int32_t)((uint16_t)k[j] | ((uint32_t)(uint16_t)k[j + 1] << 16)));
                a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(two_pixels_x2(s0 + at, s1 + at), kk));
                a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(two_pixels_x2(s2 + at, s3 + at), kk));
            }
            if (j < n) {
                __m256i kk = _mm256_set1_epi32((uint16_t)k[j]);
                a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(one_pixel_x2(s0 + at, s1 + at), kk));
                a23 = _mm256_add_epi32(a23, _mm256_madd_epi16(one_pixel_x2(s2 + at, s3 + at), kk));
            }
            store_x2(d0 + 3 * o, d1 + 3 * o, a01);
            store_x2(d2 + 3 * o, d3 + 3 * o, a23);
        }
    }
    if (r < rows)
        resample_rows_sse2(src + stride * r, stride, rows - r, dst + dst_stride * r, dst_stride, f, out, origin, flip);
}

__attribute__((target("avx2")))
static void resample_column_avx2(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst,
                                 int width) {
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(1 << (PRECISION - 1));
    int x = 0;
    for (; x + 32 <= width; x += 32) {
        __m256i a0 = half, a1 = half, a2 = half, a3 = half;
        for (int j = 0; j < n; j += 2) {
            __m256i p = _mm256_loadu_si256((const __m256i *)(rows + j * stride + x));
            __m256i q = j + 1 < n ? _mm256_loadu_si256((const __m256i *)(rows + (j + 1) * stride + x)) : zero;
            __m256i kk = _mm256_set1_epi32(j + 1 < n ? (int32_t)((uint16_t)k[j] | ((uint32_t)(uint16_t)k[j + 1] << 16))
                                                     : (int32_t)(uint16_t)k[j]);
            __m256i lo = _mm256_unpacklo_epi8(p, q), hi = _mm256_unpackhi_epi8(p, q);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), kk));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), kk));
            a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), kk));
            a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), kk));
        }
        a0 = _mm256_srai_epi32(a0, PRECISION), a1 = _mm256_srai_epi32(a1, PRECISION);
        a2 = _mm256_srai_epi32(a2, PRECISION), a3 = _mm256_srai_epi32(a3, PRECISION);
        _mm256_storeu_si256((__m256i *)(dst + x),
                            _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3)));
    }
    resample_column_sse2(rows, stride, k, n, dst, width, x);
}

static void resample_column_sse2_all(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst,
                                     int width) {
    resample_column_sse2(rows, stride, k, n, dst, width, 0);
}

typedef void rows_fn(const uint8_t *, size_t, int, uint8_t *, size_t, const filter *, int, int, int);
typedef void column_fn(const uint8_t *, size_t, const int16_t *, int, uint8_t *, int);
static rows_fn *resample_rows = resample_rows_sse2;
static column_fn *resample_column = resample_column_sse2_all;
static const char *simd = "SSE2";

/* The widest SIMD this CPU has, or `name` ("AVX2", "SSE2") where the tests ask: 0, or -1 if unknown. */
static int choose_simd(const char *name) {
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2");
    if (name ? strcmp(name, "AVX2") == 0 && avx2 : avx2) {
        resample_rows = resample_rows_avx2, resample_column = resample_column_avx2, simd = "AVX2";
        return 0;
    }
    if (name && strcmp(name, "SSE2") != 0)
        return -1;
    resample_rows = resample_rows_sse2, resample_column = resample_column_sse2_all, simd = "SSE2";
    return 0;
}
#else
static void resample_rows(const uint8_t *src, size_t stride, int rows, uint8_t *dst, size_t dst_stride,
                          const filter *f, int out, int origin, int flip) {
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

static void resample_column(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst, int width) {
    for (int x = 0; x < width; x++) {
        int32_t s = 1 << (PRECISION - 1);
        for (int j = 0; j < n; j++)
            s += rows[j * stride + x] * k[j];
        dst[x] = clip8(s);
    }
}
static const char *simd = "plain C";

static int choose_simd(const char *name) {
    return name && strcmp(name, simd) != 0 ? -1 : 0;
}
#endif

/* ------------------------------------------------------------------ one image */

typedef struct {
    const uint8_t *data;
    size_t length;
    float box[4]; /* left, top, right, bottom in source pixels */
    int flip;
    int size;
    uint8_t *out; /* size * size * 3 */
} job;

/* The DCT scale (1, 2, 4 or 8) that keeps the crop at least `size` px on both sides. 4x2 and 2x4
 * chroma subsampling are decoded unscaled: libjpeg-turbo before 3.0 crops them wrongly when scaled. */
static int dct_shrink(const struct jpeg_decompress_struct *c, double w, double h, int size) {
    for (int i = 0; i < c->num_components; i++)
        if (c->comp_info[i].h_samp_factor > 2 || c->comp_info[i].v_samp_factor > 2)
            return 1;
    double room = (w < h ? w : h) / size;
    int shrink = 1;
    while (shrink < 8 && room >= 2.0 * shrink)
        shrink *= 2;
    return shrink;
}

/* What decode_region allocates: grown as needed, kept from one image to the next of a call. */
typedef struct {
    filter fx, fy;
    uint8_t *region, *wide;
    size_t capacity_region, capacity_wide;
} scratch;

/* Decode the rows and columns of j->box that the filters read, resample, flip, write j->out.
 * libjpeg's errors longjmp out of here to decode_one. */
static int decode_region(struct jpeg_decompress_struct *c, const job *j, scratch *s) {
    jpeg_read_header(c, TRUE);
    if (c->data_precision != 8 || (c->jpeg_color_space != JCS_YCbCr && c->jpeg_color_space != JCS_GRAYSCALE &&
                                   c->jpeg_color_space != JCS_RGB))
        return REFUSED;
    double w0 = c->image_width, h0 = c->image_height;
    double left = j->box[0], top = j->box[1], right = j->box[2], bottom = j->box[3];
    if (!(left >= 0 && top >= 0 && right <= w0 && bottom <= h0 && right > left && bottom > top))
        left = 0, top = 0, right = w0, bottom = h0; /* a box outside the image: the whole image */
    c->scale_num = 1;
    c->scale_denom = dct_shrink(c, right - left, bottom - top, j->size);
    c->out_color_space = JCS_EXT_RGBX; /* 4 bytes a pixel: the resampler's loops vectorise */
    jpeg_start_decompress(c);
    /* The box in the pixels of the (scaled) output, as PIL maps a box through draft(). */
    double sx = (double)c->output_width / w0, sy = (double)c->output_height / h0;
    int size = j->size;
    if (make_filter(&s->fx, left * sx, right * sx, (int)c->output_width, size) ||
        make_filter(&s->fy, top * sy, bottom * sy, (int)c->output_height, size))
        return CORRUPT; /* out of memory: this image fails */
    /* Source rows and columns the filters read, plus one of margin: fancy upsampling treats the
       edges of a cropped region as image edges, so the outermost decoded pixels are not used. */
    int x0 = s->fx.first[0], x1 = s->fx.first[size - 1] + s->fx.count[size - 1];
    int y0 = s->fy.first[0], y1 = s->fy.first[size - 1] + s->fy.count[size - 1];
    int full_width = (int)c->output_width, height = (int)c->output_height;
    JDIMENSION xoff = x0 > 0 ? x0 - 1 : 0;
    JDIMENSION width = (JDIMENSION)(x1 + 1 < full_width ? x1 + 1 : full_width) - xoff;
    int ystart = y0 > 0 ? y0 - 1 : 0;
    int rows = (y1 + 1 < height ? y1 + 1 : height) - ystart;
    if (xoff > 0 || (int)width < full_width)
        jpeg_crop_scanline(c, &xoff, &width); /* xoff moves left to an iMCU boundary, width grows */
    size_t stride = (size_t)c->output_width * 4; /* output_width is now the cropped width */
    /* one uncropped row of slack: some libjpeg-turbo 2.x upsamplers wrote past a cropped row */
    if (reserve((void **)&s->region, &s->capacity_region, stride * rows + (size_t)full_width * 4) ||
        reserve((void **)&s->wide, &s->capacity_wide, ((size_t)size * 3 + 1) * rows))
        return CORRUPT; /* out of memory: this image fails */
    if (ystart > 0)
        jpeg_skip_scanlines(c, (JDIMENSION)ystart);
    for (int r = 0; r < rows; r++) {
        JSAMPROW row = s->region + stride * r;
        if (jpeg_read_scanlines(c, &row, 1) != 1)
            return CORRUPT;
    }
    size_t wide_stride = (size_t)size * 3 + 1; /* one byte of slack: see resample_rows */
    resample_rows(s->region, stride, rows, s->wide, wide_stride, &s->fx, size, (int)xoff, j->flip);
    for (int y = 0; y < size; y++)
        resample_column(s->wide + (size_t)(s->fy.first[y] - ystart) * wide_stride, wide_stride,
                        s->fy.k + (size_t)y * s->fy.taps, s->fy.count[y], j->out + (size_t)y * size * 3, size * 3);
    return OK;
}

/* A libjpeg decompressor and its scratch, reused for every image of a call. */
typedef struct {
    struct jpeg_decompress_struct c;
    struct guard err;
    scratch s;
} context;

static void open_context(context *x) {
    memset(x, 0, sizeof(*x));
    x->c.err = jpeg_std_error(&x->err.pub);
    x->err.pub.error_exit = on_error;
    x->err.pub.emit_message = on_message;
    jpeg_create_decompress(&x->c);
}

static void close_context(context *x) {
    jpeg_destroy_decompress(&x->c);
    free(x->s.region);
    free(x->s.wide);
    free_filter(&x->s.fx);
    free_filter(&x->s.fy);
}

static int decode_one(context *x, const job *j) {
    int status;
    if (j->length < 4 || j->data[0] != 0xFF || j->data[1] != 0xD8)
        return NOT_JPEG;
    x->err.corrupt_warnings = 0;
    if (setjmp(x->err.jump)) {
        status = CORRUPT;
    } else {
        jpeg_mem_src(&x->c, j->data, (unsigned long)j->length);
        status = decode_region(&x->c, j, &x->s);
    }
    if (status == OK && x->err.corrupt_warnings)
        status = CORRUPT;
    jpeg_abort_decompress(&x->c); /* also after an error or an early return: ready for the next image */
    return status;
}

static int markers_whole(const uint8_t *data, size_t length);

static int header_size(struct jpeg_decompress_struct *c, const uint8_t *data, size_t length, int32_t *dims) {
    jpeg_mem_src(c, data, (unsigned long)length);
    jpeg_read_header(c, TRUE);
    dims[0] = (int32_t)c->image_width;
    dims[1] = (int32_t)c->image_height;
    return OK;
}

static int read_size(context *x, const uint8_t *data, size_t length, int32_t *dims, int check_markers) {
    int status;
    if (length < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return NOT_JPEG;
    x->err.corrupt_warnings = 0;
    if (setjmp(x->err.jump))
        status = CORRUPT;
    else
        status = header_size(&x->c, data, length, dims);
    jpeg_abort_decompress(&x->c);
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

/* ------------------------------------------------------------------ a shard's index */

/* The value of a tar header's octal field, or -1 when it is not octal. */
static int64_t octal(const uint8_t *field, int width) {
    int64_t v = 0;
    int i = 0, digits = 0;
    while (i < width && field[i] == ' ')
        i++;
    for (; i < width && field[i] >= '0' && field[i] <= '7'; i++, digits++)
        v = v * 8 + (field[i] - '0');
    for (; i < width; i++)
        if (field[i] != ' ' && field[i] != 0)
            return -1;
    return digits ? v : -1;
}

/* A header's checksum: the sum of its bytes with the checksum field read as spaces. */
static int checksum_ok(const uint8_t *h) {
    int64_t sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return sum == octal(h + 148, 8);
}

static int contains(const uint8_t *data, int64_t length, const char *text) {
    size_t n = strlen(text);
    for (int64_t i = 0; i + (int64_t)n <= length; i++)
        if (memcmp(data + i, text, n) == 0)
            return 1;
    return 0;
}

enum { KEY_AT, KEY_LEN, JPG_AT, JPG_LEN, CLS_AT, CLS_LEN, FIELDS };

/* Walk the tar headers of a shard: per sample (consecutive members KEY.ext), where its key, its
 * .jpg and its .cls lie. Returns the sample count, or -1 with *bad at the damaged header's offset
 * and *why saying what is wrong with it. */
static int64_t walk_tar(const uint8_t *buf, int64_t len, int64_t *out, int64_t capacity, int64_t *bad,
                        const char **why) {
    int64_t pos = 0, n = 0, key_at = -1, key_len = 0;
    while (pos + 512 <= len) {
        const uint8_t *h = buf + pos;
        if (h[0] == 0)
            return n; /* the end-of-archive blocks */
        *bad = pos;
        if (!checksum_ok(h))
            return *why = "a tar header fails its checksum", -1;
        int64_t size = octal(h + 124, 12);
        if (size < 0 || pos + 512 + size > len)
            return *why = "a tar header's size runs past the end of the shard", -1;
        if (h[156] == 'x' || h[156] == 'g') { /* pax metadata (a fractional mtime, say): skip it */
            if (contains(buf + pos + 512, size, "path="))
                return *why = "a pax header renames a member (member names over 100 characters are not read)", -1;
            pos += 512 + (size + 511) / 512 * 512;
            continue;
        }
        if (h[156] != '0' && h[156] != 0)
            return *why = "a tar member is not a plain file (prepare writes only plain files)", -1;
        int name_len = 0;
        while (name_len < 100 && h[name_len])
            name_len++;
        int dot = 0;
        while (dot < name_len && h[dot] != '.')
            dot++;
        if (dot == 0 || dot == name_len)
            return *why = "a tar member's name is not KEY.ext", -1;
        if (key_at < 0 || dot != key_len || memcmp(buf + key_at, h, (size_t)dot) != 0) {
            if (n == capacity)
                return *why = "more samples than a shard of this size can hold", -1;
            int64_t *s = out + FIELDS * n++;
            s[KEY_AT] = key_at = pos, s[KEY_LEN] = key_len = dot;
            s[JPG_AT] = s[CLS_AT] = -1, s[JPG_LEN] = s[CLS_LEN] = 0;
        }
        int64_t *s = out + FIELDS * (n - 1);
        const char *ext = (const char *)h + dot + 1;
        int ext_len = name_len - dot - 1;
        if (ext_len == 3 && memcmp(ext, "jpg", 3) == 0)
            s[JPG_AT] = pos + 512, s[JPG_LEN] = size;
        else if (ext_len == 3 && memcmp(ext, "cls", 3) == 0)
            s[CLS_AT] = pos + 512, s[CLS_LEN] = size;
        pos += 512 + (size + 511) / 512 * 512;
    }
    *bad = pos;
    return *why = "the shard ends without the end-of-archive blocks", -1;
}

/* ------------------------------------------------------------------ Python bindings */

/* The images of a call: index i is bytes [offsets[i], offsets[i] + lengths[i]) of buffers[which[i]]. */
typedef struct {
    Py_buffer *views;
    int *held;
    Py_ssize_t count;
} sources;

static void release_sources(sources *s) {
    for (Py_ssize_t i = 0; i < s->count; i++)
        if (s->held[i])
            PyBuffer_Release(&s->views[i]);
    PyMem_Free(s->views);
    PyMem_Free(s->held);
}

static int get_array(PyObject *obj, Py_buffer *view, Py_ssize_t n, Py_ssize_t itemsize, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len < n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, %zd needed", name, view->len, n * itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Pointers to each image's bytes, checked against its buffer; buffers held until release. */
static int image_pointers(PyObject *buffers, const int32_t *which, const int64_t *offsets, const int64_t *lengths,
                          Py_ssize_t n, sources *s, const uint8_t **data) {
    if (!PyTuple_Check(buffers)) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a tuple");
        return -1;
    }
    s->count = PyTuple_Size(buffers);
    s->views = PyMem_Calloc(s->count ? s->count : 1, sizeof(Py_buffer));
    s->held = PyMem_Calloc(s->count ? s->count : 1, sizeof(int));
    if (!s->views || !s->held) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int b = which[i];
        if (b < 0 || b >= s->count) {
            PyErr_Format(PyExc_IndexError, "image %zd: buffer %d of %zd", i, b, s->count);
            return -1;
        }
        if (!s->held[b]) {
            if (PyObject_GetBuffer(PyTuple_GetItem(buffers, b), &s->views[b], PyBUF_SIMPLE) < 0)
                return -1;
            s->held[b] = 1;
        }
        if (offsets[i] < 0 || lengths[i] < 0 || offsets[i] + lengths[i] > s->views[b].len) {
            PyErr_Format(PyExc_ValueError, "image %zd: bytes %lld+%lld outside its buffer of %zd", i,
                         (long long)offsets[i], (long long)lengths[i], s->views[b].len);
            return -1;
        }
        data[i] = (const uint8_t *)s->views[b].buf + offsets[i];
    }
    return 0;
}

/* The images argument common to the calls below, with their bytes located and held. */
typedef struct {
    Py_ssize_t n;
    Py_buffer which, offsets, lengths;
    sources s;
    const uint8_t **data;
} image_args;

static int open_images(image_args *a, PyObject *buffers, Py_ssize_t n, PyObject *which, PyObject *offsets,
                       PyObject *lengths) {
    a->n = n;
    if (get_array(which, &a->which, n, 4, 0, "which") || get_array(offsets, &a->offsets, n, 8, 0, "offsets") ||
        get_array(lengths, &a->lengths, n, 8, 0, "lengths"))
        return -1;
    a->data = PyMem_Malloc(sizeof(*a->data) * (n ? n : 1));
    if (!a->data) {
        PyErr_NoMemory();
        return -1;
    }
    return image_pointers(buffers, a->which.buf, a->offsets.buf, a->lengths.buf, n, &a->s, a->data);
}

static size_t image_length(const image_args *a, Py_ssize_t i) {
    return (size_t)((const int64_t *)a->lengths.buf)[i];
}

static void close_images(image_args *a) {
    if (a->s.views)
        release_sources(&a->s);
    PyMem_Free(a->data);
    Py_buffer *all[] = {&a->which, &a->offsets, &a->lengths};
    for (int i = 0; i < 3; i++)
        if (all[i]->obj)
            PyBuffer_Release(all[i]);
}

static void release_arrays(Py_buffer **arrays, int count) {
    for (int i = 0; i < count; i++)
        if (arrays[i]->obj)
            PyBuffer_Release(arrays[i]);
}

static PyObject *py_image_sizes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffers, *which, *offsets, *lengths, *dims_o, *status_o, *result = NULL;
    Py_ssize_t n;
    int check_markers = 0;
    if (!PyArg_ParseTuple(args, "OnOOOOO|p", &buffers, &n, &which, &offsets, &lengths, &dims_o, &status_o,
                          &check_markers))
        return NULL;
    image_args a = {0};
    Py_buffer dims = {0}, status = {0};
    if (open_images(&a, buffers, n, which, offsets, lengths) == 0 && get_array(dims_o, &dims, n, 8, 1, "dims") == 0 &&
        get_array(status_o, &status, n, 4, 1, "status") == 0) {
        Py_BEGIN_ALLOW_THREADS
        context x;
        open_context(&x);
        for (Py_ssize_t i = 0; i < n; i++)
            ((int32_t *)status.buf)[i] = read_size(&x, a.data[i], image_length(&a, i), (int32_t *)dims.buf + 2 * i,
                                                    check_markers);
        close_context(&x);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    close_images(&a);
    release_arrays((Py_buffer *[]){&dims, &status}, 2);
    return result;
}

static PyObject *py_decode_crops(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffers, *which, *offsets, *lengths, *boxes_o, *flips_o, *out_o, *status_o, *result = NULL;
    Py_ssize_t n, first;
    int size;
    if (!PyArg_ParseTuple(args, "OnOOOOOOniO", &buffers, &n, &which, &offsets, &lengths, &boxes_o, &flips_o, &out_o,
                          &first, &size, &status_o))
        return NULL;
    if (size < 1 || first < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be positive and first not negative");
        return NULL;
    }
    image_args a = {0};
    Py_buffer boxes = {0}, flips = {0}, out = {0}, status = {0};
    Py_ssize_t slot = (Py_ssize_t)size * size * 3;
    if (open_images(&a, buffers, n, which, offsets, lengths) == 0 &&
        get_array(boxes_o, &boxes, n, 16, 0, "boxes") == 0 && get_array(flips_o, &flips, n, 1, 0, "flips") == 0 &&
        get_array(out_o, &out, first + n, slot, 1, "out") == 0 && get_array(status_o, &status, n, 4, 1, "status") == 0) {
        Py_BEGIN_ALLOW_THREADS
        context x;
        open_context(&x);
        for (Py_ssize_t i = 0; i < n; i++) {
            job j = {.data = a.data[i], .length = image_length(&a, i), .flip = ((uint8_t *)flips.buf)[i] != 0,
                     .size = size, .out = (uint8_t *)out.buf + (first + i) * slot};
            memcpy(j.box, (float *)boxes.buf + 4 * i, sizeof(j.box));
            ((int32_t *)status.buf)[i] = decode_one(&x, &j);
        }
        close_context(&x);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    close_images(&a);
    release_arrays((Py_buffer *[]){&boxes, &flips, &out, &status}, 4);
    return result;
}

static PyObject *py_gather(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *buffers, *which, *offsets, *lengths, *out_o, *result = NULL;
    Py_ssize_t n, at;
    if (!PyArg_ParseTuple(args, "OnOOOOn", &buffers, &n, &which, &offsets, &lengths, &out_o, &at))
        return NULL;
    image_args a = {0};
    Py_buffer out = {0};
    if (open_images(&a, buffers, n, which, offsets, lengths) == 0 && get_array(out_o, &out, 0, 1, 1, "out") == 0) {
        Py_ssize_t total = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            total += (Py_ssize_t)image_length(&a, i);
        if (at < 0 || at + total > out.len) {
            PyErr_Format(PyExc_ValueError, "out holds %zd bytes, %zd needed", out.len, at + total);
        } else {
            Py_BEGIN_ALLOW_THREADS
            uint8_t *o = (uint8_t *)out.buf + at;
            for (Py_ssize_t i = 0; i < n; i++) {
                memcpy(o, a.data[i], image_length(&a, i));
                o += image_length(&a, i);
            }
            Py_END_ALLOW_THREADS
            result = Py_NewRef(Py_None);
        }
    }
    close_images(&a);
    release_arrays((Py_buffer *[]){&out}, 1);
    return result;
}

static PyObject *py_tar_index(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O", &obj))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int64_t capacity = view.len / 1536 + 1; /* a sample is at least three 512-byte blocks... */
    int64_t *out = PyMem_Malloc(sizeof(int64_t) * FIELDS * capacity);
    int64_t n = -1, bad = 0;
    const char *why = NULL;
    if (out) {
        Py_BEGIN_ALLOW_THREADS
        n = walk_tar(view.buf, view.len, out, capacity, &bad, &why);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (!out)
        return PyErr_NoMemory();
    PyObject *table = NULL;
    if (n < 0)
        PyErr_Format(PyExc_ValueError, "%s (at byte %lld)", why, (long long)bad);
    else
        table = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)(sizeof(int64_t) * FIELDS * n));
    PyMem_Free(out);
    return table;
}

static PyObject *py_use_simd(PyObject *self, PyObject *args) {
    (void)self;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z", &name))
        return NULL;
    if (choose_simd(name) < 0) {
        PyErr_Format(PyExc_ValueError, "%s is not available here", name);
        return NULL;
    }
    return PyUnicode_FromString(simd);
}

static PyMethodDef methods[] = {
    {"use_simd", py_use_simd, METH_VARARGS,
     "use_simd(name=None) -> name: resample with 'AVX2' or 'SSE2' (for the tests), or the best one here (None)."},
    {"gather", py_gather, METH_VARARGS,
     "gather(buffers, n, which, offsets, lengths, out, at): copy the n images' bytes end to end into out from "
     "byte `at` (the JPEGs of a --decode gpu batch). The GIL is released."},
    {"tar_index", py_tar_index, METH_VARARGS,
     "tar_index(shard) -> bytes: int64 rows (key_at, key_len, jpg_at, jpg_len, cls_at, cls_len), one per sample "
     "(consecutive members KEY.ext) of a tar in memory; -1 where a sample lacks the member. ValueError, with "
     "the byte offset, for a damaged header."},
    {"image_sizes", py_image_sizes, METH_VARARGS,
     "image_sizes(buffers, n, which, offsets, lengths, dims, status, check_markers=False): width and height of n "
     "JPEGs from their headers into dims (int32 n x 2); status (int32 n) 0 or the failure, CORRUPT also where "
     "check_markers finds the marker structure broken. The GIL is released."},
    {"decode_crops", py_decode_crops, METH_VARARGS,
     "decode_crops(buffers, n, which, offsets, lengths, boxes, flips, out, first, size, status): decode each "
     "image's box (float32 n x 4: left, top, right, bottom), resize it to size x size, flip where flips (uint8) "
     "is set, into slot first + i of out (uint8 slots of size x size x 3). The GIL is released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_jpegcrop", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__jpegcrop(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    choose_simd(NULL);
    char version[32];
    snprintf(version, sizeof(version), "%d.%d.%d", LIBJPEG_TURBO_VERSION_NUMBER / 1000000,
             LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000, LIBJPEG_TURBO_VERSION_NUMBER % 1000);
    if (PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION", version) < 0 ||

        PyModule_AddIntConstant(m, "OK", OK) < 0 || PyModule_AddIntConstant(m, "REFUSED", REFUSED) < 0 ||
        PyModule_AddIntConstant(m, "CORRUPT", CORRUPT) < 0 || PyModule_AddIntConstant(m, "NOT_JPEG", NOT_JPEG) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
