// The int8 GEMM's AVX512-VNNI kernels (vpdpbusd, qgemm.h's vnni layout), compiled with the
// avx512 flags plus -mavx512vnni; called only when the CPU check (qgemm.cpp) found avx512 and
// avx512vnni.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>
#include <cstring>

#include "qgemm.h"

namespace graphrt_simd {
namespace qvnni {

constexpr int QMR = 12;
constexpr int QNR = 32;
constexpr int QKG = 4;
constexpr bool QVNNI = true;
using QA = uint8_t;
using QB = int8_t;

// acc += vpdpbusd(a, b): inline asm, since GCC 12 copies the tied accumulator of the intrinsic
// through spare registers and the stack once a dozen of them are live (twice the instructions).
inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

template <int R>
inline void qtile(const QA* a, int64_t kp, const QB* b, int32_t* c, std::ptrdiff_t ldc,
                  const int32_t* rowsum, const int32_t* bz, const int32_t* bcorr, int32_t za) {
    __m512i acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int64_t g = 0; g < kp / 4; ++g) {
        const __m512i b0 = _mm512_loadu_si512(b + g * 128);
        const __m512i b1 = _mm512_loadu_si512(b + g * 128 + 64);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            int32_t quad;
            std::memcpy(&quad, a + r * kp + 4 * g, sizeof quad);
            const __m512i av = _mm512_set1_epi32(quad);
            dpbusd(acc[r][0], av, b0);  // wraps, never saturates
            dpbusd(acc[r][1], av, b1);
        }
    }
    const __m512i z0 = _mm512_loadu_si512(bz), z1 = _mm512_loadu_si512(bz + 16);
    const __m512i zav = _mm512_set1_epi32(za);
    const __m512i c0 = _mm512_mullo_epi32(zav, _mm512_loadu_si512(bcorr));
    const __m512i c1 = _mm512_mullo_epi32(zav, _mm512_loadu_si512(bcorr + 16));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
        const __m512i rs = _mm512_set1_epi32(rowsum[r]);
        const __m512i v0 = _mm512_sub_epi32(_mm512_add_epi32(acc[r][0], c0),
                                            _mm512_mullo_epi32(z0, rs));
        const __m512i v1 = _mm512_sub_epi32(_mm512_add_epi32(acc[r][1], c1),
                                            _mm512_mullo_epi32(z1, rs));
        _mm512_storeu_si512(c + r * ldc, v0);
        _mm512_storeu_si512(c + r * ldc + 16, v1);
    }
}

#include "qgemm_driver.inc"

}  // namespace qvnni

const QGemmKernels vnni_qgemm = qvnni::make_qgemm_table("avx512-vnni");

}  // namespace graphrt_simd
