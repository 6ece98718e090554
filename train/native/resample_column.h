/* The vertical pass, written once for SSE2, AVX2 and AVX-512: resample.c includes this file once per
 * instruction set, with
 *   COLUMN_NAME    the function's name      COLUMN_TARGET  its target attribute (or nothing)
 *   VEC, VBYTES    the register, its bytes  P(op)          the instruction set's _mm/_mm256/_mm512 prefix
 *   LOADU, STOREU  unaligned load, store    ZERO()         a zero register
 *   COLUMN_TAIL    what does the bytes after the last whole register
 * (undefined again at the end).
 * dst[x] = sum_j rows[j * stride + x] * k[j]: two taps per madd on the bytes of two rows
 * interleaved, VBYTES bytes at a time, the sums rounded and clipped to 0-255 as clip8 does. */
COLUMN_TARGET static void COLUMN_NAME(const uint8_t *rows, size_t stride, const int16_t *k, int n, uint8_t *dst,
                                      int width, int x) {
    const VEC zero = ZERO(), half = P(set1_epi32)(1 << (PRECISION - 1));
    for (; x + VBYTES <= width; x += VBYTES) {
        VEC a0 = half, a1 = half, a2 = half, a3 = half;
        for (int j = 0; j < n; j += 2) {
            VEC p = LOADU(rows + j * stride + x);
            VEC q = j + 1 < n ? LOADU(rows + (j + 1) * stride + x) : zero;
            VEC kk = P(set1_epi32)(weight_pair(k, j, n));
            VEC lo = P(unpacklo_epi8)(p, q), hi = P(unpackhi_epi8)(p, q); /* p0 q0 p1 q1 ... */
            a0 = P(add_epi32)(a0, P(madd_epi16)(P(unpacklo_epi8)(lo, zero), kk));
            a1 = P(add_epi32)(a1, P(madd_epi16)(P(unpackhi_epi8)(lo, zero), kk));
            a2 = P(add_epi32)(a2, P(madd_epi16)(P(unpacklo_epi8)(hi, zero), kk));
            a3 = P(add_epi32)(a3, P(madd_epi16)(P(unpackhi_epi8)(hi, zero), kk));
        }
        a0 = P(srai_epi32)(a0, PRECISION), a1 = P(srai_epi32)(a1, PRECISION);
        a2 = P(srai_epi32)(a2, PRECISION), a3 = P(srai_epi32)(a3, PRECISION);
        STOREU(dst + x, P(packus_epi16)(P(packs_epi32)(a0, a1), P(packs_epi32)(a2, a3)));
    }
    COLUMN_TAIL(rows, stride, k, n, dst, width, x);
}

/* the parameters are this inclusion's: the next one defines its own */
#undef COLUMN_NAME
#undef COLUMN_TARGET
#undef VEC
#undef VBYTES
#undef P
#undef LOADU
#undef STOREU
#undef ZERO
#undef COLUMN_TAIL
