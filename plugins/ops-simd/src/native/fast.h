// The interface between the fast-mode bindings (attention.cpp) and the per-ISA kernels of
// fast_math.inc and attention_driver.inc, included by each kernels_<isa>.cpp: plain data and
// function pointers only, like kernels.h, so nothing compiled with an ISA's flags runs before
// the CPU check.  These kernels may fuse multiply-adds: fast mode only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.h"

namespace graphrt_simd {

// The functions of FastKernels::unary_fast.
enum FastOp : int { FAST_GELU = 0, FAST_ERF = 1 };

// One attention call: Y = softmax(scale * Q K^T + mask) V for every batch and query head.
// Q (b, hq, q_len, d), K (b, hkv, kv_len, d), V (b, hkv, kv_len, dv), Y (b, hq, q_len, dv),
// the mask (b, hq, q_len, kv_len) with stride 0 on its broadcast axes, or none; query head h
// reads key/value head h / (hq / hkv).  Strides are in elements, any sign for the inputs;
// attention.cpp proves every extent and offset below before a kernel runs.
struct AttentionShape {
    int64_t b, hq, hkv, q_len, kv_len, d, dv;
    int64_t qs[4], ks[4], vs[4], ys[4], ms[4];
    float scale;
    int64_t rows;        // query rows per work item (the last item may have fewer)
    int64_t row_blocks;  // work items per (batch, head): ceil(q_len / rows)
    // One thread's work buffer, in floats: the packed keys, the packed values, amr rows of
    // scores, amr reciprocal row sums, 2 * anr floats of scratch; `work` floats in all.
    int64_t kt, vp, scores, inv, tmp, work;
    int64_t srow;  // floats per row of scores: kv_len rounded up to a multiple of anr
};

struct FastKernels {
    const char* name;
    int amr;  // query rows per register tile
    int anr;  // keys (Q K^T) and value columns (P V) per register tile and packed panel
    // y[i] = op(x[i]) for i in [0, n), float32, op a FastOp; y is x or does not overlap it.
    void (*unary_fast)(int op, const float* x, float* y, int64_t n);
    // Work item `item` in [0, b * hq * row_blocks): batch item / (hq * row_blocks), head
    // (item / row_blocks) % hq, query rows [rb * rows, min(q_len, rb * rows + rows)) for
    // rb = item % row_blocks.  A query row's arithmetic never depends on the item or thread
    // that computes it.  mask is null without a mask; work holds s.work floats.
    void (*attention)(const AttentionShape& s, const float* q, const float* k, const float* v,
                      const float* mask, float* y, int64_t item, float* work);
    // Rows [r0, r1) of n floats (x and y C-contiguous, y may be x): y = ((x - mean) /
    // sqrt(var + eps)) * scale + bias per row; scale and bias n floats or one (step 0), bias
    // may be null.
    // IsaKernels::gemm_fast's product (same arguments, B packed by pack_b) with A read in
    // place and whole tiles added into C from the registers (gemm_rows.inc).
    void (*gemm_rows)(int64_t m0, int64_t m1, int64_t n, int64_t k, Strided a,
                      const float* packed, float* c, std::ptrdiff_t ldc, const Epilogue* ep);
    void (*layer_norm)(const float* x, float* y, int64_t r0, int64_t r1, int64_t n,
                       const float* scale, int64_t scale_step, const float* bias,
                       int64_t bias_step, float eps);
    // gemm_rows on B packed in half-precision panels (PackedB of a float16 [0] or bfloat16 [1]
    // weight: the bits, widened to float32 in the micro-kernel; same arithmetic, same bits).
    void (*gemm_rows_half[2])(int64_t m0, int64_t m1, int64_t n, int64_t k, Strided a,
                              const uint16_t* packed, float* c, std::ptrdiff_t ldc,
                              const Epilogue* ep);
    // Rows [r0, r1) of n floats (x and y C-contiguous, y may be x): y = exp(x - max) / sum of
    // the row's exponentials (fast_math.inc's exp).
    void (*softmax)(const float* x, float* y, int64_t r0, int64_t r1, int64_t n);
};

// The fast kernels of the ISA whose IsaKernels these are (attention.cpp: defined outside the
// ISA translation units, so no ISA-flagged copy of it can be linked in).
const FastKernels& fast_kernels_of(const IsaKernels& kern);

extern const FastKernels scalar_fast;
#if defined(GRAPHRT_SIMD_X86)
extern const FastKernels avx2_fast;
extern const FastKernels avx512_fast;
#endif

}  // namespace graphrt_simd
