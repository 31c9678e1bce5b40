// Scalar kernels: no -m flags, always compiled, always available.  (The compiler may still use
// the baseline SSE2 of x86-64 for independent lanes; -ffp-contract=off keeps every multiply and
// add separate, and there is no FMA in the baseline.)
#include <climits>
#include <cstring>

#include "kernels.h"
#include "affine.h"
#include "blocked.h"
#include "fast.h"
#include "rnn.h"

namespace graphrt_simd {
namespace scalar {

constexpr int MR = 4;
constexpr int NR = 8;
constexpr int ER = 4;
constexpr int EU = 4;
constexpr int CMR = 4;
constexpr int CRT = 8;  // positions per channels-in-lanes conv tile
constexpr int CNR = 8;

struct Vec {
    using T = float;
    static constexpr int W = 1;
    static inline T load(const float* p) { return *p; }
    static inline void store(float* p, T v) { *p = v; }
    static inline T set1(float v) { return v; }
    static inline T mul(T x, T y) { return x * y; }
    static inline T add(T x, T y) { return x + y; }
    static inline T madd(T a, T b, T c) { return c + a * b; }  // two roundings: no FMA here
    static inline T max(T x, T y) { return x > y ? x : y; }  // y on NaN or a tie, as maxps
};

// A float16 or bfloat16 weight's bits widened to float32 (exact), portably.
struct HalfLoad {
    static inline float f16(const uint16_t* p) {
        const uint32_t h = *p, sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu;
        const uint32_t man = h & 0x3FFu;
        uint32_t bits;
        if (exp == 0x1F) {
            bits = sign | 0x7F800000u | (man << 13);  // infinity, NaN (payload kept)
        } else if (exp != 0) {
            bits = sign | ((exp + 112u) << 23) | (man << 13);  // rebias 15 -> 127
        } else {  // zero or subnormal: man * 2^-24, exact in float32
            float v = static_cast<float>(man) * 5.9604644775390625e-8f;
            std::memcpy(&bits, &v, sizeof bits);
            bits |= sign;
        }
        float out;
        std::memcpy(&out, &bits, sizeof out);
        return out;
    }
    static inline float bf16(const uint16_t* p) {
        const uint32_t bits = static_cast<uint32_t>(*p) << 16;
        float out;
        std::memcpy(&out, &bits, sizeof out);
        return out;
    }
};

// Lanes for unary_driver.inc: 4 floats as a GCC/Clang generic vector (one 16-byte register of
// the baseline SIMD: SSE2, NEON; elsewhere one lane at a time).  Every lane is the same
// separately rounded IEEE operation (no FMA: contraction is off and baseline x86-64 has none).
// Comparisons give all-ones / zero lanes; selects are bitwise.
constexpr int UW = 4;  // set() and iset() spell the 4 lanes out
typedef float UF __attribute__((vector_size(4 * UW)));
typedef int32_t UI __attribute__((vector_size(4 * UW)));
typedef uint32_t UU __attribute__((vector_size(4 * UW)));

struct U {
    using F = UF;
    using I = UI;
    using M = UI;
    static constexpr int W = UW;

