// The interface between the dispatcher (module.cpp) and the per-ISA kernel translation units.
//
// Each ISA's kernels live in their own .cpp compiled with their own -m flags; this header only
// declares plain data and function pointers, so nothing compiled for AVX-512 can leak into
// code that runs before the CPU check.
#pragma once

#include <cstddef>
#include <cstdint>

namespace graphrt_simd {

enum Activation : int { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2, ACT_SIGMOID = 3 };
enum BiasAxis : int { BIAS_NONE = 0, BIAS_COL = 1, BIAS_ROW = 2 };
// The element-wise functions of unary_driver.inc (exact mode's algorithms).
enum UnaryOp : int { OP_EXP = 0, OP_TANH = 1, OP_SIGMOID = 2, OP_ERF = 3 };

// What the fast GEMM applies to each finished output element, in this order:
// v = v * alpha (skipped when alpha == 1); v = v + bias[j] or bias[i]; v = act(v).
struct Epilogue {
    float alpha = 1.0f;
    const float* bias = nullptr;
    int bias_axis = BIAS_NONE;
    int act = ACT_NONE;
    float lo = 0.0f;
    float hi = 0.0f;
};

// A read-only matrix with element strides (rows, columns); strides may be any sign.
struct Strided {
    const float* p;
    std::ptrdiff_t rs;
    std::ptrdiff_t cs;
};

struct IsaKernels {
    const char* name;
    int nr;  // columns per packed panel of B
    // dst holds ceil(n / nr) * nr * k floats: panel p is a k x nr row-major block, zero padded.
    void (*pack_b)(int64_t k, int64_t n, Strided b, float* dst);
    // Rows [m0, m1) of C = epilogue(A @ B) with B packed by pack_b; C has column stride 1.
    void (*gemm_fast)(int64_t m0, int64_t m1, int64_t n, int64_t k, Strided a,
                      const float* packed, float* c, std::ptrdiff_t ldc, const Epilogue* ep);
    // Rows [m0, m1) of C = A @ B in the canonical exact order (docs/exact-mode.md); B and C
    // have column stride 1.  NaN results are written as 0x7FC00000.
    void (*gemm_exact)(int64_t m0, int64_t m1, int64_t n, int64_t k, Strided a, Strided b,
                       float* c, std::ptrdiff_t ldc);
    // y[i] = op(x[i]) for i in [0, n), float32, in exact mode's operation order (bit-identical
    // on every ISA); y is x or does not overlap it.  NaN results are written as 0x7FC00000.
    void (*unary)(int op, const float* x, float* y, int64_t n);
};

extern const IsaKernels scalar_kernels;
#if defined(GRAPHRT_SIMD_X86)
extern const IsaKernels avx2_kernels;
extern const IsaKernels avx512_kernels;
#endif

}  // namespace graphrt_simd
