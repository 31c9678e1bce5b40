// graphrt_ops_simd._native: argument checks, CPU dispatch and the GIL-free kernel calls.
//
// Every entry point validates its arguments completely (dtype, rank, shapes, strides, row
// range, overlap of the output with the inputs) and raises TypeError or ValueError before any
// kernel touches memory.  Kernels run with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#if defined(GRAPHRT_SIMD_X86)
#include <cpuid.h>
#endif

#include "kernels.h"
#include "pool.h"

namespace nb = nanobind;
using namespace graphrt_simd;

using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

namespace {

// ---- CPU and OS checks ------------------------------------------------------------------------

// cpuid and xgetbv are slow in a virtual machine (the hypervisor traps them), so the answers
// are computed once, on first use (thread-safe static initialisation).
#if defined(GRAPHRT_SIMD_X86)
uint64_t xcr0() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;  // OSXSAVE
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

struct CpuFeatures {
    bool avx2 = false;
    bool avx512 = false;
    CpuFeatures() {
        __builtin_cpu_init();
        const uint64_t xcr = xcr0();
        const bool ymm_state = (xcr & 0x6) == 0x6;     // SSE and AVX state saved by the OS
        const bool zmm_state = (xcr & 0xE6) == 0xE6;   // plus opmask and both ZMM halves
        avx2 = ymm_state && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        avx512 = zmm_state && avx2 && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
    }
};

const CpuFeatures& cpu() {
    static const CpuFeatures features;
    return features;
}

bool cpu_has_avx2() { return cpu().avx2; }
bool cpu_has_avx512() { return cpu().avx512; }
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
#endif

std::vector<std::string> available_isas() {
    std::vector<std::string> out{"scalar"};
    if (cpu_has_avx2()) out.push_back("avx2");
    if (cpu_has_avx512()) out.push_back("avx512");
    return out;
}

const IsaKernels& kernels_for(const std::string& isa) {
    if (isa == "scalar") return scalar_kernels;
#if defined(GRAPHRT_SIMD_X86)
    if (isa == "avx2") {
        if (!cpu_has_avx2()) throw nb::value_error("isa 'avx2' is not available on this CPU/OS");
        return avx2_kernels;
    }
    if (isa == "avx512") {
        if (!cpu_has_avx512())
            throw nb::value_error("isa 'avx512' is not available on this CPU/OS");
        return avx512_kernels;
    }
#endif
    throw nb::value_error(("unknown isa '" + isa + "'; expected scalar, avx2 or avx512").c_str());
}

// ---- argument checks ------------------------------------------------------------------------

template <class A>
void check_matrix(const A& x, const char* what, size_t ndim = 2) {
    if (x.dtype() != nb::dtype<float>())
        throw nb::type_error((std::string(what) + " must be a float32 array").c_str());
    if (x.ndim() != ndim)
        throw nb::value_error((std::string(what) + " must have " + std::to_string(ndim) +
                               " dimension(s), got " + std::to_string(x.ndim()))
                                  .c_str());
}

// Byte range [lo, hi) an array's elements occupy; empty arrays occupy nothing.
template <class A>
bool extent(const A& x, uintptr_t& lo, uintptr_t& hi) {
    int64_t first = 0, last = 0;
    for (size_t d = 0; d < x.ndim(); ++d) {
        const int64_t len = static_cast<int64_t>(x.shape(d));
        if (len == 0) return false;
        const int64_t span = x.stride(d) * (len - 1);
        if (span < 0) first += span; else last += span;
    }
    const auto base = reinterpret_cast<uintptr_t>(x.data());
    lo = base + first * static_cast<int64_t>(sizeof(float));
    hi = base + (last + 1) * static_cast<int64_t>(sizeof(float));
    return true;
}

template <class A, class B>
void check_no_overlap(const A& out, const B& in, const char* what) {
    uintptr_t a0, a1, b0, b1;
    if (extent(out, a0, a1) && extent(in, b0, b1) && a0 < b1 && b0 < a1)
        throw nb::value_error((std::string("out must not overlap ") + what).c_str());
}

void check_out(const OutArray& out, int64_t m, int64_t n) {
    check_matrix(out, "out");
    if (static_cast<int64_t>(out.shape(0)) != m || static_cast<int64_t>(out.shape(1)) != n)
        throw nb::value_error(("out must have shape (" + std::to_string(m) + ", " +
                               std::to_string(n) + "), got (" + std::to_string(out.shape(0)) +
                               ", " + std::to_string(out.shape(1)) + ")")
                                  .c_str());
    if (m > 0 && n > 0) {
        if (n > 1 && out.stride(1) != 1)
            throw nb::value_error("out must have unit column stride (C-contiguous rows)");
        if (m > 1 && out.stride(0) < n)
            throw nb::value_error("out rows must not overlap (row stride >= columns)");
    }
}

void row_range(int64_t m, int64_t& begin, int64_t& end) {
    if (end == -1) end = m;  // the default: every row
    if (begin < 0 || begin > end || end > m)
        throw nb::value_error(("row range [" + std::to_string(begin) + ", " + std::to_string(end) +
                               ") is not inside [0, " + std::to_string(m) + ")")
                                  .c_str());
}

Strided strided(const InArray& x) {
    return Strided{static_cast<const float*>(x.data()), static_cast<std::ptrdiff_t>(x.stride(0)),
                   static_cast<std::ptrdiff_t>(x.stride(1))};
}

int parse_activation(const std::string& name) {
    if (name == "none") return ACT_NONE;
    if (name == "relu") return ACT_RELU;
    if (name == "clip") return ACT_CLIP;
    if (name == "sigmoid") return ACT_SIGMOID;
    throw nb::value_error(("unknown activation '" + name + "'; expected none, relu, clip or sigmoid")
                              .c_str());
}

// ---- packed B -------------------------------------------------------------------------------

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};

