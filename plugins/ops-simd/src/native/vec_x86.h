// One x86 SIMD register type as the Vec traits gemm_driver.inc expects, from the intrinsic
// prefix (_mm256, _mm512): loads, stores, a broadcast, separate multiply and add (the exact
// kernel), and the explicit FMA the fast micro-kernel may use.  Expanded inside an ISA's
// namespace, in the file compiled with that ISA's flags.
#pragma once

#include <cstdint>
#include <immintrin.h>

#if defined(__AVX__)
// Lanes [0, n) of v to p (0 <= n <= 8) by plain stores of 4, 2 and 1 floats: AMD's masked
// store (vmaskmovps) is microcoded, many cycles each (conv_lanes ran 5-18% slower with it; 13
// x 13 Winograd rows of 7 tiles a fifth slower).
static inline void store_first8(float* p, __m256 v, int64_t n) {
    if (n >= 8) return _mm256_storeu_ps(p, v);
    __m128 part = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(p, part);
        part = _mm256_extractf128_ps(v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi(reinterpret_cast<__m64*>(p), part);
        part = _mm_movehl_ps(part, part);
        p += 2;
        n -= 2;
    }
    if (n) _mm_store_ss(p, part);
}

// Lanes [0, n) of p (0 <= n <= 8), the others zero, reading those n floats only, by plain
// loads of 4, 2 and 1: AMD leaves it to the implementation whether a masked load (vmaskmovps)
// faults on a masked-off lane (its manual, VMASKMOVPS; qemu's does), and a partial vector's
// masked-off lanes often lie past the end of the array, or of the page.
static inline __m128 load_first4(const float* p, int64_t n) {  // (n < 4)
    if (n <= 0) return _mm_setzero_ps();
    if (n == 1) return _mm_load_ss(p);
    const __m128 two = _mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64*>(p));
    return n == 2 ? two : _mm_movelh_ps(two, _mm_load_ss(p + 2));
}
static inline __m256 load_first8(const float* p, int64_t n) {
    if (n >= 8) return _mm256_loadu_ps(p);
    if (n < 4) return _mm256_zextps128_ps256(load_first4(p, n));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)),
                                load_first4(p + 4, n - 4), 1);
}
#endif

#define GRAPHRT_SIMD_X86_VEC(TYPE, WIDTH, P)                                        \
    struct Vec {                                                                    \
        using T = TYPE;                                                             \
        static constexpr int W = WIDTH;                                             \
        static inline T load(const float* p) { return P##_loadu_ps(p); }           \
        static inline void store(float* p, T v) { P##_storeu_ps(p, v); }           \
        static inline T set1(float v) { return P##_set1_ps(v); }                   \
        static inline T mul(T x, T y) { return P##_mul_ps(x, y); }                 \
        static inline T add(T x, T y) { return P##_add_ps(x, y); }                 \
        static inline T madd(T a, T b, T c) { return P##_fmadd_ps(a, b, c); }      \
        static inline T max(T x, T y) { return P##_max_ps(x, y); }                 \
    }

// Lanes of one x86 register type for unary_driver.inc, from the intrinsic prefix and the mask
// operations (AVX2: masks are float vectors; AVX-512: k registers).
#define GRAPHRT_SIMD_X86_UNARY(TYPE, ITYPE, WIDTH, P, SI, MASK, CMP, BLEND, ROUND)         \
    struct U {                                                                             \
        using F = TYPE;                                                                    \
        using I = ITYPE;                                                                   \
        using M = MASK;                                                                    \
        static constexpr int W = WIDTH;                                                    \
        static inline F set(float v) { return P##_set1_ps(v); }                           \
        static inline I iset(int32_t v) { return P##_set1_epi32(v); }                     \
        static inline F load(const float* p) { return P##_loadu_ps(p); }                  \
        static inline void store(float* p, F v) { P##_storeu_ps(p, v); }                  \
        static inline F add(F a, F b) { return P##_add_ps(a, b); }                        \
        static inline F sub(F a, F b) { return P##_sub_ps(a, b); }                        \
        static inline F mul(F a, F b) { return P##_mul_ps(a, b); }                        \
        static inline F div(F a, F b) { return P##_div_ps(a, b); }                        \
        static inline F max(F a, F b) { return P##_max_ps(a, b); }                        \
        static inline F min(F a, F b) { return P##_min_ps(a, b); }                        \
        static inline F rint(F a) { return ROUND(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); } \
        static inline F trunc(F a) { return ROUND(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); } \
        static inline M isnan(F a) { return CMP(a, a, _CMP_UNORD_Q); }                    \
        static inline M lt(F a, F b) { return CMP(a, b, _CMP_LT_OQ); }                    \
        static inline M le(F a, F b) { return CMP(a, b, _CMP_LE_OQ); }                    \
        static inline F select(M m, F a, F b) { return BLEND(m, a, b); }                  \
        static inline I to_int(F a) { return P##_cvtps_epi32(a); }                        \
        static inline I iadd(I a, I b) { return P##_add_epi32(a, b); }                   \
        static inline I isub(I a, I b) { return P##_sub_epi32(a, b); }                   \
        static inline I sar1(I a) { return P##_srai_epi32(a, 1); }                        \
        static inline I shl23(I a) { return P##_slli_epi32(a, 23); }                      \
        static inline F as_float(I a) { return P##_castsi##SI##_ps(a); }                  \
        static inline F bit_and(F a, F b) { return P##_and_ps(a, b); }                    \
        static inline F bit_or(F a, F b) { return P##_or_ps(a, b); }                      \
        static inline F bit_xor(F a, F b) { return P##_xor_ps(a, b); }                    \
    }
