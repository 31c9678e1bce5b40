// The interface between the recurrence driver (rnn.cpp) and the per-ISA cell kernels
// (rnn_driver.inc, included by each kernels_<isa>.cpp): plain data and function pointers only,
// like kernels.h, so nothing compiled with an ISA's flags runs before the CPU check.
//
// Layout (fast mode, float32).  W = the ISA's lane count (RnnKernels::width); the hidden size H
// is cut into P = ceil(H / W) chunks of W units (Hp = P * W, the tail lanes zero).
//  * XW (the input projection plus biases, one row per time step and batch entry): direction d,
//    gate g, unit j at d * G * Hq + g * Hq + j (Hq >= Hp; ONNX's gate order: LSTM i, o, f, c;
//    GRU z, r, h; RNN h).
//  * R of one direction in panels: panel p holds, for k = 0..H-1, V vectors of W floats, vector
//    v = gate v's units p*W .. p*W+W-1 at input k (R[g*H + j, k]), zero past H.  One block with
//    V = G (RNN, LSTM, GRU with linear_before_reset); GRU without it has a z, r block (V = 2)
//    followed by an h block (V = 1), since h needs r of every unit first.
//  * Peepholes (LSTM): i, o, f, each Hp floats; Rbh (GRU with linear_before_reset): Hp floats.
#pragma once

#include <cstddef>
#include <cstdint>

namespace graphrt_simd {

enum RnnOp : int { RNN_PLAIN = 0, RNN_GRU = 1, RNN_LSTM = 2 };

// What every step of one direction shares.
struct RnnCell {
    int op;
    bool linear_before_reset;  // GRU
    bool input_forget;         // LSTM: f = 1 - i
    bool clip_on;
    float clip;               // pre-activations clamped to [-clip, clip] when clip_on
    int64_t hidden;           // H: the depth of every panel
    int64_t panels;           // P
    int64_t xw_gate;          // Hq: floats between two gates of an XW row
    const float* r;           // the panels (GRU without linear_before_reset: the z, r block)
    const float* r_h;         // GRU without linear_before_reset: the h block, else null
    const float* peep;        // LSTM: 3 * Hp floats (i, o, f) or null
    const float* rbh;         // GRU with linear_before_reset: Hp floats
};

// One batch entry of one step: its XW row (this direction's gate 0), H(t-1), H(t), the LSTM
// cell state (updated in place) and the GRU's r (.) H(t-1) (without linear_before_reset), each
// Hp floats.  hnew never aliases hprev.
struct RnnRow {
    const float* xw;
    const float* hprev;
    float* hnew;
    float* c;
    float* t;
};

struct RnnKernels {
    const char* name;
    int width;  // W
    // Panels [p0, p1) of one step for `count` rows, the last panel first when `backward`.
    // Phase 0 is the whole step, except for a GRU without linear_before_reset: phase 0 then
    // writes z (into hnew) and r (.) H(t-1) (into t) and phase 1, after phase 0 finished every
    // panel, the new state.  A unit's arithmetic never depends on p0, p1, backward or count.
    void (*step)(const RnnCell& cell, int phase, int64_t p0, int64_t p1, bool backward,
                 int64_t count, const RnnRow* rows);
};

extern const RnnKernels scalar_rnn;
#if defined(GRAPHRT_SIMD_X86)
extern const RnnKernels avx2_rnn;
extern const RnnKernels avx512_rnn;
#endif

}  // namespace graphrt_simd
