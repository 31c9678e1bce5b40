// AVX2 + FMA kernels, compiled with -mavx2 -mfma; called only after the CPU check.  The fast
// micro-kernel uses explicit FMA intrinsics; the exact kernel multiplies and adds separately.
#include <immintrin.h>

#include "kernels.h"

namespace graphrt_simd {
namespace avx2 {

constexpr int MR = 6;
constexpr int NR = 16;
constexpr int ER = 4;
constexpr int EU = 2;

// 6 x 16 tile: 12 accumulators, 2 B vectors and one broadcast in the 16 ymm registers.
static inline void micro_tile(int64_t kc, const float* ap, const float* bp, float* tile) {
    __m256 c[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
    for (int64_t kk = 0; kk < kc; ++kk) {
        const __m256 b0 = _mm256_loadu_ps(bp + kk * NR);
        const __m256 b1 = _mm256_loadu_ps(bp + kk * NR + 8);
        const float* av = ap + kk * MR;
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
            const __m256 a = _mm256_broadcast_ss(av + r);
            c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
            c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
        _mm256_storeu_ps(tile + r * NR, c[r][0]);
        _mm256_storeu_ps(tile + r * NR + 8, c[r][1]);
    }
}

struct Vec {
    using T = __m256;
    static constexpr int W = 8;
    static inline T load(const float* p) { return _mm256_loadu_ps(p); }
    static inline void store(float* p, T v) { _mm256_storeu_ps(p, v); }
    static inline T set1(float v) { return _mm256_set1_ps(v); }
    static inline T mul(T x, T y) { return _mm256_mul_ps(x, y); }
    static inline T add(T x, T y) { return _mm256_add_ps(x, y); }
};

#include "gemm_driver.inc"

}  // namespace avx2

const IsaKernels avx2_kernels = avx2::make_table("avx2");

}  // namespace graphrt_simd
