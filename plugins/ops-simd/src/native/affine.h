// The interface between the per-channel affine binding (affine.cpp) and the per-ISA kernel of
// affine_driver.inc, included by each kernels_<isa>.cpp: plain data and function pointers
// only, like kernels.h, so nothing compiled with an ISA's flags runs before the CPU check.
// Fast mode fuses the multiply and the add where the ISA has an FMA; exact mode rounds both.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace graphrt_simd {

struct AffineKernels {
    const char* name;
    // Planes [p0, p1) of hw floats (plane p is channel p % channels; x and y C-contiguous, y
    // may be x): y = x * scale[c] + shift[c], then max(0, y) when relu (a NaN stays NaN);
    // exact: (x * scale[c]) + shift[c], each rounded, a NaN canonical, no activation.
    void (*channel_affine)(const float* x, float* y, int64_t p0, int64_t p1, int64_t channels,
                           int64_t hw, const float* scale, const float* shift, bool relu,
                           bool exact);
};

// The affine kernel of the ISA whose IsaKernels these are (affine.cpp).
const AffineKernels& affine_kernels_of(const IsaKernels& kern);

extern const AffineKernels scalar_affine;
#if defined(GRAPHRT_SIMD_X86)
extern const AffineKernels avx2_affine;
extern const AffineKernels avx512_affine;
#endif

}  // namespace graphrt_simd