// B (k x n) in the panel layout of one ISA's micro-kernel, 64-byte aligned.
class PackedB {
public:
    PackedB(const IsaKernels& isa, int64_t k, int64_t n) : isa_(&isa), k_(k), n_(n) {
        const int64_t panels = (n + isa.nr - 1) / isa.nr;
        size_ = panels * isa.nr * k;
        const size_t bytes = ((static_cast<size_t>(size_) * sizeof(float) + 63) / 64) * 64;
        data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
        if (!data_) throw std::bad_alloc();
    }

    void pack(const InArray& b) {
        check_matrix(b, "b");
        if (static_cast<int64_t>(b.shape(0)) != k_ || static_cast<int64_t>(b.shape(1)) != n_)
            throw nb::value_error(("b must have shape (" + std::to_string(k_) + ", " +
                                   std::to_string(n_) + ") to repack, got (" +
                                   std::to_string(b.shape(0)) + ", " + std::to_string(b.shape(1)) +
                                   ")")
                                      .c_str());
        const Strided sb = strided(b);
        nb::gil_scoped_release nogil;
        isa_->pack_b(k_, n_, sb, data_.get());
    }

    const IsaKernels& isa() const { return *isa_; }
    int64_t k() const { return k_; }
    int64_t n() const { return n_; }
    int64_t nbytes() const { return size_ * static_cast<int64_t>(sizeof(float)); }
    const float* data() const { return data_.get(); }

private:
    const IsaKernels* isa_;
    int64_t k_, n_, size_;
    std::unique_ptr<float, FreeDeleter> data_;
};

PackedB* pack_b(const InArray& b, const std::string& isa) {
    check_matrix(b, "b");
    auto packed = std::make_unique<PackedB>(kernels_for(isa), static_cast<int64_t>(b.shape(0)),
                                            static_cast<int64_t>(b.shape(1)));
    packed->pack(b);
    return packed.release();
}

// ---- GEMM entry points ----------------------------------------------------------------------

// Rows per block when gemm splits its rows over the plugin's threads (graphrt_ops_simd.kernels
// uses the same block size and the same multiply-add threshold to decide a split).
constexpr int64_t GEMM_ROW_BLOCK = 64;

void gemm(const InArray& a, const PackedB& b, OutArray out, std::optional<InArray> bias,
          const std::string& bias_axis, float alpha, const std::string& activation,
          float clip_min, float clip_max, int64_t row_begin, int64_t row_end, int threads) {
    check_matrix(a, "a");
    const int64_t m = static_cast<int64_t>(a.shape(0)), k = static_cast<int64_t>(a.shape(1));
    if (k != b.k())
        throw nb::value_error(("a has " + std::to_string(k) + " columns but b was packed with " +
                               std::to_string(b.k()) + " rows")
                                  .c_str());
    const int64_t n = b.n();
    check_out(out, m, n);
    check_no_overlap(out, a, "a");
    row_range(m, row_begin, row_end);
    Epilogue ep;
    ep.alpha = alpha;
    ep.act = parse_activation(activation);
    if (ep.act == ACT_CLIP && !(clip_min <= clip_max))
        throw nb::value_error("clip_min must not exceed clip_max");
    ep.lo = clip_min;
    ep.hi = clip_max;
    if (bias) {
        check_matrix(*bias, "bias", 1);
        int64_t want;
        if (bias_axis == "col") {
            ep.bias_axis = BIAS_COL;
            want = n;
        } else if (bias_axis == "row") {
            ep.bias_axis = BIAS_ROW;
            want = m;
        } else {
            throw nb::value_error("bias_axis must be 'col' or 'row'");
        }
        if (static_cast<int64_t>(bias->shape(0)) != want)
            throw nb::value_error(("bias must have " + std::to_string(want) + " elements, got " +
                                   std::to_string(bias->shape(0)))
                                      .c_str());
        if (want > 1 && bias->stride(0) != 1)
            throw nb::value_error("bias must be contiguous");
        check_no_overlap(out, *bias, "bias");
        ep.bias = static_cast<const float*>(bias->data());
    }
    const Strided sa = strided(a);
    float* c = static_cast<float*>(out.data());
    const std::ptrdiff_t ldc = static_cast<std::ptrdiff_t>(out.stride(0));
    nb::gil_scoped_release nogil;
    const IsaKernels& kern = b.isa();
    const int64_t blocks = (row_end - row_begin + GEMM_ROW_BLOCK - 1) / GEMM_ROW_BLOCK;
    // a row's arithmetic never depends on its block: any split gives the same bits
    NativePool::get().run(threads > 1 ? blocks : 1, threads, [&](int64_t i) {
        const int64_t lo = threads > 1 ? row_begin + i * GEMM_ROW_BLOCK : row_begin;
        const int64_t hi = threads > 1 ? std::min(row_end, lo + GEMM_ROW_BLOCK) : row_end;
        kern.gemm_fast(lo, hi, n, k, sa, b.data(), c, ldc, &ep);
    });
}

void gemm_exact(const InArray& a, const InArray& b, OutArray out, const std::string& isa,
                int64_t row_begin, int64_t row_end) {
    const IsaKernels& kern = kernels_for(isa);
    check_matrix(a, "a");
    check_matrix(b, "b");
    const int64_t m = static_cast<int64_t>(a.shape(0)), k = static_cast<int64_t>(a.shape(1));
    const int64_t n = static_cast<int64_t>(b.shape(1));
    if (static_cast<int64_t>(b.shape(0)) != k)
        throw nb::value_error(("inner dimensions differ: a is (" + std::to_string(m) + ", " +
                               std::to_string(k) + "), b is (" + std::to_string(b.shape(0)) +
                               ", " + std::to_string(n) + ")")
                                  .c_str());
    if (k > 0 && n > 1 && b.stride(1) != 1)
        throw nb::value_error("b must have unit column stride for the exact kernel");
    check_out(out, m, n);
    check_no_overlap(out, a, "a");
    check_no_overlap(out, b, "b");
    row_range(m, row_begin, row_end);
    const Strided sa = strided(a), sb = strided(b);
    float* c = static_cast<float*>(out.data());
    const std::ptrdiff_t ldc = static_cast<std::ptrdiff_t>(out.stride(0));
    nb::gil_scoped_release nogil;
    kern.gemm_exact(row_begin, row_end, n, k, sa, sb, c, ldc);
}

