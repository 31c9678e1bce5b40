// The int8 GEMM's AVX-512 kernels, compiled with the avx512 path's -m flags (F, DQ, BW, VL):
// the madd layout (vpmaddwd on int16, qgemm.h); called only after the CPU check.  With
// AVX512-VNNI qgemm_vnni.cpp's kernels run instead.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstring>

#include "qgemm.h"

namespace graphrt_simd {
namespace qavx512 {

constexpr int QMR = 8;
constexpr int QNR = 32;
constexpr int QKG = 2;
constexpr bool QVNNI = false;
using QA = int16_t;
using QB = int16_t;

template <int R>
inline void qtile(const QA* a, int64_t kp, const QB* b, int32_t* c, std::ptrdiff_t ldc,
                  const int32_t*, const int32_t*, const int32_t*, int32_t) {
    __m512i acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int64_t g = 0; g < kp / 2; ++g) {
        const __m512i b0 = _mm512_loadu_si512(b + g * 64);
        const __m512i b1 = _mm512_loadu_si512(b + g * 64 + 32);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            int32_t pair;
            std::memcpy(&pair, a + r * kp + 2 * g, sizeof pair);
            const __m512i av = _mm512_set1_epi32(pair);
            acc[r][0] = _mm512_add_epi32(acc[r][0], _mm512_madd_epi16(av, b0));
            acc[r][1] = _mm512_add_epi32(acc[r][1], _mm512_madd_epi16(av, b1));
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
        _mm512_storeu_si512(c + r * ldc, acc[r][0]);
        _mm512_storeu_si512(c + r * ldc + 16, acc[r][1]);
    }
}

#include "qgemm_driver.inc"

}  // namespace qavx512

const QGemmKernels avx512_qgemm = qavx512::make_qgemm_table("avx512-madd");

}  // namespace graphrt_simd
