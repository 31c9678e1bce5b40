// The interface between the int8 GEMM bindings (qgemm.cpp) and the per-ISA integer kernels of
// qgemm_driver.inc, each compiled in its own qgemm_<isa>.cpp with that ISA's -m flags: plain
// data and function pointers only, like kernels.h, so nothing compiled with an ISA's flags runs
// before the CPU check.
//
// C = (A - a_zero) @ (B - b_zero) in int32, A (m x k) and B (k x n) int8 or uint8, b_zero per
// column.  Every kernel computes the exact sum modulo 2^32 (the int32 wrap of the true value;
// no step saturates), so every ISA, blocking and thread count gives the same bits.  Two packed
// layouts of B, in panels of nr columns (zero past n and past k):
//  * "madd" (scalar, avx2, avx512): int16 values b - b_zero, k in pairs: panel p, pair g holds
//    nr x 2 int16, column c's pair at 2c (vpmaddwd's operands: every product and pair sum of
//    values in [-255, 255] is exact in int32).  A is packed as int16 a - a_zero per call.
//  * "vnni" (avx512 + AVX512-VNNI, or avx2 + AVX-VNNI): int8 values b' = b (int8 B) or b - 128 (uint8 B), k in
//    fours: panel p, group g holds nr x 4 bytes (vpdpbusd's u8 x s8 operands).  A is packed as
//    uint8 a' = a (uint8 A) or a + 128 (int8 A) per call, with its row sums; then
//    sum (a - za)(b - zb) = sum a'b' - zb'_j * rowsum(a')_i + za' * (k * zb'_j - colsum(b')_j)
//    with za' = za (+ 128 for int8 A) and zb'_j = zb_j (- 128 for uint8 B), all in int32 wrap.
#pragma once

#include <cstddef>
#include <cstdint>

namespace graphrt_simd {

struct QGemmArgs {
    int64_t m, n, k;
    int64_t kp;  // k rounded up to the ISA's kgroup
    const void* a;  // m x k, unit column stride, row stride lda (elements)
    std::ptrdiff_t lda;
    bool a_signed;
    int32_t a_zero;
    const void* packed;   // B in the ISA's layout
    const int32_t* bz;    // vnni: zb'_j per padded column (zero past n)
    const int32_t* bcorr; // vnni: k * zb'_j - colsum(b')_j per padded column
    int32_t* c;           // m x n, unit column stride, row stride ldc
    std::ptrdiff_t ldc;
};

struct QGemmKernels {
    const char* name;
    int nr;      // columns per packed panel
    int mr;      // rows per register tile
    int kgroup;  // 2 (madd: int16 pairs) or 4 (vnni: byte quads)
    int esize;   // bytes per packed element: 2 (madd) or 1 (vnni)
    // Pack B (k x n, C-contiguous, int8 when b_signed else uint8) with zero points zb (n
    // values) into dst (ceil(n / nr) * nr * kp elements); vnni also writes bz and bcorr
    // (ceil(n / nr) * nr values each; the madd kernels leave them alone).
    void (*pack_b)(int64_t k, int64_t n, int64_t kp, const void* b, bool b_signed,
                   const int32_t* zb, void* dst, int32_t* bz, int32_t* bcorr);
    // Rows [m0, m1) and panels [p0, p1) of C; work holds qgemm_work_bytes(m1 - m0) bytes,
    // 64-byte aligned.
    void (*gemm)(const QGemmArgs& g, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                 void* work);
    // DynamicQuantizeLinear's two passes (qgemm.cpp): *lo = min(0, min x), *hi = max(0, max
    // x) and *nan = whether x holds a NaN; then y = clip(rint(x / scale) + zero, 0, 255) for
    // |x / scale| < 2^22 (a float32 division, rint half to even).
    void (*dq_range)(const float* x, int64_t n, float* lo, float* hi, int* nan);
    void (*dq_quantize)(const float* x, int64_t n, float scale, float zero, uint8_t* y);
    // QLinearConv's requantization of one (group, image) slab of int32 sums (rows x cols,
    // C-contiguous): v = float32(sum + bias[c]) (the int32 add wraps) * mult[c or 0], then
    // rint (half to even) + zero, clipped to [lo, hi] (NaN -> lo), stored as int8/uint8 at
    // y[r * y_rs + c * y_cs] — ops-basic's requantize, one float32 operation at a time.
    void (*requant)(const int32_t* acc, int64_t rows, int64_t cols, const int32_t* bias,
                    const float* mult, bool mult_per_col, float zero, float lo, float hi,
                    void* y, std::ptrdiff_t y_rs, std::ptrdiff_t y_cs, bool y_signed);
};

// Bytes of the work buffer for `rows` rows of A packed by `kern` (kp: the padded depth).
inline int64_t qgemm_work_bytes(const QGemmKernels& kern, int64_t rows, int64_t kp) {
    const int64_t padded = (rows + kern.mr - 1) / kern.mr * kern.mr;
    const int64_t a = (padded * kp * kern.esize + 63) / 64 * 64;
    return a + padded * 4;
}

extern const QGemmKernels scalar_qgemm;
#if defined(GRAPHRT_SIMD_X86)
extern const QGemmKernels avx2_qgemm;
extern const QGemmKernels avx512_qgemm;
extern const QGemmKernels vnni_qgemm;
extern const QGemmKernels avxvnni_qgemm;
#endif

}  // namespace graphrt_simd
