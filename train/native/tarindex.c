/* A shard's index: where each sample's key, .jpg and .cls lie in a WebDataset tar in memory, from
 * its headers alone (shard-format code; train/shard_index.py wraps it). A damaged header is a
 * ValueError with its byte offset, never a read outside the shard; the table grows with the samples
 * found, not with the shard's size. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { KEY_AT, KEY_LEN, JPG_AT, JPG_LEN, CLS_AT, CLS_LEN, FIELDS };

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

/* The table's rows, FIELDS int64 each, grown by doubling. */
typedef struct {
    int64_t *rows;
    int64_t count, capacity;
} table;

static int64_t *new_row(table *t) {
    if (t->count == t->capacity) {
        int64_t capacity = t->capacity ? 2 * t->capacity : 1024;
        int64_t *grown = realloc(t->rows, sizeof(int64_t) * FIELDS * (size_t)capacity);
        if (!grown)
            return NULL;
        t->rows = grown, t->capacity = capacity;
    }
    return t->rows + FIELDS * t->count++;
}

/* Walk the tar headers of a shard: per sample (consecutive members KEY.ext), where its key, its
 * .jpg and its .cls lie (-1 where it has none). Returns 0, or -1 with *bad at the damaged header's
 * offset and *why saying what is wrong with it. */
static int walk_tar(const uint8_t *buf, int64_t len, table *t, int64_t *bad, const char **why) {
    int64_t pos = 0, key_at = -1, key_len = 0;
    while (pos + 512 <= len) {
        const uint8_t *h = buf + pos;
        if (h[0] == 0)
            return 0; /* the end-of-archive blocks */
        *bad = pos;
        if (!checksum_ok(h))
            return *why = "a tar header fails its checksum", -1;
        int64_t size = octal(h + 124, 12);
        if (size < 0 || size > len - pos - 512)
            return *why = "a tar header's size runs past the end of the shard", -1;
        int64_t next = pos + 512 + (size + 511) / 512 * 512;
        if (h[156] == 'x' || h[156] == 'g') { /* pax metadata (a fractional mtime, say): skip it */
            if (contains(buf + pos + 512, size, "path="))
                return *why = "a pax header renames a member (member names over 100 characters are not read)", -1;
            pos = next;
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
            int64_t *s = new_row(t);
            if (!s)
                return *why = NULL, -1; /* out of memory: MemoryError, not damage */
            s[KEY_AT] = key_at = pos, s[KEY_LEN] = key_len = dot;
            s[JPG_AT] = s[CLS_AT] = -1, s[JPG_LEN] = s[CLS_LEN] = 0;
        }
        int64_t *s = t->rows + FIELDS * (t->count - 1);
        const char *ext = (const char *)h + dot + 1;
        int ext_len = name_len - dot - 1;
        if (ext_len == 3 && memcmp(ext, "jpg", 3) == 0)
            s[JPG_AT] = pos + 512, s[JPG_LEN] = size;
        else if (ext_len == 3 && memcmp(ext, "cls", 3) == 0)
            s[CLS_AT] = pos + 512, s[CLS_LEN] = size;
        pos = next;
    }
    *bad = pos;
    return *why = "the shard ends without the end-of-archive blocks", -1;
}

static PyObject *py_tar_index(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"shard", NULL};
    PyObject *obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", keywords, &obj))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    table t = {NULL, 0, 0};
    int64_t bad = 0;
    const char *why = NULL;
    int walked;
    Py_BEGIN_ALLOW_THREADS
    walked = walk_tar(view.buf, view.len, &t, &bad, &why);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (walked < 0 && why == NULL)
        PyErr_NoMemory();
    else if (walked < 0)
        PyErr_Format(PyExc_ValueError, "%s (at byte %lld)", why, (long long)bad);
    else
        result = PyBytes_FromStringAndSize((const char *)t.rows, (Py_ssize_t)(sizeof(int64_t) * FIELDS * t.count));
    free(t.rows);
    return result;
}

static PyMethodDef methods[] = {
    {"tar_index", (PyCFunction)(void (*)(void))py_tar_index, METH_VARARGS | METH_KEYWORDS,
     "tar_index(shard) -> bytes: int64 rows (key_at, key_len, jpg_at, jpg_len, cls_at, cls_len), one per sample "
     "(consecutive members KEY.ext) of a tar in memory; -1 where a sample lacks the member. ValueError, with "
     "the byte offset, for a damaged header. The GIL is released."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tarindex", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tarindex(void) {
    return PyModule_Create(&module);
}
