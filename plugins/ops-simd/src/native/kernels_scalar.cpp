// Scalar kernels: no -m flags, always compiled, always available.  (The compiler may still use
// the baseline SSE2 of x86-64 for independent lanes; -ffp-contract=off keeps every multiply and
// add separate, and there is no FMA in the baseline.)
#include <cstring>

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

// One lane for unary_driver.inc; max/min pick the second operand on NaN like the SIMD ones
// (NaN lanes are replaced before they matter).
struct U {
    using F = float;
    using I = int32_t;
    using M = bool;
    static constexpr int W = 1;
    static inline F set(float v) { return v; }
    static inline I iset(int32_t v) { return v; }
    static inline F load(const float* p) { return *p; }
    static inline void store(float* p, F v) { *p = v; }
    static inline F add(F a, F b) { return a + b; }
    static inline F sub(F a, F b) { return a - b; }
    static inline F mul(F a, F b) { return a * b; }
    static inline F div(F a, F b) { return a / b; }
    static inline F max(F a, F b) { return a > b ? a : b; }
    static inline F min(F a, F b) { return a < b ? a : b; }
    static inline F rint(F a) { return __builtin_rintf(a); }  // default mode: ties to even
    static inline F trunc(F a) { return __builtin_truncf(a); }
    static inline M isnan(F a) { return a != a; }
    static inline M lt(F a, F b) { return a < b; }
    static inline M le(F a, F b) { return a <= b; }
    static inline F select(M m, F a, F b) { return m ? a : b; }
    static inline I to_int(F a) { return static_cast<I>(a); }
    static inline I iadd(I a, I b) { return a + b; }
    static inline I isub(I a, I b) { return a - b; }
    static inline I sar1(I a) { return a >> 1; }  // arithmetic: floor(a / 2)
    static inline I shl23(I a) { return static_cast<I>(static_cast<uint32_t>(a) << 23); }
    static inline F as_float(I a) {
        F f;
        std::memcpy(&f, &a, sizeof f);
        return f;
    }
    static inline uint32_t bits(F a) {
        uint32_t u;
        std::memcpy(&u, &a, sizeof u);
        return u;
    }
    static inline F from_bits(uint32_t u) {
        F f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
    static inline F bit_and(F a, F b) { return from_bits(bits(a) & bits(b)); }
    static inline F bit_or(F a, F b) { return from_bits(bits(a) | bits(b)); }
    static inline F bit_xor(F a, F b) { return from_bits(bits(a) ^ bits(b)); }
};

#include "unary_driver.inc"
#include "gemm_driver.inc"

}  // namespace scalar

const IsaKernels scalar_kernels = scalar::make_table("scalar");

}  // namespace graphrt_simd
