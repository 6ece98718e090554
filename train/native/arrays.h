/* Checked arguments for the native modules. Every array a caller passes is checked for its item
 * type, shape, contiguity and writability, and every image's bytes against the buffer they lie in,
 * before the GIL is released: a wrong argument is a TypeError or ValueError, never a read or a
 * write outside what the caller gave. The modules stay importable on their own, so these checks
 * cannot be left to a Python wrapper. */
#ifndef NATIVE_ARRAYS_H
#define NATIVE_ARRAYS_H

#include <Python.h>
#include <stdint.h>

/* What an array's items must be: signed or unsigned integers, floats, or flags (bool or uint8). */
enum item_kind { SIGNED_INT, UNSIGNED_INT, FLOAT, FLAG };

#define ANY_LENGTH (-1) /* in a shape: whatever length the array has */

/* A C-contiguous array of `ndim` dimensions whose lengths are `shape` (ANY_LENGTH matches any),
 * holding items of `kind` and `itemsize` bytes; writable where asked. Returns 0, or -1 with a
 * TypeError or ValueError naming `name`. Release the view with release_view. */
int get_array(PyObject *obj, Py_buffer *view, const char *name, enum item_kind kind, Py_ssize_t itemsize, int ndim,
              const Py_ssize_t *shape, int writable);

/* Release a view that get_array or PyObject_GetBuffer may have filled (a no-op if it did not). */
void release_view(Py_buffer *view);

/* n images: image i is bytes [offsets[i], offsets[i] + lengths[i]) of buffers[which[i]], located
 * and checked by open_images; the buffers stay held (and their memory valid) until close_images. */
typedef struct {
    Py_ssize_t n;
    const uint8_t **data;
    size_t *length;
    Py_buffer *views; /* one per buffer of the tuple, filled for the buffers images lie in */
    Py_ssize_t buffer_count;
} images;

/* `buffers` a tuple of bytes-like objects; `which` int32 (n,), `offsets` and `lengths` int64 (n,).
 * Returns 0, or -1 with an exception naming the image at fault. Call close_images either way. */
int open_images(images *im, PyObject *buffers, PyObject *which, PyObject *offsets, PyObject *lengths);
void close_images(images *im);

#endif
