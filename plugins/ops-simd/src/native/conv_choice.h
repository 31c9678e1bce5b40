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

// Which of the measured rule sets "auto" follows on avx512: the one measured where a 512-bit
// operation runs on two 256-bit halves (SPLIT512: Zen 4, and any CPU not known to be
// otherwise) or the one measured on full-width 512-bit units (FULL512: Zen 5, AMD family 26
// and later), where the multiply-adds take half the time and the copies, transforms and
// partial tiles around them weigh twice as much.  Other ISAs have one rule set.
enum ConvTuning { SPLIT512, FULL512 };

// This CPU's rule set (module.cpp: cpuid, once).
ConvTuning detected_conv_tuning();
// "auto" (this CPU's), "split512" or "full512"; another name is a ValueError.
ConvTuning conv_tuning_named(const std::string& name);
const char* conv_tuning_name(ConvTuning tuning);

// The kernel that `kernel` names ("auto": conv_choice.cpp's measured rules) for geometry s
// with mg output channels per group on isa (avx512 by tuning's rules); a forced kernel that the
// geometry, the ISA or exact mode cannot run is a ValueError.
ConvKernel choose_conv_kernel(const ConvShape& s, int64_t mg, const IsaKernels& isa, bool exact,
                              const std::string& kernel, ConvTuning tuning);

}  // namespace graphrt_simd
