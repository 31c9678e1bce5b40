// The int8 GEMM's scalar kernels (qgemm.h, madd layout): no -m flags, always available.
#include <algorithm>
#include <array>
#include <utility>
#include <cstring>

#include "qgemm.h"

namespace graphrt_simd {
namespace qscalar {

constexpr int QMR = 4;
constexpr int QNR = 8;
constexpr int QKG = 2;
constexpr bool QVNNI = false;
using QA = int16_t;
using QB = int16_t;

template <int R>
inline void qtile(const QA* a, int64_t kp, const QB* b, int32_t* c, std::ptrdiff_t ldc,
                  const int32_t*, const int32_t*, const int32_t*, int32_t) {
    uint32_t acc[R][QNR] = {};
    for (int64_t g = 0; g < kp / 2; ++g) {
        const QB* bg = b + g * QNR * 2;
        for (int r = 0; r < R; ++r) {
            const int32_t a0 = a[r * kp + 2 * g], a1 = a[r * kp + 2 * g + 1];
            for (int j = 0; j < QNR; ++j)  // |a0 b0 + a1 b1| <= 2 * 255 * 255: exact
                acc[r][j] += static_cast<uint32_t>(a0 * bg[2 * j] + a1 * bg[2 * j + 1]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < QNR; ++j) c[r * ldc + j] = static_cast<int32_t>(acc[r][j]);
}

#include "qgemm_driver.inc"

}  // namespace qscalar

const QGemmKernels scalar_qgemm = qscalar::make_qgemm_table("scalar");

}  // namespace graphrt_simd