// Every NaN of a C-contiguous float32 array becomes 0x7FC00000 (exact mode's bit rule).
void canonicalize_nan(OutArray x) {
    if (x.dtype() != nb::dtype<float>()) throw nb::type_error("x must be a float32 array");
    int64_t expect = 1;
    for (size_t d = x.ndim(); d-- > 0;) {
        if (x.shape(d) > 1 && x.stride(d) != expect)
            throw nb::value_error("x must be C-contiguous");
        expect *= static_cast<int64_t>(x.shape(d));
    }
    float* p = static_cast<float*>(x.data());
    const size_t size = x.size();
    nb::gil_scoped_release nogil;
    const float canonical = __builtin_nanf("");
    for (size_t i = 0; i < size; ++i) {
        if (p[i] != p[i]) p[i] = canonical;
    }
}

template <class A>
void check_flat(const A& x, const char* what) {
    if (x.dtype() != nb::dtype<float>())
        throw nb::type_error((std::string(what) + " must be a float32 array").c_str());
    int64_t expect = 1;
    for (size_t d = x.ndim(); d-- > 0;) {
        if (x.shape(d) > 1 && x.stride(d) != expect)
            throw nb::value_error((std::string(what) + " must be C-contiguous").c_str());
        expect *= static_cast<int64_t>(x.shape(d));
    }
}

// Where "auto" takes the channels-in-lanes kernel (bench/conv_micro.py --kernels): output
// positions up to which it beat the direct kernel (unit strides) and the packed one (1x1), the
// window depth from which it beat the direct kernel on larger maps too (light_inception_v1's
// 3x3 64->192 on 55 x 55: lanes 6.13, direct 6.35 ms; light_squeezenet's 3x3 16->64 there, a
// depth of 144: a tie), and the depth from which it beat packing columns for strided ones.
constexpr int64_t LANES_MAX_POSITIONS = 1024;
constexpr int64_t LANES_MAX_POSITIONS_1X1 = 64;
constexpr int64_t LANES_MIN_DEPTH_UNIT = 256;
constexpr int64_t LANES_MIN_DEPTH = 64;
// Output channels per group below which a plain 1x1 convolution reads x's planes in place (the
// stream kernel) instead of packing them: with more, the packed panel serves enough channel
// tiles to repay its copy (light_resnet50's 64->256 at 56 x 56: packed 0.99, stream 1.08 ms).
constexpr int64_t STREAM_MAX_CHANNELS = 256;

// Channels per staging block (stage() spreads them over the plugin's threads).
constexpr int64_t STAGE_CHANNELS = 16;

// ---- fast 2-D convolution -------------------------------------------------------------------

std::string dims(const std::vector<int64_t>& v) {
    std::string out = "(";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + (v.size() == 1 ? ",)" : ")");
}

template <class A>
std::vector<int64_t> shape_of(const A& x) {
    std::vector<int64_t> out;
    for (size_t d = 0; d < x.ndim(); ++d) out.push_back(static_cast<int64_t>(x.shape(d)));
    return out;
}

// One thread's block of columns (CONV_KC x CONV_NCB floats), allocated on first use and kept:
// a fresh 256 KiB allocation per call would be an mmap and page faults every time.
float* conv_block() {
    thread_local std::unique_ptr<float, FreeDeleter> block(
        static_cast<float*>(std::aligned_alloc(64, CONV_KC * CONV_NCB * sizeof(float))));
    if (!block) throw std::bad_alloc();
    return block.get();
}

