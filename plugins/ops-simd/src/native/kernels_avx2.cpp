// AVX2 + FMA kernels, compiled with -mavx2 -mfma; called only after the CPU and OS checks.
// The fast micro-kernel uses explicit FMA intrinsics; the exact kernel multiplies and adds
// separately.
#include <immintrin.h>

#include "kernels.h"
#include "affine.h"
#include "blocked.h"
#include "fast.h"
#include "rnn.h"
#include "vec_x86.h"

namespace graphrt_simd {
namespace avx2 {

// 6 x 16 tile: 12 accumulators, 2 B vectors and one broadcast in the 16 ymm registers.
constexpr int MR = 6;
constexpr int NR = 16;
constexpr int ER = 4;
constexpr int EU = 2;
// Conv: 6 x 16 tiles as the GEMM (12 accumulators).
constexpr int CMR = 6;
// positions per channels-in-lanes conv tile: rows up to 24 wide are one tile, run in equal
// pieces of at most 6 (13: 5, 5, 3; 14: 5, 5, 4) by pairs of channel vectors (12 accumulators)
constexpr int CRT = 24;
constexpr int CNR = 16;

GRAPHRT_SIMD_X86_VEC(__m256, 8, _mm256);

// 8 float16 (F16C: this file is built with -mf16c, the avx2 path requires it) or bfloat16
// (the 16 bits as the top half of a float32) widened to 8 floats, exactly.
struct HalfLoad {
    static inline __m256 f16(const uint16_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static inline __m256 bf16(const uint16_t* p) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
};

inline __m256 blend(__m256 m, __m256 a, __m256 b) { return _mm256_blendv_ps(b, a, m); }
GRAPHRT_SIMD_X86_UNARY(__m256, __m256i, 8, _mm256, 256, __m256, _mm256_cmp_ps, blend,
                       _mm256_round_ps);

#include "unary_driver.inc"

// MaxPool's lane operations (pool_driver.inc): lanes 0, 2, ..., 14 (even) and 1, 3, ..., 15
// (odd) of the 16 lanes a then b (shufps picks them per 128-bit half; vpermpd puts the halves
// in order).
struct PoolLanes {
    static inline __m256 even(__m256 a, __m256 b) {
        const __m256 halves = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(halves), 0xD8));
    }
    static inline __m256 odd(__m256 a, __m256 b) {
        const __m256 halves = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
        return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(halves), 0xD8));
    }
    // Whether a NaN was seen: f, or a NaN in a lane of a or b (planes_threes_s2_whole's rows)
    using Flags = __m256;
    static inline Flags no_nan() { return _mm256_setzero_ps(); }
    static inline Flags note_nan(Flags f, __m256 a, __m256 b) {
        return _mm256_or_ps(f, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    }
    static inline bool any_nan(Flags f) { return _mm256_movemask_ps(f) != 0; }
    // AveragePool's partial vectors: lanes [0, n) of p, n < 8 (the others are never touched)
    static inline __m256 load_n(const float* p, int64_t n) { return load_first8(p, n); }
    static inline void store_n(float* p, __m256 v, int64_t n) { store_first8(p, v, n); }
    // lanes N, ..., 7 of a, then lanes 0, ..., N - 1 of b (N <= 4): palignr per 128-bit half,
    // over a and the halves a_hi, b_lo
    template <int N>
    static inline __m256 shift(__m256 a, __m256 b) {
        const __m256 middle = _mm256_permute2f128_ps(a, b, 0x21);
        return _mm256_castsi256_ps(
            _mm256_alignr_epi8(_mm256_castps_si256(middle), _mm256_castps_si256(a), 4 * N));
    }
    // p's lane 0, then lanes 0, ..., 6 of v (shift<7> would shift zeros in: palignr's reach is
    // one 128-bit half)
    static inline __m256 push_front(__m256 v, __m256 p) {
        const __m256 up = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6));
        return _mm256_blend_ps(up, p, 0x01);
    }
    // lane n of v in every lane (n < 8)
    static inline __m256 lane(__m256 v, int64_t n) {
        return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(static_cast<int>(n)));
    }
    // lanes [lo, hi) of p, the others `fill` (0 <= lo < hi <= 8; only those lanes are read):
    // loaded from p + lo, moved up lo lanes
    static inline __m256 load_range(const float* p, int64_t lo, int64_t hi, __m256 fill) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256i from = _mm256_set1_epi32(static_cast<int>(lo));
        const __m256i in = _mm256_andnot_si256(
            _mm256_cmpgt_epi32(from, lane),
            _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(hi)), lane));
        const __m256 v = _mm256_permutevar8x32_ps(load_first8(p + lo, hi - lo),
                                                  _mm256_sub_epi32(lane, from));
        return _mm256_blendv_ps(fill, v, _mm256_castsi256_ps(in));
    }
};

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

}  // namespace avx2

const IsaKernels avx2_kernels = avx2::make_table("avx2");
const RnnKernels avx2_rnn = avx2::make_rnn_table("avx2");
const FastKernels avx2_fast = avx2::make_fast_table("avx2");
const AffineKernels avx2_affine = avx2::make_affine_table("avx2");
const BlockedKernels avx2_blocked = avx2::make_blocked_table("avx2");

}  // namespace graphrt_simd
