// The interface between the blocked-layout bindings (blocked.cpp) and the per-ISA kernels of
// blocked_driver.inc, included by each kernels_<isa>.cpp: plain data and function pointers
// only, like kernels.h, so nothing compiled with an ISA's flags runs before the CPU check.
//
// A blocked float32 image of a logical (N, C, H, W) tensor is (N, CB, H, W, B), CB = ceil(C /
// B), C-contiguous: channel c at [n, c / B, h, w, c % B], so a position's B channels are one
// vector.  The lanes of channels >= C in the last block are padding: unspecified on input,
// never read into a real channel's output.  B is the ISA's vector width (avx512 16, avx2 8;
// the scalar path 8).  A "block plane" is one (n, cb): H * W positions of B floats.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace graphrt_simd {

// A copy between blocked and planar images, cut into units: block plane q = u / chunks,
// positions [k * chunk, min(hw, (k + 1) * chunk)) for k = u % chunks.
struct BlockedCopy {
    int64_t channels;  // C of the planar side
    int64_t cblocks;   // CB = ceil(C / B)
    int64_t hw;        // positions per plane
    int64_t chunk, chunks;
};

struct BlockedKernels {
    const char* name;
    int block;  // B
    // MaxPool of the blocked x into the blocked y, output rows [r0, r1) of the planes * s.oh
    // (row r: block plane r / s.oh, output row r % s.oh); s's pads are the begin pads (s.ph,
    // s.pw), taps outside x skipped, a window with none inside -inf.  taps: per output row oy
    // the kernel rows [taps[2 oy], taps[2 oy + 1]) inside x, then per output column ox the
    // kernel columns [taps[2 (oh + ox)], taps[2 (oh + ox) + 1]) inside x.  work: s.w * B floats.
    void (*maxpool)(const ConvShape& s, const int64_t* taps, const float* x, float* y,
                    int64_t r0, int64_t r1, float* work);
    // GlobalAveragePool of block planes [q0, q1) of x (hw positions each; plane q is image q /
    // cblocks, block q % cblocks) into the planar y (images `channels` floats apart): each
    // channel's sum over the positions in ascending order, times scale.
    void (*mean)(const float* x, float* y, int64_t hw, int64_t cblocks, int64_t channels,
                 int64_t q0, int64_t q1, float scale);
    // Units [u0, u1) of blocked x -> planar y (channels >= C dropped) and planar x -> blocked
    // y (padding lanes +0), exact copies.
    void (*from_blocked)(const BlockedCopy& s, const float* x, float* y, int64_t u0, int64_t u1);
    void (*to_blocked)(const BlockedCopy& s, const float* x, float* y, int64_t u0, int64_t u1);
};

// The blocked kernels of the ISA whose IsaKernels these are (blocked.cpp).
const BlockedKernels& blocked_kernels_of(const IsaKernels& kern);

extern const BlockedKernels scalar_blocked;
#if defined(GRAPHRT_SIMD_X86)
extern const BlockedKernels avx2_blocked;
extern const BlockedKernels avx512_blocked;
#endif

}  // namespace graphrt_simd
