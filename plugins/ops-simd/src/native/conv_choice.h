// graphrt_ops_simd._native: which kernel a planned convolution (ConvPlan) runs.
#pragma once

#include <cstdint>
#include <string>

#include "kernels.h"

namespace graphrt_simd {

// The convolution kernels of a plan (docs/kernels-gemm.md, "Fast convolution"): packed
// columns, the direct kernel on the staged image, channels in lanes, x's planes in place
// (1x1), Winograd F(2x2, 3x3).
enum ConvKernel { PACKED, DIRECT, LANES, STREAM, WINO };

// The kernel that `kernel` names ("auto": conv_choice.cpp's measured rules) for geometry s
// with mg output channels per group on isa; a forced kernel that the geometry, the ISA or
// exact mode cannot run is a ValueError.
ConvKernel choose_conv_kernel(const ConvShape& s, int64_t mg, const IsaKernels& isa, bool exact,
                              const std::string& kernel);

}  // namespace graphrt_simd