// A convolution planned once: geometry checked, the weight packed per group, and the work cut
// into units (image, group, chunk of output channels, block of positions) by shapes alone.
// Unit strides take the direct kernel (columns read from a padded copy of the image, staged
// once per run by stage()); other strides pack blocks of columns per unit.
class ConvPlan {
public:
    ConvPlan(const InArray& w, int64_t group, const std::vector<int64_t>& x_shape,
             const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
             const std::vector<int64_t>& pads, const std::vector<int64_t>& out,
             const std::string& isa, const std::string& kernel)
        : isa_(&kernels_for(isa)), group_(group) {
        check_matrix(w, "w", 4);
        auto check = [](const std::vector<int64_t>& v, size_t size, const char* what,
                        int64_t least) {
            bool ok = v.size() == size;
            for (int64_t d : v) ok = ok && d >= least;
            if (!ok)
                throw nb::value_error((std::string(what) + " must be " + std::to_string(size) +
                                       " integers >= " + std::to_string(least) + ", got " +
                                       dims(v))
                                          .c_str());
        };
        check(x_shape, 4, "x_shape", 1);
        check(strides, 2, "strides", 1);
        check(dilations, 2, "dilations", 1);
        check(pads, 2, "pads", 0);
        check(out, 2, "out", 1);
        const std::vector<int64_t> ws = shape_of(w);
        n_ = x_shape[0];
        m_ = ws[0];
        if (group < 1 || x_shape[1] % group || m_ % group || ws[1] * group != x_shape[1] ||
            ws[2] < 1 || ws[3] < 1)
            throw nb::value_error(("w " + dims(ws) + " does not fit x " + dims(x_shape) + " in " +
                                   std::to_string(group) + " group(s)")
                                      .c_str());
        ConvShape& s = shape_;
        s = ConvShape{ws[1], x_shape[2], x_shape[3], ws[2], ws[3], strides[0], strides[1],
                      dilations[0], dilations[1], pads[0], pads[1], out[0], out[1]};
        mg_ = m_ / group;
        k_ = s.c * s.kh * s.kw;
        const int64_t cmr = isa_->cmr, cnr = isa_->cnr;
        tiles_ = (mg_ + cmr - 1) / cmr;
        per_group_ = tiles_ * cmr * k_;
        pack_weight(w);
        mode_ = choose_mode(kernel);
        // The direct and lanes kernels run the whole depth per tile: the output channels of a
        // unit are a chunk of the packed weight that stays in L2 (384 KiB).  The packed path
        // blocks the depth itself, and a second chunk would pack the same columns again.
        const int64_t fit = (384 * 1024 / 4) / (k_ * cmr);
        const int64_t per_chunk =
            mode_ == PACKED ? tiles_ : fit < 1 ? 1 : std::min(fit, tiles_);
        if (mode_ == STREAM) {  // one row of h * w positions; tap row ch is x's plane ch
            DirectShape& d = direct_shape_;
            d = DirectShape{s.c, 1, s.h * s.w, 1, 1, 0, 0, 1, s.h * s.w, 1, s.h * s.w, 0};
            for (int64_t ch = 0; ch < s.c; ++ch) offs_.push_back(ch * s.h * s.w);
        }
        mchunks_ = (tiles_ + per_chunk - 1) / per_chunk;
        int64_t ptiles, tile = cnr;  // position tiles of one image and group, their size
        if (staged()) {
            // the staged planes: every read of an output's window lies inside them
            DirectShape& d = direct_shape_;
            d.c = s.c, d.h = s.h, d.w = s.w, d.kh = s.kh, d.kw = s.kw, d.ph = s.ph, d.pw = s.pw;
            d.oh = s.oh, d.ow = s.ow;
            d.hp = std::max(s.ph + s.h, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1);
            d.wp = std::max(s.pw + s.w, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1);
            const int64_t plane = d.hp * d.wp;
            if (mode_ == DIRECT) {  // wide positions, and the tail their last tile reads
                ptiles = (s.oh * d.wp + cnr - 1) / cnr;
                d.staged = std::max(s.c * plane, (s.c - 1) * plane +
                                                     (s.kh - 1) * s.dh * d.wp +
                                                     (s.kw - 1) * s.dw + ptiles * cnr);
            } else {
                const LanesTiling tiling(s.oh, s.ow, isa_->crt);
                tile = tiling.width;  // the positions of a whole tile
                ptiles = tiling.tiles;
                d.staged = s.c * plane;
            }
            for (int64_t ch = 0; ch < s.c; ++ch)
                for (int64_t y = 0; y < s.kh; ++y)
                    for (int64_t x = 0; x < s.kw; ++x)
                        offs_.push_back(ch * plane + y * s.dh * d.wp + x * s.dw);
        } else {
            ptiles = (s.oh * s.ow + cnr - 1) / cnr;
        }
        // blocks of positions: at most CONV_NCB each (the packed path's block), and at least
        // four units in all where the positions allow, for the intra-op threads
        const int64_t most = std::max<int64_t>(1, CONV_NCB / tile);
        const int64_t others = n_ * group_ * mchunks_;
        int64_t blocks = (ptiles + most - 1) / most;
        const int64_t want = (4 + others - 1) / others;
        if (blocks < want) blocks = want < ptiles ? want : ptiles;
        ptile_step_ = (ptiles + blocks - 1) / blocks;
        pblocks_ = (ptiles + ptile_step_ - 1) / ptile_step_;
        ptiles_ = ptiles;
    }

    int64_t units() const { return n_ * group_ * mchunks_ * pblocks_; }
    int64_t nbytes() const { return per_group_ * group_ * static_cast<int64_t>(sizeof(float)); }
    // floats of the staging buffer stage() and run() take (0: the packed path needs none)
    int64_t work_floats() const {
        return staged() ? n_ * group_ * direct_shape_.staged : 0;
    }
    bool staged() const { return mode_ == DIRECT || mode_ == LANES; }
    std::string kernel() const {
        return mode_ == DIRECT   ? "direct"
               : mode_ == LANES  ? "lanes"
               : mode_ == STREAM ? "stream"
                                 : "packed";
    }

    void stage(const InArray& x, OutArray work, int threads) {
        check_x(x);
        check_work(work);
        check_no_overlap(work, x, "x");
        if (!staged()) return;
        const float* px = static_cast<const float*>(x.data());
        float* pw = static_cast<float*>(work.data());
        const std::ptrdiff_t xs0 = x.stride(0), xs1 = x.stride(1), xs2 = x.stride(2);
        nb::gil_scoped_release nogil;
        // blocks of STAGE_CHANNELS channels of one image and group, the last one with the
        // zero tail; copies, so any split over threads gives the same staged planes
        const DirectShape& d = direct_shape_;
        const int64_t plane = d.hp * d.wp;
        const int64_t per = (d.c + STAGE_CHANNELS - 1) / STAGE_CHANNELS;
        NativePool::get().run(n_ * group_ * per, threads, [&](int64_t i) {
            const int64_t block = i % per, ig = i / per;
            const int64_t img = ig / group_, g = ig % group_;
            const int64_t c0 = block * STAGE_CHANNELS;
            DirectShape part = d;
            part.c = std::min(STAGE_CHANNELS, d.c - c0);
            part.staged = block + 1 == per ? d.staged - c0 * plane : part.c * plane;
            isa_->conv_stage(part, px + img * xs0 + (g * shape_.c + c0) * xs1, xs1, xs2,
                             pw + ig * d.staged + c0 * plane);
        });
    }

