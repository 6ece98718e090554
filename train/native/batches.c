/* Batches on the host: the normalisation of a decoded uint8 batch into float32, for the CPU device
 * (train/device_batches.py wraps it). One pass over the batch in the calling thread, the GIL
 * released: torch's three (float copy, subtract, divide) in its OpenMP pool cost 0.23 ms an image
 * on 2 cores and spun the pool's threads against the decoding ones.
 *
 * Every value is ((float)v - mean) / std in float32, the two operations torch's
 * x.float().sub_(mean).div_(std) performs, each rounded once: the output is bit for bit torch's. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "arrays.h"
#include "cpu_features.h"

#if FLT_EVAL_METHOD != 0
#error "float arithmetic must round to float at each operation (FLT_EVAL_METHOD 0) to match torch's bits"
#endif

enum { CHANNELS = 3, BLOCK = 16 * CHANNELS /* 16 pixels: a whole number of SIMD vectors and of pixels */ };

/* The one formula, rounded as torch rounds it: a subtraction, then a division, in float32. */
static inline float normalised(uint8_t value, float mean, float std) {
    return ((float)value - mean) / std;
}

/* Pixels in (R, G, B) order, out in the same order (channels_last): the channels repeat every 3
 * values, so a block of BLOCK values sees one fixed pattern of means and stds, which the compiler
 * turns into vector arithmetic. */
static void normalise_interleaved(const uint8_t *src, float *out, size_t values, const float *mean,
                                  const float *std) {
    float means[BLOCK], stds[BLOCK];
    for (int k = 0; k < BLOCK; k++)
        means[k] = mean[k % CHANNELS], stds[k] = std[k % CHANNELS];
    size_t i = 0;
    for (; i + BLOCK <= values; i += BLOCK)
        for (int k = 0; k < BLOCK; k++)
            out[i + k] = normalised(src[i + k], means[k], stds[k]);
    for (; i < values; i++)
        out[i] = normalised(src[i], mean[i % CHANNELS], std[i % CHANNELS]);
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2")))
enum { LANES = 8, WIDE_BLOCK = LANES * CHANNELS /* 8 pixels: 3 vectors, each its own channel pattern */ };

/* The same, 8 values a vector, with streaming stores: the batch is far larger than the caches, and
 * a plain store would first read each line of `out` it writes (a third more memory traffic) only
 * to evict it again. `out` 32-byte aligned (torch's allocations are 64). */
AVX2 static void normalise_interleaved_avx2(const uint8_t *src, float *out, size_t values, const float *mean,
                                            const float *std) {
    __m256 means[CHANNELS], stds[CHANNELS];
    for (int v = 0; v < CHANNELS; v++) {
        float m[LANES], s[LANES];
        for (int k = 0; k < LANES; k++)
            m[k] = mean[(v * LANES + k) % CHANNELS], s[k] = std[(v * LANES + k) % CHANNELS];
        means[v] = _mm256_loadu_ps(m), stds[v] = _mm256_loadu_ps(s);
    }
    size_t i = 0;
    for (; i + WIDE_BLOCK <= values; i += WIDE_BLOCK)
        for (int v = 0; v < CHANNELS; v++) {
            __m128i bytes = _mm_loadl_epi64((const __m128i *)(src + i + v * LANES));
            __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); /* exact: integers below 2^24 */
            _mm256_stream_ps(out + i + v * LANES, _mm256_div_ps(_mm256_sub_ps(x, means[v]), stds[v]));
        }
    _mm_sfence(); /* the streamed lines visible before another thread reads the batch */
    for (; i < values; i++)
        out[i] = normalised(src[i], mean[i % CHANNELS], std[i % CHANNELS]);
}

static int runs_avx2(const float *out) {
    return cpu_has_avx2() && ((uintptr_t)out % 32) == 0;
}
#endif

/* Pixels in (R, G, B) order, out as one plane per channel (NCHW): each channel's 256 values looked
 * up in a table made with the same formula (the scatter to three planes does not vectorise). */
