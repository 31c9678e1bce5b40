// Scalar kernels: no -m flags, always compiled, always available.  (The compiler may still use
// the baseline SSE2 of x86-64 for independent lanes; -ffp-contract=off keeps every multiply and
// add separate, and there is no FMA in the baseline.)
#include "kernels.h"

namespace graphrt_simd {
namespace scalar {

constexpr int MR = 4;
constexpr int NR = 8;
constexpr int ER = 4;
constexpr int EU = 4;

static inline void micro_tile(int64_t kc, const float* ap, const float* bp, float* tile) {
    float acc[MR][NR] = {};
    for (int64_t kk = 0; kk < kc; ++kk) {
        const float* b = bp + kk * NR;
        const float* av = ap + kk * MR;
        for (int r = 0; r < MR; ++r) {
            for (int j = 0; j < NR; ++j) acc[r][j] = acc[r][j] + av[r] * b[j];
        }
    }
    for (int r = 0; r < MR; ++r) {
        for (int j = 0; j < NR; ++j) tile[r * NR + j] = acc[r][j];
    }
}

struct Vec {
    using T = float;
    static constexpr int W = 1;
    static inline T load(const float* p) { return *p; }
    static inline void store(float* p, T v) { *p = v; }
    static inline T set1(float v) { return v; }
    static inline T mul(T x, T y) { return x * y; }
    static inline T add(T x, T y) { return x + y; }
};

#include "gemm_driver.inc"

}  // namespace scalar

const IsaKernels scalar_kernels = scalar::make_table("scalar");

}  // namespace graphrt_simd