    void run(const InArray& x, const InArray& work, OutArray y, std::optional<InArray> bias,
             const std::string& activation, int64_t u0, int64_t u1, int threads,
             std::optional<InArray> z) {
        const ConvShape& s = shape_;
        check_x(x);
        check_work(work);
        check_matrix(y, "y", 4);
        const std::vector<int64_t> want_y{n_, m_, s.oh, s.ow};
        if (shape_of(y) != want_y)
            throw nb::value_error(("y must have shape " + dims(want_y) + ", got " +
                                   dims(shape_of(y)))
                                      .c_str());
        if ((s.ow > 1 && y.stride(3) != 1) || (s.oh > 1 && y.stride(2) != s.ow))
            throw nb::value_error("y must hold each channel's positions contiguously");
        check_no_overlap(y, x, "x");
        check_no_overlap(y, work, "work");
        const int act = parse_activation(activation);
        if (act != ACT_NONE && act != ACT_RELU)
            throw nb::value_error("the conv activation must be 'none' or 'relu'");
        const float* pb = nullptr;
        if (bias) {
            check_matrix(*bias, "bias", 1);
            if (static_cast<int64_t>(bias->shape(0)) != m_)
                throw nb::value_error(("bias must have " + std::to_string(m_) +
                                       " elements, got " + std::to_string(bias->shape(0)))
                                          .c_str());
            if (m_ > 1 && bias->stride(0) != 1) throw nb::value_error("bias must be contiguous");
            check_no_overlap(y, *bias, "bias");
            pb = static_cast<const float*>(bias->data());
        }
        const float* pz = nullptr;
        if (z) {  // the residual: laid out exactly as y
            check_matrix(*z, "z", 4);
            if (shape_of(*z) != want_y)
                throw nb::value_error(("z must have shape " + dims(want_y) + ", got " +
                                       dims(shape_of(*z)))
                                          .c_str());
            for (size_t d = 0; d < 4; ++d)
                if (want_y[d] > 1 && z->stride(d) != y.stride(d))
                    throw nb::value_error("z must have y's strides");
            check_no_overlap(y, *z, "z");
            pz = static_cast<const float*>(z->data());
        }
        if (u1 == -1) u1 = units();
        if (u0 < 0 || u0 > u1 || u1 > units())
            throw nb::value_error(("unit range [" + std::to_string(u0) + ", " +
                                   std::to_string(u1) + ") is not inside [0, " +
                                   std::to_string(units()) + ")")
                                      .c_str());
        // the packed path reads a 1x1 kernel with unit strides and no padding as one long row
        ConvShape run_shape = s;
        std::ptrdiff_t x_rs = static_cast<std::ptrdiff_t>(x.stride(2));
        const bool flat = s.kh == 1 && s.kw == 1 && s.ph == 0 && s.pw == 0 && s.sh == 1 &&
                          s.sw == 1 && s.oh == s.h && s.ow == s.w && (s.h == 1 || x_rs == s.w);
        if (flat) {
            run_shape.w = run_shape.ow = s.h * s.w;
            run_shape.h = run_shape.oh = 1;
            x_rs = run_shape.w;
        }
        // the stream kernel reads x's planes in place: they must lie h * w floats apart
        const bool stream = mode_ == STREAM && flat &&
                            (s.c * group_ == 1 || x.stride(1) == s.h * s.w);
        const float* px = static_cast<const float*>(x.data());
        const float* pw = static_cast<const float*>(work.data());
        float* py = static_cast<float*>(y.data());
        const std::ptrdiff_t xs0 = x.stride(0), xs1 = x.stride(1), ys0 = y.stride(0),
                             ys1 = y.stride(1);
        const int64_t cmr = isa_->cmr, cnr = isa_->cnr;
        nb::gil_scoped_release nogil;
        NativePool::get().run(u1 - u0, threads, [&](int64_t i) {
            float* block = mode_ == PACKED || (mode_ == STREAM && !stream) ? conv_block() : nullptr;
            int64_t rest = u0 + i;
            const int64_t pb_i = rest % pblocks_;
            rest /= pblocks_;
            const int64_t mc = rest % mchunks_;
            rest /= mchunks_;
            const int64_t g = rest % group_, img = rest / group_;
            const int64_t t0 = mc * tiles_ / mchunks_, t1 = (mc + 1) * tiles_ / mchunks_;
            const int64_t m0 = t0 * cmr, m1 = std::min(t1 * cmr, mg_);
            const int64_t p0 = pb_i * ptile_step_, p1 = std::min(p0 + ptile_step_, ptiles_);
            const float* wg = packed_.get() + g * per_group_;
            float* yg = py + img * ys0 + g * mg_ * ys1;
            const float* bg = pb ? pb + g * mg_ : nullptr;
            const float* zg = pz ? pz + img * ys0 + g * mg_ * ys1 : nullptr;
            if (mode_ == DIRECT) {
                const DirectShape& d = direct_shape_;
                isa_->conv_direct(d, pw + (img * group_ + g) * d.staged, offs_.data(), wg, m0,
                                  m1, p0 * cnr, std::min(p1 * cnr, s.oh * d.wp), yg, zg, ys1,
                                  bg, act);
                return;
            }
            if (mode_ == LANES) {
                const DirectShape& d = direct_shape_;
                isa_->conv_lanes(s, d, pw + (img * group_ + g) * d.staged, offs_.data(), wg, m0,
                                 m1, p0, p1, yg, zg, ys1, bg,
                                 act);
                return;
            }
            const float* xg = px + img * xs0 + g * s.c * xs1;
            const int64_t positions = s.oh * s.ow;
            int64_t j_from = p0 * cnr;
            if (stream) {  // whole tiles straight from x, the last partial one packed
                const int64_t whole = std::min(p1 * cnr, positions / cnr * cnr);
                if (j_from < whole)
                    isa_->conv_direct(direct_shape_, xg, offs_.data(), wg, m0, m1, j_from,
                                      whole, yg, zg, ys1, bg, act);
                j_from = std::max(j_from, whole);
                if (j_from < std::min(p1 * cnr, positions)) block = conv_block();
            }
            for (int64_t j0 = j_from; j0 < std::min(p1 * cnr, positions); j0 += CONV_NCB) {
                const int64_t j1 = std::min({j0 + CONV_NCB, p1 * cnr, positions});
                isa_->conv_fast(run_shape, xg, xs1, x_rs, wg, m0, m1, j0, j1, yg, zg, ys1, bg,
                                act,
                                block);
            }
        });
    }

private:
    void pack_weight(const InArray& w) {
        const size_t bytes =
            ((static_cast<size_t>(per_group_ * group_) * sizeof(float) + 63) / 64) * 64;
        packed_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
        if (!packed_) throw std::bad_alloc();
        const ConvShape& s = shape_;
        std::vector<float> dense(static_cast<size_t>(m_ * k_));
        const float* pw = static_cast<const float*>(w.data());
        for (int64_t o = 0; o < m_; ++o)  // w in any strides -> dense (m, k) rows
            for (int64_t ci = 0; ci < s.c; ++ci)
                for (int64_t y = 0; y < s.kh; ++y)
                    for (int64_t x = 0; x < s.kw; ++x)
                        dense[o * k_ + (ci * s.kh + y) * s.kw + x] =
                            pw[o * w.stride(0) + ci * w.stride(1) + y * w.stride(2) +
                               x * w.stride(3)];
        for (int64_t g = 0; g < group_; ++g)
            isa_->conv_pack_w(mg_, k_, dense.data() + g * mg_ * k_,
                              packed_.get() + g * per_group_);
    }

