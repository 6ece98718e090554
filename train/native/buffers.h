/* Scratch buffers of the crop-region decoder: grown as needed and kept from one image to the next
 * of a call (the filters' weights, resample.c; the decoded and resized rows, jpegcrop.c; a seek's
 * span table and small JPEG, seek.c). Every byte read from them is written for the current image
 * first, so nothing is carried from one image to the next but their capacity. Header-only: one
 * function, inlined where it is called, and no symbol of its own in the module. */
#ifndef NATIVE_BUFFERS_H
#define NATIVE_BUFFERS_H

#include <stddef.h>
#include <stdlib.h>

/* Grow *buffer (realloc) to hold `need` bytes; *capacity is its size in bytes. Returns 0, or -1
 * when memory runs out (the buffer and its capacity are unchanged, still the caller's to free). */
static inline int grow_buffer(void **buffer, size_t *capacity, size_t need) {
    if (need <= *capacity)
        return 0;
    void *grown = realloc(*buffer, need);
    if (!grown)
        return -1;
    *buffer = grown;
    *capacity = need;
    return 0;
}

#endif
