// One x86 SIMD register type as the Vec traits gemm_driver.inc expects, from the intrinsic
// prefix (_mm256, _mm512): loads, stores, a broadcast, separate multiply and add (the exact
// kernel), and the explicit FMA the fast micro-kernel may use.  Expanded inside an ISA's
// namespace, in the file compiled with that ISA's flags.
#pragma once

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
    }