    void check_x(const InArray& x) const {
        check_matrix(x, "x", 4);
        const std::vector<int64_t> want{n_, shape_.c * group_, shape_.h, shape_.w};
        if (shape_of(x) != want)
            throw nb::value_error(
                ("x must have shape " + dims(want) + ", got " + dims(shape_of(x))).c_str());
        if (shape_.w > 1 && x.stride(3) != 1)
            throw nb::value_error("x must have unit column stride");
    }

    template <class A>
    void check_work(const A& work) const {
        check_flat(work, "work");
        if (static_cast<int64_t>(work.size()) < work_floats())
            throw nb::value_error(("work must hold " + std::to_string(work_floats()) +
                                   " floats, got " + std::to_string(work.size()))
                                      .c_str());
    }

    const IsaKernels* isa_;
    ConvShape shape_{};
    DirectShape direct_shape_{};
    std::vector<int64_t> offs_;
    int64_t group_, n_ = 0, m_ = 0, mg_ = 0, k_ = 0, tiles_ = 0, per_group_ = 0;
    int64_t mchunks_ = 1, pblocks_ = 1, ptile_step_ = 1, ptiles_ = 1;
    enum Mode { PACKED, DIRECT, LANES, STREAM } mode_ = PACKED;

    // "auto" picks by the measured rules below; a forced kernel the geometry or ISA cannot
    // run is a ValueError.
    Mode choose_mode(const std::string& kernel) const {
        const ConvShape& s = shape_;
        const bool unit = s.sh == 1 && s.sw == 1;
        const bool lanes_ok = isa_->conv_lanes_ok;
        const bool one = s.kh * s.kw == 1;
        if (kernel == "packed") return PACKED;
        if (kernel == "direct") {
            if (!unit) throw nb::value_error("the direct kernel needs unit strides");
            return DIRECT;
        }
        if (kernel == "stream") {
            if (!one || !unit || s.ph || s.pw || s.oh != s.h || s.ow != s.w)
                throw nb::value_error(
                    "the stream kernel needs a 1x1 kernel, unit strides and no padding");
            return STREAM;
        }
        if (kernel == "lanes") {
            if (!lanes_ok)
                throw nb::value_error(("isa '" + std::string(isa_->name) +
                                       "' has no channels-in-lanes conv kernel")
                                          .c_str());
            return LANES;
        }
        if (kernel != "auto")
            throw nb::value_error(("unknown conv kernel '" + kernel +
                                   "'; expected auto, direct, lanes, packed or stream")
                                      .c_str());
        // From every layer of light_resnet50 and light_squeezenet (bench/conv_micro.py
        // --kernels): channels in lanes where the maps are small or the windows deep, the
        // direct kernel for shallow windows on large maps with unit strides, x's own
        // planes for plain 1x1 kernels on large maps with few output channels (stream), and
        // packed columns for the other 1x1 kernels and for very shallow strided windows.
        const int64_t positions = s.oh * s.ow, depth = s.c * s.kh * s.kw;
        if (lanes_ok) {
            if (one ? positions <= LANES_MAX_POSITIONS_1X1
                    : unit ? positions <= LANES_MAX_POSITIONS || depth >= LANES_MIN_DEPTH_UNIT
                           : depth >= LANES_MIN_DEPTH)
                return LANES;
        }
        if (unit && !one) return DIRECT;
        if (one && unit && !s.ph && !s.pw && s.oh == s.h && s.ow == s.w &&
            mg_ < STREAM_MAX_CHANNELS)
            return STREAM;
        return PACKED;
    }
    std::unique_ptr<float, FreeDeleter> packed_;
};

ConvPlan* conv_plan(const InArray& w, int64_t group, const std::vector<int64_t>& x_shape,
                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                    const std::vector<int64_t>& pads, const std::vector<int64_t>& out,
                    const std::string& isa, const std::string& kernel) {
    return new ConvPlan(w, group, x_shape, strides, dilations, pads, out, isa, kernel);
}

// ---- MaxPool ---------------------------------------------------------------------------------

