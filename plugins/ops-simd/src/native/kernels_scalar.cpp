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

struct Vec {
    using T = float;
    static constexpr int W = 1;
    static inline T load(const float* p) { return *p; }
    static inline void store(float* p, T v) { *p = v; }
    static inline T set1(float v) { return v; }
    static inline T mul(T x, T y) { return x * y; }
    static inline T add(T x, T y) { return x + y; }
    static inline T madd(T a, T b, T c) { return c + a * b; }  // two roundings: no FMA here
};

#include "gemm_driver.inc"

}  // namespace scalar

const IsaKernels scalar_kernels = scalar::make_table("scalar");

}  // namespace graphrt_simd
