/* What this x86-64 CPU runs, asked of the CPU itself (cpuid) and of the kernel (xgetbv: which
 * vector registers it saves on a context switch). Not __builtin_cpu_supports: in a module built by
 * zig cc (the release wheels) the table it reads is never filled in, and it answers 0 for every
 * feature, so every CPU got the SSE2 paths (measured: a normalised batch 12% slower). */
#ifndef CPU_FEATURES_H
#define CPU_FEATURES_H

#if defined(__x86_64__)
#include <cpuid.h>
#include <stdint.h>

enum { XSTATE_SSE_AVX = 0x6, XSTATE_AVX512 = 0xe0 /* opmask, the upper halves of ZMM0-15, ZMM16-31 */ };

static inline uint64_t saved_register_state(void) {
    uint32_t low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    return ((uint64_t)high << 32) | low;
}

/* Leaf 7's EBX where the CPU has AVX and the kernel saves the YMM registers; 0 otherwise. */
static inline unsigned extended_features(uint64_t *state) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
        return 0;
    *state = saved_register_state();
    if ((*state & XSTATE_SSE_AVX) != XSTATE_SSE_AVX || __get_cpuid_max(0, 0) < 7)
        return 0;
    __cpuid_count(7, 0, a, b, c, d);
    return b;
}

/* Asked once, as the module loads: the answers never change, and cpuid traps to the hypervisor in a VM, which
 * each decode call and each batch's normalisation asking again would pay for. */
static int cpu_avx2_found, cpu_avx512_found;

__attribute__((constructor)) static void find_cpu_features(void) {
    uint64_t state = 0;
    unsigned features = extended_features(&state);
    unsigned avx512 = bit_AVX2 | bit_AVX512F | bit_AVX512BW | bit_AVX512VL; /* the subsets the resampler uses */
    cpu_avx2_found = (features & bit_AVX2) != 0;
    cpu_avx512_found = (features & avx512) == avx512 && (state & XSTATE_AVX512) == XSTATE_AVX512;
}

static inline int cpu_has_avx2(void) { return cpu_avx2_found; }

static inline int cpu_has_avx512(void) { return cpu_avx512_found; }
#endif

#endif
