// The int8 GEMM's AVX2 kernels (qgemm.h, madd layout), compiled with -mavx2; called only after
// the CPU check.  vpmaddwd on int16 values in [-255, 255] (vpmaddubsw's int16 saturation would
// not be exact for u8 x s8 products).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstring>

#include "qgemm.h"

namespace graphrt_simd {
namespace qavx2 {

constexpr int QMR = 6;
constexpr int QNR = 16;
constexpr int QKG = 2;
constexpr bool QVNNI = false;
using QA = int16_t;
using QB = int16_t;

template <int R>
inline void qtile(const QA* a, int64_t kp, const QB* b, int32_t* c, std::ptrdiff_t ldc,
                  const int32_t*, const int32_t*, const int32_t*, int32_t) {
    __m256i acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int64_t g = 0; g < kp / 2; ++g) {
        const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 32));
        const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 32 + 16));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            int32_t pair;
            std::memcpy(&pair, a + r * kp + 2 * g, sizeof pair);
            const __m256i av = _mm256_set1_epi32(pair);
            acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(av, b0));
            acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(av, b1));
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), acc[r][0]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + 8), acc[r][1]);
    }
}

#include "qgemm_driver.inc"

}  // namespace qavx2

const QGemmKernels avx2_qgemm = qavx2::make_qgemm_table("avx2-madd");

}  // namespace graphrt_simd
