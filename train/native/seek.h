/* Seeking through restart intervals (the crop-region decoder's fast path for seekable shards).
 *
 * A baseline JPEG with one interleaved scan and a restart interval that divides its MCUs per row
 * is a grid of intervals that decode independently (the DC predictors restart at each marker).
 * For a window of the image, build_window_jpeg makes the small JPEG of only the intervals that
 * cover it: the original's header with the window's size, then those intervals' entropy-coded
 * bytes with their restart markers renumbered. Decoded, its pixels inside the window are the whole
 * image's (the window keeps a margin for the filter and for chroma upsampling at its edges). That
 * holds only where the scan is the grid the header promises, which a window's own intervals do not
 * show: an interval lost, added or empty elsewhere shifts or breaks the MCUs of the whole decode.
 * So the whole scan's markers are checked first: a memchr walk to EOI, 9 us for an 80 KB image
 * (about 1% of its crop's decode, most of it over the intervals up to the window, which the small
 * JPEG needs anyway). Damage inside an interval's Huffman codes shows only where it is decoded. */
#ifndef NATIVE_SEEK_H
#define NATIVE_SEEK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

/* A seek's buffers, grown with grow_buffer (buffers.h); capacities in bytes. */
typedef struct {
    size_t *spans;   /* the window's intervals only (walk_grid checks the rest of the scan without storing
                        it): where each one's entropy-coded bytes lie, [start, end) pairs, in order */
    size_t capacity_spans;
    uint8_t *bytes;  /* the small JPEG */
    size_t capacity_bytes;
} seek_scratch;

typedef struct {
    /* the image, from its header */
    unsigned int width, height;          /* source pixels */
    unsigned int mcu_width, mcu_height;  /* source pixels */
    unsigned int mcus_per_row, mcu_rows, interval;
    size_t entropy_at;                   /* the first byte of the scan's entropy-coded data */
    size_t sof;                          /* where the frame header (SOF0 or SOF1) starts */
    /* the window, in MCUs: columns [col0, col1) and rows [row0, row1), columns whole intervals */
    unsigned int col0, col1, row0, row1;
    unsigned int window_width, window_height; /* source pixels: whole intervals, or to the image's edge */
} seek_plan;

/* Whether the JPEG whose header `c` has read (from `data`, jpeg_mem_src) is a seekable grid: one
 * interleaved baseline Huffman scan, intervals that divide a row's MCUs, and a frame header found
 * where libjpeg read it. Fills the plan's image fields. */
int seekable(const struct jpeg_decompress_struct *c, const uint8_t *data, seek_plan *p);

/* The window [left, right) x [top, bottom) (source pixels) as whole intervals within the image:
 * fills col0..window_height. Returns the MCUs the small JPEG holds. */
size_t plan_window(seek_plan *p, double left, double top, double right, double bottom);

/* The small JPEG of the planned window into s->bytes; its length, 0 where the scan, walked to its
 * EOI, is not the grid its header promises (damage: the caller decodes the whole image as usual,
 * which meets it as libjpeg does) or the small JPEG would be longer than `most` bytes (nothing is
 * allocated for it then), or (size_t)-1 when memory runs out. s->spans is bounded by the file's
 * length before it is allocated. */
size_t build_window_jpeg(const seek_plan *p, const uint8_t *data, size_t length, size_t most, seek_scratch *s);

void free_seek_scratch(seek_scratch *s);

#endif
