// graphrt_ops_simd._native's calls on blocked (NCHWc) images (blocked.h): MaxPool between
// blocked images, GlobalAveragePool of a blocked image into planar means, and the layout copies
// both ways (blocked_driver.inc), spread over the plugin's threads.  Every argument is checked
// once, when a call is made (a plan binds one per run state); calling it only runs the kernel.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "binding.h"
#include "blocked.h"
#include "pool.h"

namespace graphrt_simd {

const BlockedKernels& blocked_kernels_of(const IsaKernels& kern) {
#if defined(GRAPHRT_SIMD_X86)
    if (&kern == &avx2_kernels) return avx2_blocked;
    if (&kern == &avx512_kernels) return avx512_blocked;
#endif
    (void)kern;
    return scalar_blocked;
}

namespace {

// Floats (read plus written) from which a call spreads over its threads, and up to which a
// one-thread call keeps the GIL (below, waking a worker or releasing the GIL costs about what
// the pass does), as affine.cpp's.
constexpr int64_t BLOCKED_PARALLEL = int64_t(1) << 15;
constexpr int64_t BLOCKED_KEEP_GIL = int64_t(1) << 14;
// Positions per unit of a layout copy (whole parts of blocked_driver.inc's 256): 64 KiB of an
// avx512 block plane, so a large image splits over the threads by parts of its planes.
constexpr int64_t COPY_CHUNK = 1024;
// The most one thread keeps of MaxPool's work buffer between calls (1 MiB, a row of 16K
// blocked positions); larger buffers are freed after the call.
constexpr size_t BLOCKED_WORK_KEEP = size_t(1) << 18;

// fn(lo, hi, work) over units [0, units) in up to 4 contiguous runs a thread on the plugin's
// pool, each with its thread's work buffer of work_floats floats.  A unit's arithmetic is its
// own: any split gives the same bits.
template <class Fn>
void run_units(int64_t units, int threads, int64_t work_floats, const Fn& fn) {
    const int64_t blocks = threads > 1 ? std::min<int64_t>(units, 4 * threads) : 1;
    NativePool::get().run(blocks, threads, [&](int64_t i) {
        thread_local std::vector<float> work;
        work.resize(static_cast<size_t>(work_floats));
        const int64_t per = units / blocks, extra = units % blocks;
        const int64_t lo = per * i + std::min(extra, i);
        const int64_t hi = per * (i + 1) + std::min(extra, i + 1);
        fn(lo, hi, work.data());
        if (work.capacity() > BLOCKED_WORK_KEEP) std::vector<float>().swap(work);
    });
}

// A bound call's run: fn over its units, the GIL kept for a small one (run_releasing_gil).
template <class Fn>
void run_call(bool small, int64_t units, int threads, int64_t work_floats, const Fn& fn) {
    if (units == 0) return;
    run_releasing_gil(small, [&] { run_units(units, threads, work_floats, fn); });
}

// ceil(a / d) for a >= 0, d >= 1, without the a + d - 1 that could overflow.
inline int64_t ceil_div(int64_t a, int64_t d) { return a / d + (a % d != 0); }

// The block B of isa's blocked kernels (ValueError for an ISA this CPU lacks, as kernels_for).
int blocked_block(const std::string& isa) { return blocked_kernels_of(kernels_for(isa)).block; }

// A blocked image's checks: float32, 5 dimensions, C-contiguous, its last axis the block.
template <class A>
void check_blocked(const A& a, const char* what, const BlockedKernels& kern) {
    check_matrix(a, what, 5);
    check_flat(a, what);
    if (static_cast<int64_t>(a.shape(4)) != kern.block)
        throw nb::value_error((std::string(what) + "'s last axis must be the block " +
                               std::to_string(kern.block) + " of isa '" + kern.name + "', got " +
                               std::to_string(a.shape(4)))
                                  .c_str());
}

// A planar image's checks: float32, 4 dimensions, C-contiguous.
template <class A>
void check_planar(const A& a, const char* what) {
    check_matrix(a, what, 4);
    check_flat(a, what);
}

// That `channels` channels fill `cblocks` blocks of b: (cblocks - 1) * b < channels <= cblocks * b.
void check_channels(int64_t channels, int64_t cblocks, int64_t b, const char* what) {
    if (channels > cblocks * b || (cblocks > 0 && channels <= (cblocks - 1) * b))
        throw nb::value_error((std::string(what) + " has " + std::to_string(channels) +
                               " channels; " + std::to_string(cblocks) + " block(s) of " +
                               std::to_string(b) + " hold " +
                               (cblocks > 0 ? std::to_string((cblocks - 1) * b + 1) + " to " +
                                                  std::to_string(cblocks * b)
                                            : std::string("none")))
                                  .c_str());
}

// ---- MaxPool ---------------------------------------------------------------------------------

// y = MaxPool(x) of blocked float32 images: x (N, CB, H, W, B), y (N, CB, OH, OW, B), both C-
// contiguous and apart; pads = the pads before each axis (top, left), y's extents fix the
// windows (the caller's end pads and ceil_mode); taps outside x are skipped, a window with
// none inside is -inf, a NaN tap makes the output NaN.
class BlockedMaxPoolCall {
public:
    BlockedMaxPoolCall(InArray x, OutArray y, const std::vector<int64_t>& kernel,
                       const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                       const std::vector<int64_t>& pads, const std::string& isa, int threads)
        : x_(x), y_(y), kern_(&blocked_kernels_of(kernels_for(isa))) {
        check_blocked(x, "x", *kern_);
        check_blocked(y, "y", *kern_);
        const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
        if (ys[0] != xs[0] || ys[1] != xs[1])
            throw nb::value_error(("y " + dims(ys) + " must have the images and channel blocks "
                                   "of x " + dims(xs)).c_str());
        check_no_overlap(y, x, "x");
        s_ = pool_shape(kernel, strides, dilations, pads, 2, xs[2], xs[3], ys[2], ys[3]);
        units_ = mul(mul(xs[0], xs[1], "the planes"), s_.oh, "the output rows");
        if (s_.ow == 0) units_ = 0;  // nothing to write
        if (units_ == 0) return;
        // every tap offset the kernel forms lies inside these extents (checked: no overflow)
        padded_extent(s_.h, s_.ph, s_.kh, s_.sh, s_.dh, s_.oh);
        padded_extent(s_.w, s_.pw, s_.kw, s_.sw, s_.dw, s_.ow);
        work_floats_ = bounded(mul(s_.w, kern_->block, "the blocked MaxPool work buffer"),
                               MAX_POOL_WORK, "the blocked MaxPool work buffer");
        // per output row and column, the taps inside x in closed form (pool_layout's rows)
        taps_.resize(static_cast<size_t>(2 * (s_.oh + s_.ow)));  // y's extents: no overflow
        auto inside = [](int64_t start, int64_t n, int64_t k, int64_t d, int64_t* out) {
            const int64_t t0 = start >= 0 ? 0 : ceil_div(-start, d);
            const int64_t below = n > start ? ceil_div(n - start, d) : 0;
            out[0] = std::min(t0, k);
            out[1] = std::max(std::min(below, k), out[0]);
        };
        for (int64_t oy = 0; oy < s_.oh; ++oy)
            inside(oy * s_.sh - s_.ph, s_.h, s_.kh, s_.dh, &taps_[size_t(2 * oy)]);
        for (int64_t ox = 0; ox < s_.ow; ++ox)
            inside(ox * s_.sw - s_.pw, s_.w, s_.kw, s_.dw, &taps_[size_t(2 * (s_.oh + ox))]);
        const int64_t floats = static_cast<int64_t>(x.size() + y.size());  // arrays: no overflow
        threads_ = floats >= BLOCKED_PARALLEL ? clamp_threads(threads) : 1;
        small_ = threads_ == 1 && floats <= BLOCKED_KEEP_GIL;
    }

