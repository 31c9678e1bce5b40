// The int8 GEMM's AVX-VNNI kernels (the VEX vpdpbusd on ymm registers, qgemm.h's vnni layout)
// for the avx2 path, compiled with -mavx2 -mavxvnni; called only when the CPU check (qgemm.cpp)
// found avx2 and avxvnni.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "qgemm.h"

namespace graphrt_simd {
namespace qavxvnni {

constexpr int QMR = 6;
constexpr int QNR = 16;
constexpr int QKG = 4;
constexpr bool QVNNI = true;
using QA = uint8_t;
using QB = int8_t;

// acc += vpdpbusd(a, b), VEX-encoded (registers 0-15): inline asm, as in qgemm_vnni.cpp.
inline void dpbusd(__m256i& acc, __m256i a, __m256i b) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
}

template <int R>
inline void qtile(const QA* a, int64_t kp, const QB* b, int32_t* c, std::ptrdiff_t ldc,
                  const int32_t* rowsum, const int32_t* bz, const int32_t* bcorr, int32_t za) {
    __m256i acc[R][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int64_t g = 0; g < kp / 4; ++g) {
        const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64));
        const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64 + 32));
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            int32_t quad;
            std::memcpy(&quad, a + r * kp + 4 * g, sizeof quad);
            const __m256i av = _mm256_set1_epi32(quad);
            dpbusd(acc[r][0], av, b0);  // wraps, never saturates
            dpbusd(acc[r][1], av, b1);
        }
    }
    const auto load = [](const int32_t* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    };
    const __m256i z0 = load(bz), z1 = load(bz + 8);
    const __m256i zav = _mm256_set1_epi32(za);
    const __m256i c0 = _mm256_mullo_epi32(zav, load(bcorr));
    const __m256i c1 = _mm256_mullo_epi32(zav, load(bcorr + 8));
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
        const __m256i rs = _mm256_set1_epi32(rowsum[r]);
        const __m256i v0 = _mm256_sub_epi32(_mm256_add_epi32(acc[r][0], c0),
                                            _mm256_mullo_epi32(z0, rs));
        const __m256i v1 = _mm256_sub_epi32(_mm256_add_epi32(acc[r][1], c1),
                                            _mm256_mullo_epi32(z1, rs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), v0);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc + 8), v1);
    }
}

#include "qgemm_driver.inc"

}  // namespace qavxvnni

const QGemmKernels avxvnni_qgemm = qavxvnni::make_qgemm_table("avx2-vnni");

}  // namespace graphrt_simd
