// AVX-512 kernels (F, DQ, BW, VL), compiled with their -m flags; called only after the CPU and
// OS checks.  The fast micro-kernel uses explicit FMA intrinsics; the exact kernel multiplies
// and adds separately.
#include <immintrin.h>

#include "kernels.h"
#include "affine.h"
#include "blocked.h"
#include "fast.h"
#include "rnn.h"
#include "vec_x86.h"

namespace graphrt_simd {
namespace avx512 {

// 12 x 32 tile: 24 accumulators, 2 B vectors and one broadcast in the 32 zmm registers.
constexpr int MR = 12;
constexpr int NR = 32;
constexpr int ER = 4;
constexpr int EU = 2;
// Conv: 16 output channels x 16 positions (16 accumulators): the channel counts of CNNs
// are multiples of 16 far more often than of 12.
constexpr int CMR = 16;
constexpr int CRT = 14;  // positions per channels-in-lanes conv tile
constexpr int CNR = 16;

GRAPHRT_SIMD_X86_VEC(__m512, 16, _mm512);

// 16 float16 or bfloat16 (the 16 bits as the top half of a float32) widened to 16 floats.
struct HalfLoad {
    static inline __m512 f16(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static inline __m512 bf16(const uint16_t* p) {
        const __m512i w =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
};

inline __m512 blend(__mmask16 m, __m512 a, __m512 b) { return _mm512_mask_blend_ps(m, b, a); }
GRAPHRT_SIMD_X86_UNARY(__m512, __m512i, 16, _mm512, 512, __mmask16, _mm512_cmp_ps_mask, blend,
                       _mm512_roundscale_ps);

// GCC 12 reports -Wmaybe-uninitialized inside its own AVX-512 intrinsics (the _mm512_undefined
// operand of the unmasked forms) once they are inlined here; a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "unary_driver.inc"
#pragma GCC diagnostic pop

// MaxPool's lane operations (pool_driver.inc): lanes 0, 2, ..., 30 (even) and 1, 3, ..., 31
// (odd) of the 32 lanes a then b.
struct PoolLanes {
    static inline __m512 even(__m512 a, __m512 b) {
        const __m512i idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                              28, 30);
        return _mm512_permutex2var_ps(a, idx, b);
    }
    static inline __m512 odd(__m512 a, __m512 b) {
        const __m512i idx = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27,
                                              29, 31);
        return _mm512_permutex2var_ps(a, idx, b);
    }
    // AveragePool's partial vectors: lanes [0, n) of p, n < 16 (masked lanes are never touched)
    static inline __m512 load_n(const float* p, int64_t n) {
        return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
    }
    static inline void store_n(float* p, __m512 v, int64_t n) {
        _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
    }
    // lanes N, ..., 15 of a, then lanes 0, ..., N - 1 of b (the windows of the next columns)
    template <int N>
    static inline __m512 shift(__m512 a, __m512 b) {
        return _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(b), _mm512_castps_si512(a), N));
    }
    // lanes [lo, hi) of p, the others `fill` (0 <= lo < hi <= 16; only those lanes are read)
    static inline __m512 load_range(const float* p, int64_t lo, int64_t hi, __m512 fill) {
        const unsigned mask = ((1u << hi) - 1) & ~((1u << lo) - 1);
        return _mm512_mask_loadu_ps(fill, static_cast<__mmask16>(mask), p);
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

}  // namespace avx512

const IsaKernels avx512_kernels = avx512::make_table("avx512");
const RnnKernels avx512_rnn = avx512::make_rnn_table("avx512");
const FastKernels avx512_fast = avx512::make_fast_table("avx512");
const AffineKernels avx512_affine = avx512::make_affine_table("avx512");
const BlockedKernels avx512_blocked = avx512::make_blocked_table("avx512");

}  // namespace graphrt_simd