    void operator()() const {
        const float* px = static_cast<const float*>(x_.data());
        float* py = static_cast<float*>(y_.data());
        run_call(small_, units_, threads_, work_floats_, [&](int64_t lo, int64_t hi, float* work) {
            kern_->maxpool(s_, taps_.data(), px, py, lo, hi, work);
        });
    }

private:
    InArray x_;  // held: the kernel reads and writes through their pointers
    OutArray y_;
    const BlockedKernels* kern_;
    ConvShape s_{};
    std::vector<int64_t> taps_;
    int64_t units_ = 0, work_floats_ = 0;
    int threads_ = 1;
    bool small_ = false;
};

// ---- GlobalAveragePool -----------------------------------------------------------------------

// y[n, c, 0, 0] = the mean of channel c of the blocked x (N, CB, H, W, B) into the planar y
// (N, C, 1, 1), (CB - 1) * B < C <= CB * B: the sum over the positions in ascending order, one
// accumulator per lane (blocked_driver.inc's mean_planes: the order is fixed by H * W alone),
// times 1 / (H * W) rounded once to float (the same float as 1.0f / (H * W) for every H * W
// below 2^24; GlobalAvgPoolCall's scale).
class BlockedMeanCall {
public:
    BlockedMeanCall(InArray x, OutArray y, const std::string& isa, int threads)
        : x_(x), y_(y), kern_(&blocked_kernels_of(kernels_for(isa))) {
        check_blocked(x, "x", *kern_);
        check_planar(y, "y");
        const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
        if (ys[0] != xs[0] || ys[2] != 1 || ys[3] != 1)
            throw nb::value_error(("y must be (N, C, 1, 1) with x's N = " + std::to_string(xs[0]) +
                                   ", got " + dims(ys)).c_str());
        check_channels(ys[1], xs[1], kern_->block, "y");
        check_no_overlap(y, x, "x");
        hw_ = mul(xs[2], xs[3], "the positions");
        if (hw_ < 1) throw nb::value_error("x has no spatial position to pool");
        cblocks_ = xs[1];
        channels_ = ys[1];
        planes_ = mul(xs[0], xs[1], "the planes");
        scale_ = static_cast<float>(1.0 / static_cast<double>(hw_));
        const int64_t floats = static_cast<int64_t>(x.size());
        threads_ = floats >= BLOCKED_PARALLEL ? clamp_threads(threads) : 1;
        small_ = threads_ == 1 && floats <= BLOCKED_KEEP_GIL;
    }