// y = MaxPool(x) for planes [plane_begin, plane_end) of the N*C planes; pads = the pads before
// each axis, y's extents fix the windows.
void maxpool2d(const InArray& x, OutArray y, const std::vector<int64_t>& kernel,
               const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
               const std::vector<int64_t>& pads, const std::string& isa, int64_t plane_begin,
               int64_t plane_end, int threads) {
    const IsaKernels& kern = kernels_for(isa);
    check_matrix(x, "x", 4);
    check_matrix(y, "y", 4);
    const std::pair<const std::vector<int64_t>*, const char*> checks[] = {
        {&kernel, "kernel"}, {&strides, "strides"}, {&dilations, "dilations"}, {&pads, "pads"}};
    for (const auto& [v, what] : checks) {
        const int64_t least = v == &pads ? 0 : 1;
        if (v->size() != 2 || (*v)[0] < least || (*v)[1] < least)
            throw nb::value_error((std::string(what) + " must be two integers >= " +
                                   std::to_string(least) + ", got " + dims(*v))
                                      .c_str());
    }
    const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
    if (ys[0] != xs[0] || ys[1] != xs[1])
        throw nb::value_error(
            ("y " + dims(ys) + " must have the images and channels of x " + dims(xs)).c_str());
    const int64_t planes = xs[0] * xs[1];
    if (plane_end == -1) plane_end = planes;
    if (plane_begin < 0 || plane_begin > plane_end || plane_end > planes)
        throw nb::value_error(("plane range [" + std::to_string(plane_begin) + ", " +
                               std::to_string(plane_end) + ") is not inside [0, " +
                               std::to_string(planes) + ")")
                                  .c_str());
    check_flat(y, "y");
    if (xs[3] > 1 && x.stride(3) != 1) throw nb::value_error("x must have unit column stride");
    if (xs[0] > 1 && xs[1] > 1 && x.stride(0) != xs[1] * x.stride(1))
        throw nb::value_error("x's images must be evenly spaced (stride(0) == C * stride(1))");
    check_no_overlap(y, x, "x");
    const ConvShape s{0, xs[2], xs[3], kernel[0], kernel[1], strides[0], strides[1],
                      dilations[0], dilations[1], pads[0], pads[1], ys[2], ys[3]};
    const float* px = static_cast<const float*>(x.data());
    float* py = static_cast<float*>(y.data());
    const std::ptrdiff_t x_cs = xs[1] > 1 ? x.stride(1) : x.stride(0), x_rs = x.stride(2);
    nb::gil_scoped_release nogil;
    const int64_t wide = std::max((s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1, s.pw + s.w);
    const int64_t count = plane_end - plane_begin;
    const int64_t blocks = threads > 1 ? std::min<int64_t>(count, 8 * threads) : 1;
    // planes are independent and a maximum is exact: any split gives the same values
    NativePool::get().run(blocks, threads, [&](int64_t i) {
        thread_local std::vector<float> work;
        work.resize(static_cast<size_t>((s.oh + 1) * wide));
        const int64_t lo = plane_begin + count * i / blocks;
        const int64_t hi = plane_begin + count * (i + 1) / blocks;
        kern.maxpool2d(s, px, x_cs, x_rs, lo, hi, py, ys[2] * ys[3], work.data());
    });
}

// ---- Concat ----------------------------------------------------------------------------------

// out = concatenate(xs, axis), float32, every array C-contiguous: for each index before the
// axis, each input's contiguous chunk is one copy; the copies run on the plugin's threads.
void concat(const std::vector<InArray>& xs, OutArray out, int64_t axis, int threads) {
    check_flat(out, "out");
    const std::vector<int64_t> os = shape_of(out);
    const int64_t rank = static_cast<int64_t>(os.size());
    if (axis < 0 || axis >= rank)
        throw nb::value_error(("axis " + std::to_string(axis) + " is not inside out's " +
                               std::to_string(rank) + " dimension(s)")
                                  .c_str());
    int64_t outer = 1, inner = 1, along = 0;
    for (int64_t d = 0; d < axis; ++d) outer *= os[d];
    for (int64_t d = axis; d < rank; ++d) inner *= os[d];
    std::vector<const float*> src;
    std::vector<int64_t> chunk, offset;
    for (const InArray& x : xs) {
        check_flat(x, "every input");
        std::vector<int64_t> s = shape_of(x);
        if (static_cast<int64_t>(s.size()) != rank)
            throw nb::value_error(("input " + dims(s) + " does not fit out " + dims(os)).c_str());
        int64_t size = 1;
        for (int64_t d = 0; d < rank; ++d) {
            if (d != axis && s[d] != os[d])
                throw nb::value_error(("input " + dims(s) + " does not fit out " + dims(os))
                                          .c_str());
            if (d >= axis) size *= s[d];
        }
        check_no_overlap(out, x, "an input");
        src.push_back(static_cast<const float*>(x.data()));
        chunk.push_back(size);
        offset.push_back(along * (axis + 1 < rank ? inner / os[axis] : 1));
        along += s[axis];
    }
    if (along != os[axis])
        throw nb::value_error(("the inputs add up to " + std::to_string(along) +
                               " along the axis, out has " + std::to_string(os[axis]))
                                  .c_str());
    float* dst = static_cast<float*>(out.data());
    const int64_t count = static_cast<int64_t>(xs.size());
    nb::gil_scoped_release nogil;
    NativePool::get().run(outer * count, threads, [&](int64_t j) {
        const int64_t o = j / count, i = j % count;
        if (chunk[i] > 0)
            std::memcpy(dst + o * inner + offset[i], src[i] + o * chunk[i],
                        static_cast<size_t>(chunk[i]) * sizeof(float));
    });
}

// ---- element-wise functions ------------------------------------------------------------------

int parse_unary(const std::string& name) {
    if (name == "exp") return OP_EXP;
    if (name == "tanh") return OP_TANH;
    if (name == "sigmoid") return OP_SIGMOID;
    if (name == "erf") return OP_ERF;
    if (name == "gelu") return OP_GELU;
    throw nb::value_error(
        ("unknown function '" + name + "'; expected exp, tanh, sigmoid, erf or gelu").c_str());
}

// Elements per block when unary splits its range over the plugin's threads (the same as
// graphrt_ops_simd.elementwise.BLOCK).
constexpr int64_t UNARY_BLOCK = 1 << 16;

// out.flat[begin:end] = fn(x.flat[begin:end]); out is x itself (in place) or apart from it.
void unary(const std::string& fn, const InArray& x, OutArray out, const std::string& isa,
           int64_t begin, int64_t end, int threads) {
    const int op = parse_unary(fn);
    const IsaKernels& kern = kernels_for(isa);
    check_flat(x, "x");
    check_flat(out, "out");
    const int64_t n = static_cast<int64_t>(x.size());
    if (static_cast<int64_t>(out.size()) != n)
        throw nb::value_error(("out has " + std::to_string(out.size()) + " elements, x has " +
                               std::to_string(n))
                                  .c_str());
    if (out.data() != x.data()) check_no_overlap(out, x, "x unless it is x itself");
    if (end == -1) end = n;
    if (begin < 0 || begin > end || end > n)
        throw nb::value_error(("element range [" + std::to_string(begin) + ", " +
                               std::to_string(end) + ") is not inside [0, " + std::to_string(n) +
                               ")")
                                  .c_str());
    const float* px = static_cast<const float*>(x.data()) + begin;
    float* py = static_cast<float*>(out.data()) + begin;
    nb::gil_scoped_release nogil;
    const int64_t count = end - begin, blocks = (count + UNARY_BLOCK - 1) / UNARY_BLOCK;
    // every element's operations are its own: any split gives the same bits
    NativePool::get().run(threads > 1 ? blocks : 1, threads, [&](int64_t i) {
        const int64_t lo = threads > 1 ? i * UNARY_BLOCK : 0;
        const int64_t hi = threads > 1 ? std::min(count, lo + UNARY_BLOCK) : count;
        kern.unary(op, px + lo, py + lo, hi - lo);
    });
}

}  // namespace

