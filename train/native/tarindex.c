/* A shard's index: where each sample's key, .jpg and .cls lie in a WebDataset tar in memory, from
 * its headers alone (shard-format code; train/shard_index.py wraps it). A damaged header is a
 * ValueError with its byte offset, never a read outside the shard; the table grows with the samples
 * found, not with the shard's size.
 *
 * And the shards' maps (map_shard, unmap_shard), watched: a shard truncated in place under its map (by another
 * program: prepare writes new files and renames them) made the next read of a page past its new end a SIGBUS,
 * which killed the process with no word, in a decode thread or anywhere Python sliced the map. A SIGBUS inside a
 * watched map now puts zero pages over the rest of it, marks it, and returns: the read goes on, finds zeros (a
 * damaged JPEG, at worst), and the loader, which asks `unreadable()` after each batch (no system call), raises
 * its one-line damaged-shard error before the batch is given out. A SIGBUS anywhere else goes to the handler
 * that was there before (or kills the process as it did). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* ---------------------------------------------------------------- the watched maps */

/* A fixed table (the handler may not allocate or lock): 65,536 maps, ten times ImageNet-21k's shards. A map
 * that would find no free slot is refused (OSError), and unmap_shard unmaps only what the table holds: no address
 * given to it unmaps anything else. */
#define WATCHED 65536
typedef struct {
    _Atomic uintptr_t start, end; /* start 0: a free slot */
    atomic_int hit;
} watched_map;
static watched_map watched[WATCHED];
static atomic_int high_water;  /* slots [0, high_water) have been used: the handler looks no further */
static atomic_long hit_maps;   /* watched maps a SIGBUS has hit, not yet unmapped */
static struct sigaction before; /* the SIGBUS handler there before ours */
static long page_size;

/* The rest of a watched map from the faulting page on, zero pages, marked hit; 0 where `at` is in no watched map
 * (or the zero pages could not be put there). Async-signal-safe: atomics and mmap only. */
static int zero_the_rest(uintptr_t at) {
    int used = atomic_load(&high_water);
    for (int i = 0; i < used; i++) {
        uintptr_t start = atomic_load(&watched[i].start), end = atomic_load(&watched[i].end);
        if (start == 0 || at < start || at >= end)
            continue;
        uintptr_t page = at & ~(uintptr_t)(page_size - 1);
        void *zeros = mmap((void *)page, end - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (zeros == MAP_FAILED)
            return 0;
        if (atomic_exchange(&watched[i].hit, 1) == 0)
            atomic_fetch_add(&hit_maps, 1);
        return 1;
    }
    return 0;
}

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    int saved = errno; /* the interrupted code's, which mmap may change */
    int zeroed = zero_the_rest((uintptr_t)info->si_addr);
    errno = saved;
    if (zeroed)
        return; /* the faulting read runs again, on zeros */
    if (before.sa_flags & SA_SIGINFO) {
        before.sa_sigaction(sig, info, context);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
        before.sa_handler(sig);
    } else { /* the default: the read faults again, and the kernel ends the process as it always did */
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        sigaction(SIGBUS, &fallback, NULL);
    }
}

/* Ours as the SIGBUS handler, once a process: the one there before (Python's faulthandler's, say) is kept as the
 * one to pass other faults to. A handler set after ours (faulthandler enabled later) stays on top: a SIGBUS is then
 * what it was before, never a loop between the two. Under the GIL, as all that changes the table. */
static int installed;
static int install_handler(void) {
    if (installed)
        return 0;
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) < 0)
        return -1;
    struct sigaction ours;
    memset(&ours, 0, sizeof ours);
    ours.sa_sigaction = on_sigbus;
    ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&ours.sa_mask);
    page_size = sysconf(_SC_PAGESIZE);
    before = now;
    if (sigaction(SIGBUS, &ours, NULL) < 0)
        return -1;
    installed = 1;
    return 0;
}

/* 0 where the table took the map, -1 where it is full. */
static int watch(uintptr_t start, uintptr_t size) {
    int used = atomic_load(&high_water);
    for (int i = 0; i < WATCHED; i++) {
        if (atomic_load(&watched[i].start) != 0)
            continue;
        atomic_store(&watched[i].hit, 0);
        atomic_store(&watched[i].end, start + size);
        atomic_store(&watched[i].start, start); /* last: the handler sees a whole entry or none */
        if (i >= used)
            atomic_store(&high_water, i + 1);
        return 0;
    }
    return -1;
}

