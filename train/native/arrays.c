/* Checked arguments for the native modules: see arrays.h. */
#include "arrays.h"

#include <stdio.h>
#include <string.h>

static const int little_endian_host = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;

/* The kind and size of a buffer's items from its struct-module format ("i", "<q", "?", ...).
 * Returns 0 for formats that are not one plain number (structs, big-endian items on this host). */
static int item_type(const char *format, enum item_kind *kind, Py_ssize_t *size, int *is_uint8) {
    if (format == NULL)
        format = "B"; /* the buffer protocol's default: unsigned bytes */
    int native_sizes = 1;
    if (*format == '@') {
        format++;
    } else if (*format == '=' || *format == '<' || *format == '>' || *format == '!') {
        int little = *format == '=' ? little_endian_host : *format == '<';
        if (little != little_endian_host)
            return 0;
        native_sizes = 0;
        format++;
    }
    if (format[0] == 0 || format[1] != 0)
        return 0;
    *is_uint8 = format[0] == 'B';
    switch (format[0]) {
    case '?': *kind = FLAG, *size = 1; return 1;
    case 'b': *kind = SIGNED_INT, *size = 1; return 1;
    case 'B': *kind = UNSIGNED_INT, *size = 1; return 1;
    case 'h': *kind = SIGNED_INT, *size = 2; return 1;
    case 'H': *kind = UNSIGNED_INT, *size = 2; return 1;
    case 'i': *kind = SIGNED_INT, *size = 4; return 1;
    case 'I': *kind = UNSIGNED_INT, *size = 4; return 1;
    case 'l': *kind = SIGNED_INT, *size = native_sizes ? (Py_ssize_t)sizeof(long) : 4; return 1;
    case 'L': *kind = UNSIGNED_INT, *size = native_sizes ? (Py_ssize_t)sizeof(long) : 4; return 1;
    case 'q': *kind = SIGNED_INT, *size = 8; return 1;
    case 'Q': *kind = UNSIGNED_INT, *size = 8; return 1;
    case 'n': *kind = SIGNED_INT, *size = (Py_ssize_t)sizeof(Py_ssize_t); return 1;
    case 'N': *kind = UNSIGNED_INT, *size = (Py_ssize_t)sizeof(size_t); return 1;
    case 'e': *kind = FLOAT, *size = 2; return 1;
    case 'f': *kind = FLOAT, *size = 4; return 1;
    case 'd': *kind = FLOAT, *size = 8; return 1;
    default: return 0;
    }
}

/* "int32", "float32", "bool or uint8", for messages. */
static void describe_type(char *text, size_t room, enum item_kind kind, Py_ssize_t itemsize) {
    static const char *names[] = {"int", "uint", "float"};
    if (kind == FLAG)
        snprintf(text, room, "bool or uint8");
    else
        snprintf(text, room, "%s%d", names[kind], (int)(8 * itemsize));
}

/* "(n, 4)" for a shape, "any" standing for ANY_LENGTH, for messages. */
static void describe_shape(char *text, size_t room, int ndim, const Py_ssize_t *shape) {
    size_t at = (size_t)snprintf(text, room, "(");
    for (int d = 0; d < ndim && at < room; d++) {
        if (shape[d] == ANY_LENGTH)
            at += (size_t)snprintf(text + at, room - at, d ? ", any" : "any");
        else
            at += (size_t)snprintf(text + at, room - at, d ? ", %zd" : "%zd", shape[d]);
    }
    if (at < room)
        snprintf(text + at, room - at, ndim == 1 ? ",)" : ")");
}

void release_view(Py_buffer *view) {
    if (view->obj)
        PyBuffer_Release(view);
}