NB_MODULE(_native, m) {
    // Plans, packed weights and conv plans held by Python globals are still alive when the
    // interpreter tears this module down at exit; that is not a leak worth a warning.
    nb::set_leak_warnings(false);
    m.doc() = "graphrt-ops-simd native kernels: float32 GEMM (packed fast, canonical exact), "
              "convolution, MaxPool and element-wise functions";

    nb::class_<PackedB>(m, "PackedB", "B packed into one ISA's panel layout (opaque).")
        .def_prop_ro("k", &PackedB::k)
        .def_prop_ro("n", &PackedB::n)
        .def_prop_ro("isa", [](const PackedB& p) { return std::string(p.isa().name); })
        .def_prop_ro("nbytes", &PackedB::nbytes)
        .def("repack", &PackedB::pack, nb::arg("b"),
             "Pack a new B of the same shape into this buffer (not while a gemm reads it).");

    m.def("available_isas", &available_isas, "ISAs this CPU and OS can run, scalar first.");
    m.def("pack_b", &pack_b, nb::arg("b"), nb::arg("isa"), nb::rv_policy::take_ownership,
          "Pack B (k x n, any strides) for the fast GEMM of one ISA.");
    m.def("gemm", &gemm, nb::arg("a"), nb::arg("b"), nb::arg("out"),
          nb::arg("bias").none() = nb::none(), nb::arg("bias_axis") = "col",
          nb::arg("alpha") = 1.0f, nb::arg("activation") = "none", nb::arg("clip_min") = 0.0f,
          nb::arg("clip_max") = 0.0f, nb::arg("row_begin") = 0, nb::arg("row_end") = -1,
          nb::arg("threads") = 1,
          "out[rows] = act(alpha * a[rows] @ B + bias) with B packed by pack_b; with threads > "
          "1 the rows run in blocks of 64 on the plugin's threads (the same bits).");
    m.def("gemm_exact", &gemm_exact, nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("isa"),
          nb::arg("row_begin") = 0, nb::arg("row_end") = -1,
          "out[rows] = a[rows] @ b in the canonical exact order; NaN -> 0x7FC00000.");
    m.def("unary", &unary, nb::arg("fn"), nb::arg("x"), nb::arg("out"), nb::arg("isa"),
          nb::arg("begin") = 0, nb::arg("end") = -1, nb::arg("threads") = 1,
          "out.flat[begin:end] = fn(x.flat[begin:end]) for fn in exp, tanh, sigmoid, erf, gelu "
          "(float32, C-contiguous, out is x or apart from it) in exact mode's operation order; "
          "NaN -> 0x7FC00000.");
    nb::class_<ConvPlan>(m, "ConvPlan", "A planned 2-D convolution: packed weight, work units.")
        .def_prop_ro("units", &ConvPlan::units)
        .def_prop_ro("nbytes", &ConvPlan::nbytes)
        .def_prop_ro("work_floats", &ConvPlan::work_floats)
        .def_prop_ro("staged", &ConvPlan::staged)
        .def_prop_ro("kernel", &ConvPlan::kernel)
        .def("stage", &ConvPlan::stage, nb::arg("x"), nb::arg("work"), nb::arg("threads") = 1,
             "Copy x into work, padded, for the unit-stride kernel (nothing for other strides).")
        .def("run", &ConvPlan::run, nb::arg("x"), nb::arg("work"), nb::arg("y"),
             nb::arg("bias").none(), nb::arg("activation"), nb::arg("unit_begin") = 0,
             nb::arg("unit_end") = -1, nb::arg("threads") = 1, nb::arg("z").none() = nb::none(),
             "y = act((conv(x) + bias) + z) for units [unit_begin, unit_end) (activation none "
             "or relu; z, a residual laid out as y, optional), over `threads` threads of the "
             "plugin's pool; units are independent outputs, so any split and thread count give "
             "the same bits.");
    m.def("conv_plan", &conv_plan, nb::arg("w"), nb::arg("group"), nb::arg("x_shape"),
          nb::arg("strides"), nb::arg("dilations"), nb::arg("pads"), nb::arg("out"),
          nb::arg("isa"), nb::arg("kernel") = "auto", nb::rv_policy::take_ownership,
          "Plan a float32 2-D convolution (pads = the pads before each spatial axis; out = the "
          "output extents, which fix the pads after; kernel: auto, direct, lanes, packed or stream).");
    m.def("maxpool2d", &maxpool2d, nb::arg("x"), nb::arg("y"), nb::arg("kernel"),
          nb::arg("strides"), nb::arg("dilations"), nb::arg("pads"), nb::arg("isa"),
          nb::arg("plane_begin") = 0, nb::arg("plane_end") = -1, nb::arg("threads") = 1,
          "y = MaxPool(x), float32 NCHW (y C-contiguous; pads = the pads before each axis, "
          "y's extents fix the windows), for planes [plane_begin, plane_end); NaN propagates.");
    m.def("concat", &concat, nb::arg("xs"), nb::arg("out"), nb::arg("axis"),
          nb::arg("threads") = 1,
          "out = concatenate(xs, axis) for float32 C-contiguous arrays, the copies spread over "
          "`threads` of the plugin's threads.");
    m.def("canonicalize_nan", &canonicalize_nan, nb::arg("x"),
          "Rewrite every NaN of x to 0x7FC00000 in place.");
}