/* 0 where a map of `size` bytes at `start` was in the table (now out of it), -1 where none was. */
static int unwatch(uintptr_t start, uintptr_t size) {
    int used = atomic_load(&high_water);
    for (int i = 0; i < used; i++) {
        if (atomic_load(&watched[i].start) != start || atomic_load(&watched[i].end) - start != size)
            continue;
        atomic_store(&watched[i].start, 0);
        if (atomic_exchange(&watched[i].hit, 0) == 1)
            atomic_fetch_sub(&hit_maps, 1);
        return 0;
    }
    return -1;
}

static PyObject *py_map_shard(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"fd", "size", NULL};
    int fd;
    Py_ssize_t size;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "in", keywords, &fd, &size))
        return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "map_shard: the size must be positive");
        return NULL;
    }
    void *address = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (address == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    /* (the GIL held: one map_shard or unmap_shard at a time changes the table) */
    int error = install_handler() < 0 ? errno : watch((uintptr_t)address, (uintptr_t)size) < 0 ? ENOMEM : 0;
    if (error) { /* never a map the table does not hold: unmap_shard could not let it go */
        munmap(address, (size_t)size);
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromVoidPtr(address);
}

static PyObject *py_unmap_shard(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"address", "size", NULL};
    PyObject *at;
    Py_ssize_t size;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On", keywords, &at, &size))
        return NULL;
    void *address = PyLong_AsVoidPtr(at);
    if (address == NULL && PyErr_Occurred())
        return NULL;
    /* out of the table before the munmap: the handler never zeroes an address reused since */
    if (size <= 0 || unwatch((uintptr_t)address, (uintptr_t)size) < 0) {
        PyErr_SetString(PyExc_ValueError, "unmap_shard: no map of map_shard of that address and size");
        return NULL;
    }
    munmap(address, (size_t)size);
    Py_RETURN_NONE;
}

static PyObject *py_unreadable(PyObject *self, PyObject *args) {
    (void)self, (void)args;
    return PyLong_FromLong(atomic_load(&hit_maps));
}

static PyObject *py_was_unreadable(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *keywords[] = {"address", NULL};
    PyObject *at;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O", keywords, &at))
        return NULL;
    uintptr_t address = (uintptr_t)PyLong_AsVoidPtr(at);
    if (address == 0 && PyErr_Occurred())
        return NULL;
    int used = atomic_load(&high_water);
    for (int i = 0; i < used; i++)
        if (atomic_load(&watched[i].start) == address)
            return PyBool_FromLong(atomic_load(&watched[i].hit));
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"tar_index", (PyCFunction)(void (*)(void))py_tar_index, METH_VARARGS | METH_KEYWORDS,
     "tar_index(shard) -> bytes: int64 rows (key_at, key_len, jpg_at, jpg_len, cls_at, cls_len), one per sample "
     "(consecutive members KEY.ext) of a tar in memory; -1 where a sample lacks the member. ValueError, with "
     "the byte offset, for a damaged header. The GIL is released."},
    {"map_shard", (PyCFunction)(void (*)(void))py_map_shard, METH_VARARGS | METH_KEYWORDS,
     "map_shard(fd, size) -> int: the address of `size` bytes of the file `fd` mapped read-only and shared, the "
     "map watched: a SIGBUS in it (the file truncated under it) puts zero pages over the rest of it and marks it "
     "(unreadable, was_unreadable) instead of killing the process. OSError where mmap fails."},
    {"unmap_shard", (PyCFunction)(void (*)(void))py_unmap_shard, METH_VARARGS | METH_KEYWORDS,
     "unmap_shard(address, size) -> None: unwatch and unmap a map of map_shard."},
    {"unreadable", (PyCFunction)py_unreadable, METH_NOARGS,
     "unreadable() -> int: how many maps of map_shard a SIGBUS has hit (and zeroed from there), not yet unmapped. "
     "No system call: asked after each batch."},
    {"was_unreadable", (PyCFunction)(void (*)(void))py_was_unreadable, METH_VARARGS | METH_KEYWORDS,
     "was_unreadable(address) -> bool: whether a SIGBUS has hit the map of map_shard at `address`."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tarindex", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__tarindex(void) {
    return PyModule_Create(&module);
}