    static inline I bits(F a) { return reinterpret_cast<I>(a); }
    static inline F as_float(I a) { return reinterpret_cast<F>(a); }
    static inline F set(float x) { return F{x, x, x, x}; }
    static inline I iset(int32_t x) { return I{x, x, x, x}; }
    static inline F load(const float* p) {
        F r;
        std::memcpy(&r, p, sizeof r);
        return r;
    }
    static inline void store(float* p, F a) { std::memcpy(p, &a, sizeof a); }
    static inline F add(F a, F b) { return a + b; }
    static inline F sub(F a, F b) { return a - b; }
    static inline F mul(F a, F b) { return a * b; }
    static inline F div(F a, F b) { return a / b; }
    // the second operand on NaN, like the SIMD instructions (NaN lanes are replaced anyway)
    static inline F max(F a, F b) { return select(a > b, a, b); }
    static inline F min(F a, F b) { return select(a < b, a, b); }
    // rint of |a| < 2^22 (the driver's arguments are at most 151): a + 1.5 * 2^23 lies in
    // [2^23, 2^24), where the floats are the integers, so the add rounds a to an integer, ties
    // to even, and the subtraction is exact; the sign is a's (rint(-0.25) = -0), put back
    // bitwise.  Plain arithmetic, unlike rintf, which is a library call without SSE4.1.
    static inline F rint(F a) {
        const F magic = set(12582912.0f);
        return copysign((a + magic) - magic, a);
    }
    // trunc of |a| < 2^31 (the driver's are at most 64): through int32, which truncates
    static inline F trunc(F a) {
        return copysign(__builtin_convertvector(__builtin_convertvector(a, I), F), a);
    }
    static inline F copysign(F mag, F sign) {
        return as_float((bits(mag) & iset(0x7FFFFFFF)) | (bits(sign) & iset(INT32_MIN)));
    }
    static inline M isnan(F a) { return a != a; }
    static inline M lt(F a, F b) { return a < b; }
    static inline M le(F a, F b) { return a <= b; }
    static inline F select(M m, F a, F b) { return as_float((m & bits(a)) | (~m & bits(b))); }
    // exact: the driver converts integral values with |a| <= 150 only (never NaN)
    static inline I to_int(F a) { return __builtin_convertvector(a, I); }
    static inline I iadd(I a, I b) { return a + b; }
    static inline I isub(I a, I b) { return a - b; }
    static inline I sar1(I a) { return a >> 1; }  // arithmetic: floor(a / 2)
    static inline I shl23(I a) { return reinterpret_cast<I>(reinterpret_cast<UU>(a) << 23); }
    static inline F bit_and(F a, F b) { return as_float(bits(a) & bits(b)); }
    static inline F bit_or(F a, F b) { return as_float(bits(a) | bits(b)); }
    static inline F bit_xor(F a, F b) { return as_float(bits(a) ^ bits(b)); }
};

// MaxPool's lane operations (pool_driver.inc; fast mode never runs them on this path, tests
// do): lanes 0 and 2 (even) or 1 and 3 (odd) of a, then of b.
struct PoolLanes {
    static inline UF even(UF a, UF b) { return UF{a[0], a[2], b[0], b[2]}; }
    static inline UF odd(UF a, UF b) { return UF{a[1], a[3], b[1], b[3]}; }
    // AveragePool's partial vectors: lanes [0, n) of p, n < 4 (the others zero, untouched)
    static inline UF load_n(const float* p, int64_t n) {
        UF r = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int64_t i = 0; i < n; ++i) r[i] = p[i];
        return r;
    }
    static inline void store_n(float* p, UF v, int64_t n) {
        for (int64_t i = 0; i < n; ++i) p[i] = v[i];
    }
    // lanes N, ..., 3 of a, then lanes 0, ..., N - 1 of b
    template <int N>
    static inline UF shift(UF a, UF b) {
        UF r;
        for (int i = 0; i < 4; ++i) r[i] = i + N < 4 ? a[i + N] : b[i + N - 4];
        return r;
    }
    // lanes [lo, hi) of p, the others `fill` (only those lanes are read)
    static inline UF load_range(const float* p, int64_t lo, int64_t hi, UF fill) {
        for (int64_t i = lo; i < hi; ++i) fill[i] = p[i];
        return fill;
    }
};

#include "unary_driver.inc"
#include "gemm_driver.inc"
#include "nms_driver.inc"
#include "wino_driver.inc"
#include "conv_driver.inc"
#include "rnn_driver.inc"
#include "fast_math.inc"
#include "gemm_rows.inc"
#include "attention_driver.inc"
#include "affine_driver.inc"
#include "blocked_driver.inc"

}  // namespace scalar

const IsaKernels scalar_kernels = scalar::make_table("scalar");
const RnnKernels scalar_rnn = scalar::make_rnn_table("scalar");
const FastKernels scalar_fast = scalar::make_fast_table("scalar");
const AffineKernels scalar_affine = scalar::make_affine_table("scalar");
const BlockedKernels scalar_blocked = scalar::make_blocked_table("scalar");

}  // namespace graphrt_simd