int get_array(PyObject *obj, Py_buffer *view, const char *name, enum item_kind kind, Py_ssize_t itemsize, int ndim,
              const Py_ssize_t *shape, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous%s array", name, writable ? ", writable" : "");
        return -1;
    }
    enum item_kind found;
    Py_ssize_t size;
    int is_uint8;
    int type_ok = item_type(view->format, &found, &size, &is_uint8) && size == view->itemsize;
    if (type_ok && kind == FLAG)
        type_ok = found == FLAG || is_uint8;
    else if (type_ok)
        type_ok = found == kind && size == itemsize;
    if (!type_ok) {
        char expected[32];
        describe_type(expected, sizeof(expected), kind, itemsize);
        PyErr_Format(PyExc_TypeError, "%s must hold %s items (its buffer format is '%s')", name, expected,
                     view->format ? view->format : "B");
        release_view(view);
        return -1;
    }
    int shape_ok = view->ndim == ndim;
    for (int d = 0; shape_ok && d < ndim; d++)
        shape_ok = shape[d] == ANY_LENGTH || (view->shape && view->shape[d] == shape[d]);
    if (!shape_ok) {
        char expected[96], found[96] = "";
        describe_shape(expected, sizeof(expected), ndim, shape);
        if (view->shape)
            describe_shape(found, sizeof(found), view->ndim, view->shape);
        PyErr_Format(PyExc_ValueError, "%s must have shape %s, not %s", name, expected,
                     view->shape ? found : "(unknown)");
        release_view(view);
        return -1;
    }
    return 0;
}

/* Where image i lies, checked: its buffer held, its bytes inside it (no overflow in the sums). */
static int locate(images *im, PyObject *buffers, Py_ssize_t i, int32_t which, int64_t offset, int64_t length) {
    if (which < 0 || which >= im->buffer_count) {
        PyErr_Format(PyExc_IndexError, "image %zd is in buffer %d, but there are %zd", i, (int)which,
                     im->buffer_count);
        return -1;
    }
    Py_buffer *view = &im->views[which];
    if (!view->obj && PyObject_GetBuffer(PyTuple_GetItem(buffers, which), view, PyBUF_SIMPLE) < 0)
        return -1;
    if (offset < 0 || length < 0 || offset > (int64_t)view->len || length > (int64_t)view->len - offset) {
        PyErr_Format(PyExc_ValueError, "image %zd: bytes %lld+%lld lie outside its buffer of %zd bytes", i,
                     (long long)offset, (long long)length, view->len);
        return -1;
    }
    im->data[i] = (const uint8_t *)view->buf + offset;
    im->length[i] = (size_t)length;
    return 0;
}

int open_images(images *im, PyObject *buffers, PyObject *which_o, PyObject *offsets_o, PyObject *lengths_o) {
    memset(im, 0, sizeof(*im));
    if (!PyTuple_Check(buffers)) {
        PyErr_SetString(PyExc_TypeError, "buffers must be a tuple of bytes-like objects");
        return -1;
    }
    Py_buffer which = {0}, offsets = {0}, lengths = {0};
    const Py_ssize_t any[1] = {ANY_LENGTH};
    int result = -1;
    if (get_array(which_o, &which, "which", SIGNED_INT, 4, 1, any, 0) < 0)
        goto done;
    Py_ssize_t n = which.shape[0];
    const Py_ssize_t shape[1] = {n};
    if (get_array(offsets_o, &offsets, "offsets", SIGNED_INT, 8, 1, shape, 0) < 0 ||
        get_array(lengths_o, &lengths, "lengths", SIGNED_INT, 8, 1, shape, 0) < 0)
        goto done;
    im->n = n;
    im->buffer_count = PyTuple_Size(buffers);
    im->views = PyMem_Calloc(im->buffer_count ? (size_t)im->buffer_count : 1, sizeof(Py_buffer));
    im->data = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*im->data));
    im->length = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*im->length));
    if (!im->views || !im->data || !im->length) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (locate(im, buffers, i, ((const int32_t *)which.buf)[i], ((const int64_t *)offsets.buf)[i],
                   ((const int64_t *)lengths.buf)[i]) < 0)
            goto done;
    result = 0;
done:
    release_view(&which);
    release_view(&offsets);
    release_view(&lengths);
    return result;
}

void close_images(images *im) {
    for (Py_ssize_t b = 0; im->views && b < im->buffer_count; b++)
        release_view(&im->views[b]);
    PyMem_Free(im->views);
    PyMem_Free(im->data);
    PyMem_Free(im->length);
    memset(im, 0, sizeof(*im));
}