    void operator()() const {
        const float* px = static_cast<const float*>(x_.data());
        float* py = static_cast<float*>(y_.data());
        run_call(small_, planes_, threads_, 0, [&](int64_t lo, int64_t hi, float*) {
            kern_->mean(px, py, hw_, cblocks_, channels_, lo, hi, scale_);
        });
    }

private:
    InArray x_;
    OutArray y_;
    const BlockedKernels* kern_;
    int64_t hw_ = 1, cblocks_ = 0, channels_ = 0, planes_ = 0;
    float scale_ = 1.0f;
    int threads_ = 1;
    bool small_ = false;
};

// ---- layout copies ---------------------------------------------------------------------------

// The exact copy between a blocked (N, CB, H, W, B) and a planar (N, C, H, W) image, (CB - 1) * B
// < C <= CB * B, both C-contiguous and apart: TO_BLOCKED false reads the blocked x (its padding
// lanes dropped), true reads the planar x (the padding lanes written +0).
template <bool TO_BLOCKED>
class BlockedCopyCall {
public:
    BlockedCopyCall(InArray x, OutArray y, const std::string& isa, int threads)
        : x_(x), y_(y), kern_(&blocked_kernels_of(kernels_for(isa))) {
        if (TO_BLOCKED) {
            check_planar(x, "x");
            check_blocked(y, "y", *kern_);
        } else {
            check_blocked(x, "x", *kern_);
            check_planar(y, "y");
        }
        const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
        const std::vector<int64_t>& blocked = TO_BLOCKED ? ys : xs;
        const std::vector<int64_t>& planar = TO_BLOCKED ? xs : ys;
        if (blocked[0] != planar[0] || blocked[2] != planar[2] || blocked[3] != planar[3])
            throw nb::value_error(("y " + dims(ys) + " must have the images and positions of x " +
                                   dims(xs)).c_str());
        check_channels(planar[1], blocked[1], kern_->block, TO_BLOCKED ? "x" : "y");
        check_no_overlap(y, x, "x");
        s_.channels = planar[1];
        s_.cblocks = blocked[1];
        s_.hw = mul(planar[2], planar[3], "the positions");
        s_.chunk = COPY_CHUNK;
        s_.chunks = ceil_div(s_.hw, COPY_CHUNK);
        units_ = mul(mul(blocked[0], blocked[1], "the planes"), s_.chunks, "the units");
        const int64_t floats = static_cast<int64_t>(x.size() + y.size());
        threads_ = floats >= BLOCKED_PARALLEL ? clamp_threads(threads) : 1;
        small_ = threads_ == 1 && floats <= BLOCKED_KEEP_GIL;
    }

