/* Seeking through restart intervals: see seek.h. */
#include "seek.h"

#include <stdlib.h>
#include <string.h>

#include "buffers.h"
#include "jpeg_rules.h" /* shards/native: the grid's rule, as prepare writes it */

/* Where the frame header is: the header's markers walked as libjpeg reads them (bytes before a
 * marker skipped, FF 00 discarded, fill bytes, parameterless markers), and the SOF0 or SOF1 found
 * checked against what libjpeg read from it, so that the window's size is written into the
 * segment libjpeg took as the frame header and nowhere else. 0 where that is not so. */
static size_t frame_header_at(const struct jpeg_decompress_struct *c, const uint8_t *data, size_t end) {
    size_t i = 2; /* after SOI */
    for (;;) {
        while (i < end && data[i] != 0xFF) /* (libjpeg warns of such bytes, and goes on) */
            i++;
        while (i + 1 < end && data[i + 1] == 0xFF)
            i++;
        if (i + 1 >= end)
            return 0;
        uint8_t marker = data[i + 1];
        if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            i += 2; /* a stuffed zero, TEM or RSTn: no length */
            continue;
        }
        if (marker == 0xDA || i + 4 > end)
            return 0; /* the scan header, and no frame header before it */
        size_t length = (size_t)data[i + 2] << 8 | data[i + 3];
        if (marker == 0xC0 || marker == 0xC1) {
            if (length != 8 + 3 * (size_t)c->num_components || i + 2 + length > end || data[i + 4] != 8 ||
                (data[i + 5] << 8 | data[i + 6]) != (int)c->image_height ||
                (data[i + 7] << 8 | data[i + 8]) != (int)c->image_width || data[i + 9] != c->num_components)
                return 0;
            for (int k = 0; k < c->num_components; k++) {
                const uint8_t *f = data + i + 10 + 3 * k;
                const jpeg_component_info *comp = &c->comp_info[k];
                if (f[0] != comp->component_id || f[1] != (comp->h_samp_factor << 4 | comp->v_samp_factor))
                    return 0;
            }
            return i;
        }
        if (length < 2)
            return 0;
        i += 2 + length;
    }
}

int seekable(const struct jpeg_decompress_struct *c, const uint8_t *data, seek_plan *p) {
    p->width = c->image_width, p->height = c->image_height;
    p->mcu_width = mcu_width(c), p->mcu_height = mcu_height(c);
    p->mcus_per_row = mcus_in_a_row(c);
    p->mcu_rows = (p->height + p->mcu_height - 1) / p->mcu_height;
    p->interval = c->restart_interval;
    p->entropy_at = (size_t)(c->src->next_input_byte - data); /* jpeg_read_header stops after the SOS segment */
    if (c->progressive_mode || c->arith_code || c->comps_in_scan != c->num_components ||
        !interval_divides_row(p->mcus_per_row, p->interval))
        return 0;
    p->sof = frame_header_at(c, data, p->entropy_at);
    return p->sof != 0;
}

/* min(floor(v / unit), most) and min(ceil(v / unit), most), 0 for v <= 0 (or NaN) */
static unsigned int units_below(double v, unsigned int unit, unsigned int most) {
    double q = v > 0 ? v / unit : 0;
    return q >= most ? most : (unsigned int)q;
}

static unsigned int units_above(double v, unsigned int unit, unsigned int most) {
    double q = v > 0 ? v / unit : 0;
    return q >= most ? most : (unsigned int)q + ((double)(unsigned int)q < q);
}

size_t plan_window(seek_plan *p, double left, double top, double right, double bottom) {
    unsigned int per_row = p->mcus_per_row / p->interval, interval_width = p->mcu_width * p->interval;
    unsigned int first = units_below(left, interval_width, per_row - 1), end = units_above(right, interval_width, per_row);
    p->col0 = first * p->interval;
    p->col1 = (end > first ? end : first + 1) * p->interval;
    p->row0 = units_below(top, p->mcu_height, p->mcu_rows - 1);
    p->row1 = units_above(bottom, p->mcu_height, p->mcu_rows);
    if (p->row1 <= p->row0)
        p->row1 = p->row0 + 1;
    p->window_width = p->col1 * p->mcu_width < p->width ? (p->col1 - p->col0) * p->mcu_width
                                                         : p->width - p->col0 * p->mcu_width;
    p->window_height = p->row1 * p->mcu_height < p->height ? (p->row1 - p->row0) * p->mcu_height
                                                            : p->height - p->row0 * p->mcu_height;
    return (size_t)(p->col1 - p->col0) * (p->row1 - p->row0);
}

