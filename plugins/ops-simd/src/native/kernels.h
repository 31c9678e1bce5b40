// The interface between the dispatcher (module.cpp, conv_plan.cpp) and the per-ISA kernel
// translation units.
//
// Each ISA's kernels live in their own .cpp compiled with their own -m flags; this header only
// declares plain data and function pointers, so nothing compiled for AVX-512 can leak into
// code that runs before the CPU check.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

namespace graphrt_simd {

enum Activation : int { ACT_NONE = 0, ACT_RELU = 1, ACT_CLIP = 2, ACT_SIGMOID = 3 };
enum BiasAxis : int { BIAS_NONE = 0, BIAS_COL = 1, BIAS_ROW = 2 };
// The element-wise functions of unary_driver.inc (exact mode's algorithms; Gelu, fast mode
// only, is x * 0.5 * (1 + erf(x / sqrt(2))) on that erf).
enum UnaryOp : int { OP_EXP = 0, OP_TANH = 1, OP_SIGMOID = 2, OP_ERF = 3, OP_GELU = 4, OP_RELU = 5 };

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

// A 2-D convolution of one image and one group, as the fast conv kernel reads it: c input
// channels of h x w, kernel kh x kw, strides, dilations, pads before each axis, and the output
// extents (which fix the pads after).
struct ConvShape {
    int64_t c, h, w;
    int64_t kh, kw, sh, sw, dh, dw, ph, pw;
    int64_t oh, ow;
};

// A unit-stride convolution of one image and group on its staged (padded) planes: c planes of
// hp x wp (plane stride hp * wp), the input's h x w at (ph, pw) inside them, zeros elsewhere;
// staged = floats of the whole staged buffer, including the tail that wide positions read.
// The direct kernel numbers positions q = oy * pitch + ox: pitch wp (wide positions, tiles run
// on across rows) or ow rounded up to whole tiles (row tiles; conv_plan.cpp picks the fewer).
struct DirectShape {
    int64_t c, h, w, kh, kw, ph, pw;
    int64_t oh, ow, hp, wp;
    int64_t staged;
    int64_t pitch = 0;
    // a strided direct plan's phase planes (conv_stage): each channel's hp x wp floats are
    // sh * sw planes of hp / (sh * sw) rows, phase (py, px) holding padded rows py + sh * r
    // and columns px + sw * c
    int64_t sh = 1, sw = 1;
    // offs[kk] = kk * kstep for every depth step (one channel plane after another: 1x1
    // kernels), found once per plan; 0: the kernels read offs (see tap_offset)
    int64_t kstep = 0;
    // floats per position of the staged image: 1 for planes of positions, the block B of a
    // blocked image (its channel c at plane c / B, lane c % B: conv_blocked.inc), whose
    // positions lie B floats apart (offs already hold the blocked offsets)
    int64_t xblock = 1;
};
// The largest stride of a direct plan (its phase planes)
constexpr int64_t DIRECT_MAX_STRIDE = 4;

// Position tiles of the channels-in-lanes conv kernel: one output row, or above
// LANES_WHOLE_ROW_MAX positions equal pieces of at most crt positions (a 112-wide row: 8 of 14),
// whose positions lie at one stride from the first: per_row tiles a row, width positions
// each.  A tile runs in pieces of as many positions as a kernel's accumulators take, so whole
// rows cut into fewer of them (a 56-wide row: quads' 10 pieces of 5-6 positions, not 4 tiles'
// 12 of 4-5; 3x3 layers of light_resnet50 and light_squeezenet 0.5-1.6% faster on avx512 and
// avx2).  Narrow rows (at most crt / 2: 7 x 7 maps) run two vectors of channels at a time.
constexpr int64_t LANES_WHOLE_ROW_MAX = 64;
struct LanesTiling {
    bool narrow;
    int64_t per_row, width, tiles;
    LanesTiling(int64_t oh, int64_t ow, int64_t crt)
        : narrow(2 * ow <= crt),
          per_row(ow <= LANES_WHOLE_ROW_MAX ? 1 : (ow + crt - 1) / crt),
          width((ow + per_row - 1) / per_row),
          tiles(oh * per_row) {}
};

// Depth rows and output positions of one block of the conv's columns (CONV_KC * CONV_NCB
// floats of scratch per thread); CONV_NCB is a multiple of every ISA's cnr.
constexpr int64_t CONV_KC = 256;
constexpr int64_t CONV_NCB = 256;
// Floats after a packed convolution weight, zero, that a kernel may read with a whole vector
// (conv_driver.inc's conv_tail: one ISA vector at a tile's last depth step; wino_column: a
// vector per sliver row, W - MR floats past the last sliver).
constexpr int64_t PACK_SLACK = 16;

// MaxPool's and AveragePool's layout (pool_driver.inc's pool2d; pool_layout in module.cpp fills
// it, AvgPoolCall the divisor; MaxPool's stays null): rows of column reductions of wp floats
// (wp >= the columns the windows read and pw + w, a multiple of the column stride); divisor
// holds oh rows of pq = wp / sw reciprocal counts (ones past ow and for slack floats after);
// slack floats follow each buffer (whole vectors past a row's end).
struct AvgPoolGeometry {
    int64_t wp, pq, slack;
    int64_t ring;  // planes whose column sums are taken before their window sums
    const float* divisor;
    // per output row oy, the kernel rows inside x: [rows[2 * oy], rows[2 * oy + 1]) (made
    // once, when the call is bound, not per plane)
    const int64_t* rows;
};

// pool2d's ring: about 4096 floats of column reductions (2 to 32 planes' buffers).
inline int64_t avgpool_ring(int64_t run) {
    const int64_t ring = 4096 / run;
    return ring < 2 ? 2 : ring > 32 ? 32 : ring;
}

// Floats of pool2d's work buffer: g.ring buffers of oh rows of column reductions, g.slack after
// each.
inline int64_t avgpool_work_floats(const ConvShape& s, const AvgPoolGeometry& g) {
    return g.ring * (s.oh * g.wp + g.slack);
}

// pool2d's flat kernel (pool_driver.inc): 3 x 3 windows at stride 1 with one pad on every side
// (the inception pool branches' AveragePool and MaxPool), planes of (h - 2) * w >= lanes
// positions whose buffers (4 * h * w + 6 * lanes floats) fit the work buffer (up to 28 x 28).
inline bool pool_flat_threes(const ConvShape& s, const AvgPoolGeometry& g, int64_t lanes) {
    return s.kh == 3 && s.kw == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 &&
           s.ph == 1 && s.pw == 1 && s.oh == s.h && s.ow == s.w && (s.h - 2) * s.w >= lanes &&
           4 * s.h * s.w + 6 * lanes <= avgpool_work_floats(s, g);
}

// The outputs of a row of 3 x 3/2 windows whose last column lies inside the row (at most ow).
inline int64_t threes_s2_inside_outputs(const ConvShape& s) {
    const int64_t n = (s.w - 3 + s.pw) / 2 + 1;
    return n < s.ow ? n : s.ow;
}

// pool2d's rows of 3 x 3/2 windows in whole vectors (pool_driver.inc, avx2's 8 lanes): unit
// column dilation, at most one pad column on the left, a vector of outputs or more inside.
inline bool threes_s2_whole_rows(const ConvShape& s, int64_t lanes) {
    return s.kw == 3 && s.sw == 2 && s.dw == 1 && s.pw <= 1 && s.w >= lanes &&
           threes_s2_inside_outputs(s) >= lanes;
}

// Winograd F(2x2, 3x3) of one image and group (wino_driver.inc): a 3x3 kernel at unit
// strides and dilations, outputs in tiles of 2 x 2, th x tw of them numbered t = ty * tw + tx
// and rounded up to whole panels of nr (tpad).  V holds 16 matrices of c x tpad (input
// channels by tiles) in panels of nr tiles; U 16 of m x c in slivers of mr output channels.
struct WinoShape {
    int64_t c, h, w, ph, pw, oh, ow;
    int64_t th, tw, tiles, tpad;
    int64_t m, slivers;  // output channels of the group, ceil(m / mr)
    int64_t vmat;        // floats from one of V's matrices to the next (>= c * tpad)
    int64_t v_p0 = 0;    // the first panel V holds (a chunk of the tiles': ConvPlan's run)
};

// What wino_tiles reads to compute an output by its window instead (where A^T M A is not
// finite: a NaN or infinity in a 4 x 4 patch reaches all four outputs of its tile, also those
// whose 3 x 3 window does not hold it): the group's x (plane stride x_cs, row stride x_rs, unit
// column stride) and its weight, m x c x 3 x 3, C-contiguous.
struct WinoWindows {
    const float* x;
    std::ptrdiff_t x_cs, x_rs;
    const float* w;
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
    int cmr;  // output channels per conv micro-tile (rows of a packed weight tile)
    int cnr;  // output positions per conv micro-tile
    int crt;  // output positions per channels-in-lanes conv tile
    int conv_tail;  // the most positions conv_fast takes past its last whole tile in lanes
    // w (m x k, row-major) packed as ceil(m / cmr) tiles of cmr rows, each tile's whole
    // depth after another (conv_direct, and conv_fast with w_tiles 0): ceil(m / cmr) * cmr * k
    // floats.
    void (*conv_pack_w)(int64_t m, int64_t k, const float* w, float* dst);
    // The same floats depth block after depth block (CONV_KC), each block's tiles end to end
    // (conv_fast with w_tiles = ceil(m / cmr)).
    void (*conv_pack_w_blocked)(int64_t m, int64_t k, const float* w, float* dst);
    // Output channels [m0, m1) (m0 a multiple of cmr) and positions [j0, j1) (at most
    // CONV_NCB of them) of one image and group: y = act((w @ columns(x) + bias) + z), bias per
    // channel or null, z laid out as y or null (a residual sum), act ACT_NONE or ACT_RELU; x
    // has unit column stride, y rows (channels) have stride ldy and hold the positions
    // contiguously; block is CONV_KC * CONV_NCB floats; wpacked is conv_pack_w_blocked's
    // layout of w_tiles tiles, or conv_pack_w's where w_tiles is 0.  conv_direct and
    // conv_lanes take z the same way.  Each of the three is a pair: [0] fast mode, [1] exact
    // mode (a multiply and an add per term, the first term assigned: docs/exact-mode.md's
    // sums; act and z unused).  conv_fast's pairs: whole tiles two at a time where the ISA has
    // the pair (avx512: conv_driver.inc's conv_tile_pair; the same bits either way).
    void (*conv_fast[2])(const ConvShape& s, const float* x, std::ptrdiff_t x_cs,
                         std::ptrdiff_t x_rs, const float* wpacked, int64_t w_tiles, int64_t m0,
                         int64_t m1, int64_t j0, int64_t j1, float* y, const float* z,
                         std::ptrdiff_t ldy, const float* bias, int act, float* block,
                         bool pairs);
    // The staged planes of one image and group (DirectShape) from x (unit column stride).
    void (*conv_stage)(const DirectShape& d, const float* x, std::ptrdiff_t x_cs,
                       std::ptrdiff_t x_rs, float* dst);
    // Output channels [m0, m1) (m0 a multiple of cmr) and tile positions [q0, q1) (q = oy *
    // d.pitch + ox; q0 a multiple of cnr) of a unit-stride convolution: y = act(w @ taps +
    // bias), tap row kk read at staged + offs[kk] + oy * wp + ox.
    void (*conv_direct[2])(const DirectShape& d, const float* staged, const int64_t* offs,
                        const float* wpacked, int64_t m0, int64_t m1, int64_t q0, int64_t q1,
                        float* y, const float* z, std::ptrdiff_t ldy, const float* bias,
                        int act);
    // Whether conv_lanes runs on this ISA (its channel tile is one vector).
    bool conv_lanes_ok;
    int lmr;          // output channels per channels-in-lanes tile (one vector; its packing)
    int lanes_multi;  // channel vectors conv_lanes runs together on wide rows (quads: 4)
    // w packed for conv_lanes: conv_pack_w's layout with lmr rows per tile.
    void (*conv_pack_w_lanes)(int64_t m, int64_t k, const float* w, float* dst);
    // Output channels [m0, m1) (m0 a multiple of lmr) and position tiles [t0, t1) (LanesTiling;
    // any strides) from the staged planes (d: their geometry): one vector of lmr channels per
    // position, taps broadcast from staged + offs[kk] + each position's offset; groups of
    // lanes_multi channel vectors run the depth in blocks of kb steps (k: whole).
    void (*conv_lanes[2])(const ConvShape& s, const DirectShape& d, const float* staged,
                       const int64_t* offs, const float* wpacked, int64_t m0, int64_t m1,
                       int64_t t0, int64_t t1, float* y, const float* z, std::ptrdiff_t ldy,
                       const float* bias, int act, int64_t kb);
    // Fast mode's output rows [r0, r1) of channels [m0, m1) (m0 a multiple of lmr) of one
    // image and group (one row per output row: not a flat 1x1 plan, the whole depth per
    // tile), kept channels-last: channel vector v's (r, x) at band + v * vstride + ((r - r0) *
    // ow + x) * lmr, bias whole vectors from m0 (or null); conv_lanes' bits.
    void (*conv_lanes_band)(const ConvShape& s, const DirectShape& d, const float* staged,
                            const int64_t* offs, const float* wpacked, int64_t m0, int64_t m1,
                            int64_t r0, int64_t r1, float* band, int64_t vstride,
                            const float* bias, int act);
    // MaxPool of planes [p0, p1) (x: plane stride x_cs, row stride x_rs, unit column
    // stride; y: plane stride y_cs, rows of s.ow): geometry in s (c unused; oh, ow the
    // output extents); g: the row layout (its divisor unused); work holds
    // avgpool_work_floats(s, g) floats.
    void (*maxpool2d)(const ConvShape& s, const AvgPoolGeometry& g, const float* x,
                      std::ptrdiff_t x_cs, std::ptrdiff_t x_rs, int64_t p0, int64_t p1, float* y,
                      std::ptrdiff_t y_cs, float* work);
    // MaxPool of a band conv_lanes_band wrote (channels [0, channels), vectors vstride apart;
    // s: the pool over its s.h rows) into y's planes (channel stride ldy, rows of s.ow):
    // maxpool2d's bits.  work holds (s.w + 8) * lmr floats.
    void (*maxpool_band)(const ConvShape& s, const float* band, int64_t vstride,
                         int64_t channels, float* y, std::ptrdiff_t ldy, float* work);
    // AveragePool of planes [p0, p1) (x and y as maxpool2d's; g: the layout, sums scaled by
    // g.divisor's reciprocal counts); work holds avgpool_work_floats(s, g) floats.
    void (*avgpool2d)(const ConvShape& s, const AvgPoolGeometry& g, const float* x,
                      std::ptrdiff_t x_cs, std::ptrdiff_t x_rs, int64_t p0, int64_t p1,
                      float* y, std::ptrdiff_t y_cs, float* work);
    // The means of planes [p0, p1) of hw contiguous floats (plane stride x_cs): y[p] = their
    // sum (this kernel's order) * scale.
    void (*plane_means)(const float* x, std::ptrdiff_t x_cs, int64_t hw, int64_t p0, int64_t p1,
                        float* y, float scale);
    // NonMaxSuppression (nms.cpp): whether one of `count` selected boxes has an IoU above
    // threshold with `box` (x_min, y_min, x_max, y_max, area); sel[0..4] hold those five
    // values of the selected boxes, padded with NaN up to a multiple of NMS_CHUNK.
    bool (*nms_suppressed)(const float* const* sel, int64_t count, const float* box,
                           float threshold);
    // Floats of one thread's work buffer for depthwise2d (a staged, padded plane).
    int64_t (*depthwise_work)(const ConvShape& s);
    // Depthwise convolution (group = channels, one weight plane each) of planes [p0, p1) of
    // x (plane p is channel p % channels; plane stride x_cs, row stride x_rs, unit column
    // stride): y = act(conv(x, w[c]) + bias[c]), w channels x kh x kw, bias null or per
    // channel, act ACT_NONE or ACT_RELU; y planes of oh x ow at stride y_cs.
    void (*depthwise2d)(const ConvShape& s, int64_t channels, const float* x,
                        std::ptrdiff_t x_cs, std::ptrdiff_t x_rs, int64_t p0, int64_t p1,
                        const float* w, const float* bias, int act, float* y,
                        std::ptrdiff_t y_cs, float* work);
    // Whether depthwise2d puts a block of channels in the lanes for this shape (small maps)
    // rather than one plane's outputs (the same bits either way).
    bool (*depthwise_lanes)(const ConvShape& s);
    int mr;  // rows of the fast GEMM's micro-tile (wino_pack_u's slivers)
    // U = G g G^T of every (output, input) channel pair of w (m x c x 3 x 3, C-contiguous)
    // as 16 matrices of slivers of mr output channels: element (xi, o, ic) at
    // dst[((xi * slivers + o / mr) * c + ic) * mr + o % mr], rows past m zero.
    void (*wino_pack_u)(int64_t m, int64_t c, const float* w, float* dst);
    // V = B^T d B of input channels [c0, c1) and tiles [t0, t1) of one image and group (x:
    // plane stride x_cs, row stride x_rs, unit column stride): element (xi, ic, t) at
    // v[xi * vmat + (t / nr - v_p0) * c * nr + ic * nr + t % nr]; the tiles past s.tiles are zeroed
    // by the call that ends at s.tiles.  rows holds wino_input_floats(s, c1 - c0, t0, t1).
    void (*wino_input)(const WinoShape& s, const float* x, std::ptrdiff_t x_cs,
                       std::ptrdiff_t x_rs, int64_t c0, int64_t c1, int64_t t0, int64_t t1,
                       float* v, float* rows);
    // Output channels of slivers [s0, s1) and tiles [t0, t1) (t0 a multiple of nr): the 16
    // products U V into scratch (wino_scratch_floats), then y = act(A^T M A + bias + z) (y,
    // z: channel stride ldy, rows of s.ow), act ACT_NONE or ACT_RELU; a non-finite A^T M A is
    // computed again from its window (win).
    void (*wino_tiles)(const WinoShape& s, const float* v, const float* u, int64_t s0,
                       int64_t s1, int64_t t0, int64_t t1, float* y, const float* z,
                       std::ptrdiff_t ldy, const float* bias, int act, const WinoWindows& win,
                       float* scratch);
};

// Floats past the Winograd buffers' last rows that a partial vector may write or read whole
// (a vector's, W <= 16).
constexpr int64_t WINO_SLACK = 16;

// Floats of wino_tiles' scratch for `rows` output channels (slivers * mr) and `tiles` tiles
// (rounded up to whole panels of nr): 16 products, then four rows of tw outputs.
inline int64_t wino_scratch_floats(int64_t rows, int64_t tiles, int64_t nr, int64_t tw) {
    return 16 * rows * ((tiles + nr - 1) / nr * nr) + 4 * tw + WINO_SLACK;
}

// Floats from one of wino_input's padded rows to the next: 2 tw + 2 columns, then slack for
// the last vectors' lanes past them (read, never used: up to 2 W + 4 floats, W <= 16).
inline int64_t wino_pitch(const WinoShape& s) { return 2 * s.tw + 2 + 36; }

// Floats of wino_input's rows buffer for `channels` channels and tiles [t0, t1): each
// channel's padded rows under the tile rows [t0, t1) touches, then 16 rows of tw (d B).
inline int64_t wino_input_floats(const WinoShape& s, int64_t channels, int64_t t0, int64_t t1) {
    const int64_t tile_rows = (t1 - 1) / s.tw - t0 / s.tw + 1;
    return channels * (2 * tile_rows + 2) * wino_pitch(s) + 16 * s.tw + WINO_SLACK;
}

// Selected boxes per step of nms_suppressed (its arrays are padded to a multiple of it).
constexpr int64_t NMS_CHUNK = 16;

extern const IsaKernels scalar_kernels;
#if defined(GRAPHRT_SIMD_X86)
extern const IsaKernels avx2_kernels;
extern const IsaKernels avx512_kernels;
#endif

}  // namespace graphrt_simd
