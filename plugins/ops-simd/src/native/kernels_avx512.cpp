// AVX-512 kernels (F, DQ, BW, VL), compiled with their -m flags; called only after the CPU and
// OS checks.  The fast micro-kernel uses explicit FMA intrinsics; the exact kernel multiplies
// and adds separately.
#include <immintrin.h>

#include "kernels.h"

namespace graphrt_simd {
namespace avx512 {

constexpr int MR = 12;
constexpr int NR = 32;
constexpr int ER = 4;
constexpr int EU = 2;

// 12 x 32 tile: 24 accumulators, 2 B vectors and one broadcast in the 32 zmm registers.
static inline void micro_tile(int64_t kc, const float* ap, const float* bp, float* tile) {
    __m512 c[MR][2];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (int64_t kk = 0; kk < kc; ++kk) {
        const __m512 b0 = _mm512_loadu_ps(bp + kk * NR);
        const __m512 b1 = _mm512_loadu_ps(bp + kk * NR + 16);
        const float* av = ap + kk * MR;
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const __m512 a = _mm512_set1_ps(av[r]);
            c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
            c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
        _mm512_storeu_ps(tile + r * NR, c[r][0]);
        _mm512_storeu_ps(tile + r * NR + 16, c[r][1]);
    }
}

struct Vec {
    using T = __m512;
    static constexpr int W = 16;
    static inline T load(const float* p) { return _mm512_loadu_ps(p); }
    static inline void store(float* p, T v) { _mm512_storeu_ps(p, v); }
    static inline T set1(float v) { return _mm512_set1_ps(v); }
    static inline T mul(T x, T y) { return _mm512_mul_ps(x, y); }
    static inline T add(T x, T y) { return _mm512_add_ps(x, y); }
};

#include "gemm_driver.inc"

}  // namespace avx512

const IsaKernels avx512_kernels = avx512::make_table("avx512");

}  // namespace graphrt_simd