/* Whether the scan's entropy-coded data from `at` is the grid the header promises, walked to its
 * end: mcu_rows x per_row intervals, each of a byte at least (an MCU's codes take a bit at least:
 * libjpeg warns at an empty interval), each but the last ended by RST0, RST1, ... (mod 8) in turn,
 * fill bytes allowed before it, the last by EOI (libjpeg reads nothing after it). Anything else (any
 * other marker, one out of order, too few or too many intervals) libjpeg warns of or decodes into
 * shifted MCUs wherever it lies, which the window's intervals alone do not show: such a file is
 * decoded whole. Fills spans with the window's intervals (rows [row0, row1), columns [first, end)),
 * in order: interval i is bytes [spans[2i], spans[2i + 1]); *bytes is their sum. */
static int walk_grid(const uint8_t *data, size_t length, size_t at, const seek_plan *p, size_t per_row,
                     size_t first, size_t end, size_t *spans, size_t *bytes) {
    size_t total = (size_t)p->mcu_rows * per_row, row = 0, col = 0, sum = 0;
    for (size_t k = 0; k < total; k++) {
        size_t start = at;
        const uint8_t *ff;
        for (;;) {
            ff = at < length ? memchr(data + at, 0xFF, length - at) : NULL;
            if (!ff)
                return 0;
            size_t i = (size_t)(ff - data) + 1;
            while (i < length && data[i] == 0xFF) /* fill bytes before a marker */
                i++;
            if (i >= length)
                return 0;
            at = i + 1;
            if (data[i] == 0x00) /* a stuffed 0xFF of the data itself (FF FF 00 too, as libjpeg reads it) */
                continue;
            if (data[i] != (k + 1 < total ? 0xD0 + (k & 7) : 0xD9))
                return 0;
            break;
        }
        size_t stop = (size_t)(ff - data);
        if (stop == start)
            return 0;
        if (row >= p->row0 && row < p->row1 && col >= first && col < end)
            *spans++ = start, *spans++ = stop, sum += stop - start;
        if (++col == per_row)
            col = 0, row++;
    }
    *bytes = sum;
    return 1;
}

size_t build_window_jpeg(const seek_plan *p, const uint8_t *data, size_t length, size_t most, seek_scratch *s) {
    size_t sof = p->sof, per_row = p->mcus_per_row / p->interval;
    size_t first = p->col0 / p->interval, end = p->col1 / p->interval;
    size_t total = (size_t)p->mcu_rows * per_row, count = (size_t)(p->row1 - p->row0) * (end - first);
    if (total > (length - p->entropy_at) / 3)
        return 0; /* each interval is a byte and a 2-byte marker at least: too short to hold them */
    if (grow_buffer((void **)&s->spans, &s->capacity_spans, sizeof(size_t) * 2 * count))
        return (size_t)-1;
    size_t *spans = s->spans, bytes;
    if (!walk_grid(data, length, p->entropy_at, p, per_row, first, end, spans, &bytes))
        return 0;
    size_t capacity = p->entropy_at + bytes + 2 * count; /* a marker after each interval */
    if (capacity > most)
        return 0;
    if (grow_buffer((void **)&s->bytes, &s->capacity_bytes, capacity))
        return (size_t)-1;
    uint8_t *out = s->bytes;
    memcpy(out, data, p->entropy_at);
    unsigned int width = p->window_width, height = p->window_height;
    out[sof + 5] = (uint8_t)(height >> 8), out[sof + 6] = (uint8_t)height; /* FF Cn, length(2), P, Y(2), X(2) */
    out[sof + 7] = (uint8_t)(width >> 8), out[sof + 8] = (uint8_t)width;
    size_t at = p->entropy_at;
    for (size_t i = 0; i < count; i++) {
        size_t n = spans[2 * i + 1] - spans[2 * i];
        memcpy(out + at, data + spans[2 * i], n);
        at += n;
        if (i + 1 < count) /* renumbered: the window's own intervals run 0, 1, 2, ... */
            out[at++] = 0xFF, out[at++] = (uint8_t)(0xD0 + (i & 7));
    }
    out[at++] = 0xFF, out[at++] = 0xD9;
    return at;
}

void free_seek_scratch(seek_scratch *s) {
    free(s->spans);
    free(s->bytes);
    memset(s, 0, sizeof(*s));
}