static void normalise_planar(const uint8_t *src, float *out, size_t images, size_t pixels, const float *mean,
                             const float *std) {
    float table[CHANNELS][256];
    for (int c = 0; c < CHANNELS; c++)
        for (int v = 0; v < 256; v++)
            table[c][v] = normalised((uint8_t)v, mean[c], std[c]);
    for (size_t n = 0; n < images; n++) {
        const uint8_t *image = src + n * pixels * CHANNELS;
        float *planes = out + n * pixels * CHANNELS;
        for (size_t p = 0; p < pixels; p++)
            for (int c = 0; c < CHANNELS; c++)
                planes[c * pixels + p] = table[c][image[p * CHANNELS + c]];
    }
}

/* mean and std: float32 (3,), finite, std above 0 (what the library accepts, in 0-255 units). */
static int check_statistics(const float *mean, const float *std) {
    for (int c = 0; c < CHANNELS; c++) {
        if (!isfinite(mean[c]) || !isfinite(std[c]) || !(std[c] > 0)) {
            PyErr_Format(PyExc_ValueError, "mean and std must be finite and std above 0 (channel %d: mean %g, std %g)",
                         c, (double)mean[c], (double)std[c]);
            return -1;
        }
    }
    return 0;
}

static PyObject *py_normalise(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"images", "out", "mean", "std", "planar", NULL};
    PyObject *images_o, *out_o, *mean_o, *std_o;
    int planar = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|p", keywords, &images_o, &out_o, &mean_o, &std_o, &planar))
        return NULL;
    Py_buffer images = {0}, out = {0}, mean = {0}, std = {0};
    const Py_ssize_t any_image[4] = {ANY_LENGTH, ANY_LENGTH, ANY_LENGTH, CHANNELS}, three[1] = {CHANNELS};
    PyObject *result = NULL;
    if (get_array(images_o, &images, "images", UNSIGNED_INT, 1, 4, any_image, 0) < 0 ||
        get_array(mean_o, &mean, "mean", FLOAT, 4, 1, three, 0) < 0 ||
        get_array(std_o, &std, "std", FLOAT, 4, 1, three, 0) < 0)
        goto done;
    Py_ssize_t n = images.shape[0], height = images.shape[1], width = images.shape[2];
    const Py_ssize_t interleaved_shape[4] = {n, height, width, CHANNELS}, planar_shape[4] = {n, CHANNELS, height, width};
    if (get_array(out_o, &out, "out", FLOAT, 4, 4, planar ? planar_shape : interleaved_shape, 1) < 0)
        goto done;
    const float *mean_f = mean.buf, *std_f = std.buf;
    if (check_statistics(mean_f, std_f) < 0)
        goto done;
    size_t pixels = (size_t)height * (size_t)width; /* the shapes are the buffers': no overflow */
    Py_BEGIN_ALLOW_THREADS
    if (planar)
        normalise_planar(images.buf, out.buf, (size_t)n, pixels, mean_f, std_f);
#if defined(__x86_64__)
    else if (runs_avx2(out.buf))
        normalise_interleaved_avx2(images.buf, out.buf, (size_t)n * pixels * CHANNELS, mean_f, std_f);
#endif
    else
        normalise_interleaved(images.buf, out.buf, (size_t)n * pixels * CHANNELS, mean_f, std_f);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    release_view(&images);
    release_view(&out);
    release_view(&mean);
    release_view(&std);
    return result;
}

static PyMethodDef methods[] = {
    {"normalise", (PyCFunction)(void (*)(void))py_normalise, METH_VARARGS | METH_KEYWORDS,
     "normalise(images, out, mean, std, planar=False): out = (float32(images) - mean) / std, per channel, each "
     "operation rounded to float32 as torch's. images: uint8 (n, h, w, 3); out: float32 (n, h, w, 3), or with "
     "planar (n, 3, h, w); mean, std: float32 (3,), finite, std above 0. All C-contiguous, out writable. The GIL "
     "is released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batches", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__batches(void) {
    return PyModule_Create(&module);
}