    void operator()() const {
        const float* px = static_cast<const float*>(x_.data());
        float* py = static_cast<float*>(y_.data());
        const auto copy = TO_BLOCKED ? kern_->to_blocked : kern_->from_blocked;
        run_call(small_, units_, threads_, 0, [&](int64_t lo, int64_t hi, float*) {
            copy(s_, px, py, lo, hi);
        });
    }

private:
    InArray x_;
    OutArray y_;
    const BlockedKernels* kern_;
    BlockedCopy s_{};
    int64_t units_ = 0;
    int threads_ = 1;
    bool small_ = false;
};

using FromBlockedCall = BlockedCopyCall<false>;
using ToBlockedCall = BlockedCopyCall<true>;

// A layout copy's class: (x, y, isa, threads), called with no arguments.
template <class Call>
void bind_copy(nb::module_& m, const char* name, const char* doc) {
    nb::class_<Call>(m, name, doc)
        .def(nb::init<InArray, OutArray, const std::string&, int>(), nb::arg("x"), nb::arg("y"),
             nb::arg("isa"), nb::arg("threads") = 1)
        .def("__call__", &Call::operator());
}

}  // namespace

void bind_blocked(nb::module_& m) {
    m.def("blocked_block", &blocked_block, nb::arg("isa"),
          "The block B (channels per position vector) of isa's blocked kernels: avx512 16, "
          "avx2 8, scalar 8.");
    nb::class_<BlockedMaxPoolCall>(
        m, "BlockedMaxPoolCall",
        "y = MaxPool(x) of float32 C-contiguous blocked images, x (N, CB, H, W, B) and y (N, "
        "CB, OH, OW, B), B = blocked_block(isa), checked once (pads: top, left; y's extents fix "
        "the windows); taps outside x skipped, -inf where a window has none, NaN propagates. "
        "Output rows spread over `threads` of the plugin's threads (the same bits for any "
        "count).")
        .def(nb::init<InArray, OutArray, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::string&, int>(),
             nb::arg("x"), nb::arg("y"), nb::arg("kernel"), nb::arg("strides"),
             nb::arg("dilations"), nb::arg("pads"), nb::arg("isa"), nb::arg("threads") = 1)
        .def("__call__", &BlockedMaxPoolCall::operator());
    nb::class_<BlockedMeanCall>(
        m, "BlockedMeanCall",
        "y[n, c, 0, 0] = the mean of channel c of the blocked x (N, CB, H, W, B) into the "
        "planar y (N, C, 1, 1), (CB - 1) * B < C <= CB * B, checked once: each channel's sum "
        "over the positions in ascending order times 1 / (H * W) (the same bits for any "
        "thread count).")
        .def(nb::init<InArray, OutArray, const std::string&, int>(), nb::arg("x"), nb::arg("y"),
             nb::arg("isa"), nb::arg("threads") = 1)
        .def("__call__", &BlockedMeanCall::operator());
    bind_copy<FromBlockedCall>(
        m, "FromBlockedCall",
        "y = the planar (N, C, H, W) copy of the blocked x (N, CB, H, W, B), (CB - 1) * B < C "
        "<= CB * B (its padding lanes dropped), checked once.");
    bind_copy<ToBlockedCall>(
        m, "ToBlockedCall",
        "y = the blocked (N, CB, H, W, B) copy of the planar x (N, C, H, W), CB = ceil(C / B), "
        "its padding lanes +0, checked once.");
}

}  // namespace graphrt_simd
