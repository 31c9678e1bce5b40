// graphrt_ops_simd._native: argument checks, CPU dispatch and the GIL-free kernel calls.
//
// Every entry point validates its arguments completely (dtype, rank, shapes, strides, row
// range, overlap of the output with the inputs) and raises TypeError or ValueError before any
// kernel touches memory.  Kernels run with the GIL released.  The checks are binding.h's; the
// planned convolution is conv_plan.cpp's, registered here with the rest.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#if defined(GRAPHRT_SIMD_X86)
#include <cpuid.h>
#endif

#include "binding.h"
#include "conv_choice.h"
#include "fast.h"
#include "kernels.h"
#include "pool.h"

using namespace graphrt_simd;

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

// CPUID.1:ECX bit 29, F16C (half <-> float conversions).
bool f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

// AMD's family 26 (Zen 5) and later run 512-bit operations on full-width units; Zen 4 (family
// 25) runs them as two 256-bit halves.  Every other CPU gets the rules measured on Zen 4, the
// only other one measured.
bool amd_family_26_or_later() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // AuthenticAMD
    if (!amd || !__get_cpuid(1, &a, &b, &c, &d)) return false;
    const unsigned base = (a >> 8) & 0xF, extended = (a >> 20) & 0xFF;
    return (base == 0xF ? base + extended : base) >= 0x1A;
}

struct CpuFeatures {
    bool avx2 = false;
    bool avx512 = false;
    bool full_width_512 = false;  // conv's FULL512 rules (amd_family_26_or_later)
    CpuFeatures() {
        __builtin_cpu_init();
        const uint64_t xcr = xcr0();
        const bool ymm_state = (xcr & 0x6) == 0x6;     // SSE and AVX state saved by the OS
        const bool zmm_state = (xcr & 0xE6) == 0xE6;   // plus opmask and both ZMM halves
        // F16C: the avx2 kernels widen float16 weights with vcvtph2ps (every AVX2 CPU has it)
        avx2 = ymm_state && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               f16c();
        avx512 = zmm_state && avx2 && __builtin_cpu_supports("avx512f") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
        full_width_512 = amd_family_26_or_later();
    }
};

const CpuFeatures& cpu() {
    static const CpuFeatures features;
    return features;
}

bool cpu_has_avx2() { return cpu().avx2; }
bool cpu_has_avx512() { return cpu().avx512; }
bool cpu_full_width_512() { return cpu().full_width_512; }
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
bool cpu_full_width_512() { return false; }
#endif

std::vector<std::string> available_isas() {
    std::vector<std::string> out{"scalar"};
    if (cpu_has_avx2()) out.push_back("avx2");
    if (cpu_has_avx512()) out.push_back("avx512");
    return out;
}

}  // namespace

namespace graphrt_simd {

ConvTuning detected_conv_tuning() { return cpu_full_width_512() ? FULL512 : SPLIT512; }

ConvTuning conv_tuning_named(const std::string& name) {
    if (name == "auto") return detected_conv_tuning();
    if (name == "split512") return SPLIT512;
    if (name == "full512") return FULL512;
    throw nb::value_error(
        ("unknown conv tuning '" + name + "'; expected auto, split512 or full512").c_str());
}

const char* conv_tuning_name(ConvTuning tuning) {
    return tuning == FULL512 ? "full512" : "split512";
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

// A pool's window over h x w planes with oh x ow outputs, its attributes checked (kernel,
// strides and dilations two integers >= 1, pads_size pads >= 0: the pads before each axis
// come first); a stride with one output or a dilation with one tap changes no window: taken
// as 1.  MaxPoolCall's, AvgPoolCall's and ConvPoolCall's.
ConvShape pool_shape(const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                     const std::vector<int64_t>& dilations, const std::vector<int64_t>& pads,
                     size_t pads_size, int64_t h, int64_t w, int64_t oh, int64_t ow) {
    const std::pair<const std::vector<int64_t>*, const char*> checks[] = {
        {&kernel, "kernel"}, {&strides, "strides"}, {&dilations, "dilations"}, {&pads, "pads"}};
    for (const auto& [v, name] : checks) {
        const bool is_pads = v == &pads;
        const size_t size = is_pads ? pads_size : 2;
        const int64_t least = is_pads ? 0 : 1;
        bool ok = v->size() == size;
        for (size_t i = 0; ok && i < size; ++i) ok = (*v)[i] >= least;
        if (!ok)
            throw nb::value_error((std::string(name) + " must be " +
                                   (size == 2 ? std::string("two") : std::to_string(size)) +
                                   " integers >= " + std::to_string(least) + ", got " +
                                   dims(*v))
                                      .c_str());
    }
    return ConvShape{0, h, w, kernel[0], kernel[1], oh > 1 ? strides[0] : 1,
                     ow > 1 ? strides[1] : 1, kernel[0] > 1 ? dilations[0] : 1,
                     kernel[1] > 1 ? dilations[1] : 1, pads[0], pads[1], oh, ow};
}

// The row layout of pool_driver.inc's pool2d, shared by MaxPool and AveragePool: fills g (all
// but the divisor) and rows (per output row, the kernel rows inside x: ty in [t0, t1), iy =
// oy * sh - ph + ty * dh) for s (its padded height already checked, wide its padded width);
// returns the work buffer's floats, avgpool_work_floats(s, g), every step checked and bounded.
int64_t pool_layout(const ConvShape& s, int64_t wide, const char* what, AvgPoolGeometry& g,
                    std::vector<int64_t>& rows) {
    const int64_t wp = mul(add(wide, s.sw - 1, what) / s.sw, s.sw, what);
    g.wp = wp;
    g.pq = wp / s.sw;
    g.slack = add(64, mul(s.kw - 1, s.dw, what), what);
    const int64_t run = add(mul(s.oh, wp, what), g.slack, what);
    g.ring = avgpool_ring(run);
    const int64_t work = bounded(mul(g.ring, run, what), MAX_POOL_WORK, what);
    rows.resize(static_cast<size_t>(2 * s.oh));  // oh <= work: no overflow
    for (int64_t oy = 0; oy < s.oh; ++oy) {
        const int64_t top = oy * s.sh - s.ph;
        const int64_t t0 = top >= 0 ? 0 : (-top + s.dh - 1) / s.dh;
        const int64_t below = s.h > top ? (s.h - top + s.dh - 1) / s.dh : 0;
        rows[size_t(2 * oy)] = t0;
        rows[size_t(2 * oy + 1)] = std::max(std::min(below, s.kh), t0);
    }
    return work;
}

// The kernels pool2d runs on: rows narrower than 16 floats on avx512 take avx2's 8 lanes, which
// waste fewer lanes (every lane does the same arithmetic on every ISA, so the bits are the
// same; 1024 7 x 7 planes: AveragePool 30 us against 41 us), and so do rows of more than 16
// outputs of 3 x 3/2 windows that avx2 runs in whole vectors (MaxPool, one thread, Zen 4: 64
// 111 x 111 planes 88 -> 75 us, 64 112 x 112 with pads 95 -> 79, 128 55 x 55 52 -> 46, 192
// 56 x 56 with pads 84 -> 76; avx512's one-pass rows need a compare and a blend a tap).
const IsaKernels* narrow_pool_kernels(const IsaKernels* kern, const ConvShape& s,
                                      const AvgPoolGeometry& g) {
#if defined(GRAPHRT_SIMD_X86)
    if (pool_flat_threes(s, g, 16)) return kern;  // (the flat kernel fills its lanes)
    if (kern == &avx512_kernels && s.w < 16 && s.ow < 16 && cpu_has_avx2()) return &avx2_kernels;
    if (kern == &avx512_kernels && s.ow > 16 && threes_s2_whole_rows(s, 8) && cpu_has_avx2())
        return &avx2_kernels;
#endif
    return kern;
}

}  // namespace graphrt_simd

namespace {

// ---- argument checks ------------------------------------------------------------------------

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


// ---- packed B -------------------------------------------------------------------------------


// B (k x n) in the panel layout of one ISA's micro-kernel, 64-byte aligned.  kind 0: float32
// panels (pack_b); PANEL_F16 / PANEL_BF16: the 16-bit elements of a float16 / bfloat16 weight
// (pack_b_half), widened in the micro-kernel (weight_storage, docs/fp16.md).
constexpr int PANEL_F32 = 0, PANEL_F16 = 1, PANEL_BF16 = 2;

class PackedB {
public:
    PackedB(const IsaKernels& isa, int64_t k, int64_t n, int kind = PANEL_F32)
        : isa_(&isa), k_(k), n_(n), kind_(kind) {
        const int64_t panels = (n + isa.nr - 1) / isa.nr;
        size_ = bounded(mul(mul(panels, isa.nr, "the packed B"), k, "the packed B"), MAX_FLOATS,
                        "the packed B");
        const size_t bytes = ((static_cast<size_t>(size_) * elem() + 63) / 64) * 64;
        data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)));
        if (!data_) throw std::bad_alloc();
    }

    void pack(const InArray& b) {
        if (kind_ != PANEL_F32)
            throw nb::value_error("a half-precision PackedB is packed by pack_b_half");
        check_matrix(b, "b");
        if (static_cast<int64_t>(b.shape(0)) != k_ || static_cast<int64_t>(b.shape(1)) != n_)
            throw nb::value_error(("b must have shape (" + std::to_string(k_) + ", " +
                                   std::to_string(n_) + ") to repack, got (" +
                                   std::to_string(b.shape(0)) + ", " + std::to_string(b.shape(1)) +
                                   ")")
                                      .c_str());
        const Strided sb = strided(b);
        nb::gil_scoped_release nogil;
        pack_strided(sb);
    }

    // pack() on a B already checked (k x n floats); no GIL needed.
    void pack_strided(const Strided& b) { isa_->pack_b(k_, n_, b, data_.get()); }

    // The bits of a float16 / bfloat16 B (a uint16 view, k x n, any strides) in the panel
    // layout: panel p holds B[kk, p*nr + jj] at (p*k + kk)*nr + jj, columns past n zero.
    void pack_half(const InArray& b) {
        if (b.dtype() != nb::dtype<uint16_t>() || b.ndim() != 2)
            throw nb::type_error("b must be a 2-D uint16 array (a float16/bfloat16 view)");
        if (static_cast<int64_t>(b.shape(0)) != k_ || static_cast<int64_t>(b.shape(1)) != n_)
            throw nb::value_error("b must have the packed shape");
        const auto* src = static_cast<const uint16_t*>(b.data());
        const std::ptrdiff_t rs = b.stride(0), cs = b.stride(1);
        const int64_t nr = isa_->nr, panels = (n_ + nr - 1) / nr;
        auto* dst = reinterpret_cast<uint16_t*>(data_.get());
        nb::gil_scoped_release nogil;
        for (int64_t p = 0; p < panels; ++p) {
            const int64_t j0 = p * nr, w = std::min(nr, n_ - j0);
            for (int64_t kk = 0; kk < k_; ++kk) {
                uint16_t* row = dst + (p * k_ + kk) * nr;
                const uint16_t* from = src + kk * rs + j0 * cs;
                int64_t jj = 0;
                for (; jj < w; ++jj) row[jj] = from[jj * cs];
                for (; jj < nr; ++jj) row[jj] = 0;  // +0 in both formats
            }
        }
    }

    const IsaKernels& isa() const { return *isa_; }
    int64_t k() const { return k_; }
    int64_t n() const { return n_; }
    int kind() const { return kind_; }
    size_t elem() const { return kind_ == PANEL_F32 ? sizeof(float) : sizeof(uint16_t); }
    int64_t nbytes() const { return size_ * static_cast<int64_t>(elem()); }
    const float* data() const { return data_.get(); }
    const uint16_t* half_data() const { return reinterpret_cast<const uint16_t*>(data_.get()); }

private:
    const IsaKernels* isa_;
    int64_t k_, n_;
    int kind_;
    int64_t size_;
    std::unique_ptr<float, FreeDeleter> data_;
};

PackedB* pack_b(const InArray& b, const std::string& isa) {
    check_matrix(b, "b");
    auto packed = std::make_unique<PackedB>(kernels_for(isa), static_cast<int64_t>(b.shape(0)),
                                            static_cast<int64_t>(b.shape(1)));
    packed->pack(b);
    return packed.release();
}

PackedB* pack_b_half(const InArray& b, const std::string& isa, const std::string& kind) {
    int k = PANEL_F16;
    if (kind == "bfloat16") {
        k = PANEL_BF16;
    } else if (kind != "float16") {
        throw nb::value_error("kind must be 'float16' or 'bfloat16'");
    }
    if (b.ndim() != 2) throw nb::value_error("b must have 2 dimension(s)");
    auto packed = std::make_unique<PackedB>(kernels_for(isa), static_cast<int64_t>(b.shape(0)),
                                            static_cast<int64_t>(b.shape(1)), k);
    packed->pack_half(b);
    return packed.release();
}

// Rows [lo, hi) of the product on columns from panel p0 (n columns), on B's panel type.
inline void gemm_rows_of(const FastKernels& fast, const PackedB& b, int64_t lo, int64_t hi,
                         int64_t n, int64_t k, Strided sa, int64_t p0, float* c,
                         std::ptrdiff_t ldc, const Epilogue* ep) {
    const int64_t off = p0 * k * b.isa().nr;
    if (b.kind() == PANEL_F32) {
        fast.gemm_rows(lo, hi, n, k, sa, b.data() + off, c, ldc, ep);
    } else {
        fast.gemm_rows_half[b.kind() - 1](lo, hi, n, k, sa, b.half_data() + off, c, ldc, ep);
    }
}

// ---- GEMM entry points ----------------------------------------------------------------------

// Rows per block when gemm splits its rows over the plugin's threads (graphrt_ops_simd.kernels
// uses the same block size and the same multiply-add threshold to decide a split).
constexpr int64_t GEMM_ROW_BLOCK = 64;
// Work items a split aims at per thread, and the fewest panels of B a column chunk holds.
constexpr int64_t GEMM_ITEMS_PER_THREAD = 4;
constexpr int64_t GEMM_MIN_PANELS = 4;

// One fast product's arguments, checked: what a call needs once its arrays are known.
struct GemmArgs {
    const PackedB* b;
    const FastKernels* fast;
    Strided sa;
    float* c;
    std::ptrdiff_t ldc;
    Epilogue ep;
    int64_t k, n, row_begin, row_end;
    int threads;
};

GemmArgs gemm_args(const InArray& a, const PackedB& b, OutArray out,
                   std::optional<InArray> bias, const std::string& bias_axis, float alpha,
                   const std::string& activation, float clip_min, float clip_max,
                   int64_t row_begin, int64_t row_end, int threads) {
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
    threads = clamp_threads(threads);
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
    // the fast product of B's ISA with A read in place (gemm_rows.inc, attention.cpp)
    return GemmArgs{&b, &fast_kernels_of(b.isa()), strided(a), static_cast<float*>(out.data()),
                    static_cast<std::ptrdiff_t>(out.stride(0)), ep, k, n, row_begin, row_end,
                    threads};
}

// Runs without the GIL: only the arrays' memory, kept alive by the caller, is touched.
void gemm_run(const GemmArgs& g) {
    const FastKernels& fast = *g.fast;
    const PackedB& b = *g.b;
    const Strided sa = g.sa;
    float* c = g.c;
    const std::ptrdiff_t ldc = g.ldc;
    const Epilogue& ep = g.ep;
    const int64_t k = g.k, n = g.n, row_begin = g.row_begin, row_end = g.row_end;
    const int threads = g.threads;
    const int64_t blocks = (row_end - row_begin + GEMM_ROW_BLOCK - 1) / GEMM_ROW_BLOCK;
    if (threads <= 1 || blocks <= 0 || n <= 0) {
        gemm_rows_of(fast, b, row_begin, row_end, n, k, sa, 0, c, ldc, &ep);
        return;
    }
    // Rows and columns both split, so that a thread the machine runs late finds the other
    // threads have taken its share (two 64-row blocks on two threads wait for the slower one).
    // Column chunks are whole panels of B: an element's arithmetic depends on k, n and the ISA
    // only, never on its tile's block, so any split gives the same bits.
    const int64_t nr = b.isa().nr, panels = (n + nr - 1) / nr;
    const int64_t want = (GEMM_ITEMS_PER_THREAD * threads + blocks - 1) / blocks;
    const int64_t chunks = std::max<int64_t>(1, std::min(want, panels / GEMM_MIN_PANELS));
    const int64_t per_chunk = (panels + chunks - 1) / chunks;
    const int64_t col_chunks = (panels + per_chunk - 1) / per_chunk;
    NativePool::get().run(blocks * col_chunks, threads, [&](int64_t i) {
        const int64_t lo = row_begin + (i / col_chunks) * GEMM_ROW_BLOCK;
        const int64_t hi = std::min(row_end, lo + GEMM_ROW_BLOCK);
        const int64_t p0 = (i % col_chunks) * per_chunk;
        const int64_t j0 = p0 * nr, j1 = std::min(n, (p0 + per_chunk) * nr);
        Epilogue part = ep;
        if (part.bias_axis == BIAS_COL) part.bias = ep.bias + j0;
        gemm_rows_of(fast, b, lo, hi, j1 - j0, k, sa, p0, c + j0, ldc, &part);
    });
}

void gemm(const InArray& a, const PackedB& b, OutArray out, std::optional<InArray> bias,
          const std::string& bias_axis, float alpha, const std::string& activation,
          float clip_min, float clip_max, int64_t row_begin, int64_t row_end, int threads) {
    const GemmArgs g = gemm_args(a, b, out, bias, bias_axis, alpha, activation, clip_min,
                                 clip_max, row_begin, row_end, threads);
    nb::gil_scoped_release nogil;
    gemm_run(g);
}

// Below this many multiply-adds a bound product keeps the GIL: releasing and taking it again
// costs about as much as the product (a 1 x 32 x 32 step of a recurrence in a Scan body).
constexpr int64_t GEMM_KEEP_GIL_MACS = 1 << 15;

// gemm's arguments checked once and kept with their arrays: calling it runs the product with
// no argument to convert (a bound step's call costs a fraction of gemm's twelve arguments).
class GemmCall {
public:
    GemmCall(InArray a, nb::object packed, OutArray out, std::optional<InArray> bias,
             const std::string& bias_axis, float alpha, const std::string& activation,
             float clip_min, float clip_max, int64_t row_begin, int64_t row_end, int threads)
        : a_(a), packed_(std::move(packed)), out_(out), bias_(bias),
          args_(gemm_args(a, nb::cast<const PackedB&>(packed_), out, bias, bias_axis, alpha,
                          activation, clip_min, clip_max, row_begin, row_end, threads)) {
        const int64_t rows = args_.row_end - args_.row_begin;
        small_ = rows <= 0 || args_.n <= 0 || args_.k <= 0 ||
                 rows * args_.n <= GEMM_KEEP_GIL_MACS / args_.k;
    }

    void operator()() const {
        run_releasing_gil(small_, [this] { gemm_run(args_); });
    }

    const GemmArgs& args() const { return args_; }

private:
    InArray a_;           // held: the pointers in args_ point into these arrays
    nb::object packed_;
    OutArray out_;
    std::optional<InArray> bias_;
    GemmArgs args_;
    bool small_ = false;
};

// A batched product on a run-time B (MatMul's batch elements: attention's heads) as one call:
// every B matrix packed into its PackedB, then every GemmCall's rows in blocks of
// GEMM_ROW_BLOCK, both on the plugin's threads.  Pair by pair from Python (a repack and a
// GemmCall each, the pairs spread by the core's pool) 12 heads of 128 x 64 @ 64 x 128 took
// 154 us at one thread against onnxruntime's 117, and 128 us at two (Zen 5).  A product's
// arithmetic depends on k, n and the ISA only, never on its block or thread: the same bits.
//
// Where each B serves one call and the calls alone keep the threads busy (attention's heads),
// an item is a whole call with its B's repack, so a B is read by the core that packed it:
// packed by one thread and multiplied on the other, the heads' products above took 100 us
// at two threads against 57 on B packed once (Zen 5; 2.2 us of B read across cores a block).
class GemmBatch {
public:
    GemmBatch(std::vector<nb::object> packs, std::vector<InArray> bs,
              std::vector<nb::object> calls, int threads)
        : packs_(std::move(packs)), bs_(std::move(bs)), calls_(std::move(calls)),
          threads_(clamp_threads(threads)) {
        if (packs_.size() != bs_.size())
            throw nb::value_error("packs and bs must have one B matrix per PackedB");
        for (size_t i = 0; i < packs_.size(); ++i) {
            if (!nb::isinstance<PackedB>(packs_[i]))
                throw nb::type_error("packs must hold PackedB objects");
            auto& packed = nb::cast<PackedB&>(packs_[i]);
            check_matrix(bs_[i], "b");
            if (packed.kind() != PANEL_F32)
                throw nb::value_error("a half-precision PackedB is packed by pack_b_half");
            if (static_cast<int64_t>(bs_[i].shape(0)) != packed.k() ||
                static_cast<int64_t>(bs_[i].shape(1)) != packed.n())
                throw nb::value_error("each b must have its PackedB's shape");
            targets_.push_back(&packed);
            sources_.push_back(strided(bs_[i]));
        }
        std::vector<int> uses(targets_.size(), 0);
        for (const nb::object& call : calls_) {
            if (!nb::isinstance<GemmCall>(call))
                throw nb::type_error("calls must hold GemmCall objects");
            const GemmArgs& g = nb::cast<const GemmCall&>(call).args();
            args_.push_back(g);
            const auto t = std::find(targets_.begin(), targets_.end(), g.b) - targets_.begin();
            pack_of_.push_back(t);
            if (t < static_cast<std::ptrdiff_t>(targets_.size())) ++uses[t];
        }
        whole_calls_ = threads_ > 1 &&
                       static_cast<int64_t>(args_.size()) >= GEMM_ITEMS_PER_THREAD * threads_ &&
                       std::all_of(uses.begin(), uses.end(), [](int u) { return u == 1; });
        if (whole_calls_) return;
        for (size_t i = 0; i < args_.size(); ++i)  // else blocks of rows, after every repack
            for (int64_t lo = args_[i].row_begin; lo < args_[i].row_end; lo += GEMM_ROW_BLOCK)
                items_.push_back({static_cast<int64_t>(i), lo,
                                  std::min(args_[i].row_end, lo + GEMM_ROW_BLOCK)});
    }

    void operator()() const {
        nb::gil_scoped_release nogil;
        NativePool& pool = NativePool::get();
        if (whole_calls_) {  // a call's repack, then its rows, on one thread
            pool.run(static_cast<int64_t>(args_.size()), threads_, [&](int64_t i) {
                const GemmArgs& g = args_[i];
                const std::ptrdiff_t t = pack_of_[i];
                if (t < static_cast<std::ptrdiff_t>(targets_.size()))
                    targets_[t]->pack_strided(sources_[t]);
                if (g.n > 0)
                    gemm_rows_of(*g.fast, *g.b, g.row_begin, g.row_end, g.n, g.k, g.sa, 0, g.c,
                                 g.ldc, &g.ep);
            });
            return;
        }
        pool.run(static_cast<int64_t>(targets_.size()), threads_,
                 [&](int64_t i) { targets_[i]->pack_strided(sources_[i]); });
        pool.run(static_cast<int64_t>(items_.size()), threads_, [&](int64_t i) {
            const Item& it = items_[i];
            const GemmArgs& g = args_[it.call];
            if (g.n > 0)
                gemm_rows_of(*g.fast, *g.b, it.lo, it.hi, g.n, g.k, g.sa, 0, g.c, g.ldc, &g.ep);
        });
    }

private:
    struct Item {
        int64_t call, lo, hi;  // rows [lo, hi) of args_[call]
    };

    std::vector<nb::object> packs_;  // held: targets_, sources_ and args_ point into these
    std::vector<InArray> bs_;
    std::vector<nb::object> calls_;
    std::vector<PackedB*> targets_;
    std::vector<Strided> sources_;
    std::vector<GemmArgs> args_;
    std::vector<Item> items_;
    std::vector<std::ptrdiff_t> pack_of_;  // per call: its B's index in targets_ (or past them)
    bool whole_calls_ = false;             // items are whole calls with their B's repack
    int threads_;
};

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
    check_flat(x, "x");
    float* p = static_cast<float*>(x.data());
    const size_t size = x.size();
    nb::gil_scoped_release nogil;
    const float canonical = __builtin_nanf("");
    for (size_t i = 0; i < size; ++i) {
        if (p[i] != p[i]) p[i] = canonical;
    }
}

// ---- MaxPool ---------------------------------------------------------------------------------

// The most one thread keeps of a pool's work buffer between calls (16 MiB; MAX_POOL_WORK, its
// bound, is binding.h's); larger buffers are freed after the call.
constexpr size_t MAX_POOL_KEEP = size_t(1) << 22;

// fn(lo, hi, work) over planes [begin, begin + count) in up to 8 blocks a thread on the plugin's
// pool, each with its thread's work buffer of work_floats floats (kept between calls up to
// MAX_POOL_KEEP).  The planes are independent: any split gives the same values.
template <class F>
void run_plane_blocks(int64_t begin, int64_t count, int threads, int64_t work_floats,
                      const F& fn) {
    const int64_t blocks = threads > 1 ? std::min<int64_t>(count, 8 * threads) : 1;
    NativePool::get().run(blocks, threads, [&](int64_t i) {
        thread_local std::vector<float> work;
        work.resize(static_cast<size_t>(work_floats));
        const int64_t per = count / blocks, extra = count % blocks;  // no count * i products
        const int64_t lo = begin + per * i + std::min(extra, i);
        const int64_t hi = begin + per * (i + 1) + std::min(extra, i + 1);
        fn(lo, hi, work.data());
        if (work.capacity() > MAX_POOL_KEEP) std::vector<float>().swap(work);  // no hoarding
    });
}

// Whether a one-thread call over `outs` outputs of a kh x kw window is small enough to keep the
// GIL (releasing and taking it back costs more than the work); outs is an array's size.
inline bool keeps_gil(int threads, int64_t outs, int64_t kh, int64_t kw, int64_t most_outs) {
    return threads == 1 && kh <= 64 && kw <= 64 && outs <= most_outs &&
           outs * kh * kw <= (int64_t(1) << 15);
}

// What MaxPoolCall and AvgPoolCall share: the argument checks (once, when a call is made: a plan
// binds one per run state), the window shape, the plane range and the row layout of pool2d's
// work buffer (pool_driver.inc).  pads: ``pads_size`` values (MaxPool's two pads before each
// axis, AveragePool's four, ONNX order); y's extents fix the windows.
class PoolCallBase {
public:
    int64_t work_floats() const { return work_floats_; }

protected:
    PoolCallBase(InArray x, OutArray y, const std::vector<int64_t>& kernel,
                 const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                 const std::vector<int64_t>& pads, size_t pads_size, const std::string& isa,
                 int64_t plane_begin, int64_t plane_end, int threads, const char* what,
                 int64_t height_bound)
        : x_(x), y_(y), kern_(&kernels_for(isa)) {
        check_matrix(x, "x", 4);
        check_matrix(y, "y", 4);
        const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
        if (ys[0] != xs[0] || ys[1] != xs[1])
            throw nb::value_error(
                ("y " + dims(ys) + " must have the images and channels of x " + dims(xs)).c_str());
        const int64_t planes = mul(xs[0], xs[1], "the planes");
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
        const int64_t oh = ys[2], ow = ys[3];
        s_ = pool_shape(kernel, strides, dilations, pads, pads_size, xs[2], xs[3], oh, ow);
        threads_ = clamp_threads(threads);
        begin_ = plane_begin;
        end_ = plane_end;
        y_cs_ = oh * ow;
        if (plane_end == plane_begin || oh == 0 || ow == 0) {  // nothing to write
            end_ = begin_;
            return;
        }
        // every row offset the kernel forms lies in these extents; the work buffer holds a ring
        // of planes' padded rows and is bounded (a pad of 2^29 asked for gigabytes per thread)
        padded_height_ = bounded(padded_extent(s_.h, s_.ph, s_.kh, s_.sh, s_.dh, oh), height_bound,
                                 "the padded height");
        padded_width_ = padded_extent(s_.w, s_.pw, s_.kw, s_.sw, s_.dw, ow);
        work_floats_ = pool_layout(s_, padded_width_, what, g_, rows_);
        kern_ = narrow_pool_kernels(kern_, s_, g_);
        x_cs_ = xs[1] > 1 ? x.stride(1) : x.stride(0);
        x_rs_ = x.stride(2);
        const int64_t outs = (end_ - begin_) * oh * ow;  // y's size at most: no overflow
        small_ = keeps_gil(threads_, outs, s_.kh, s_.kw, int64_t(1) << 15);
    }

    // Runs ``pool`` (an IsaKernels member: maxpool2d or avgpool2d) over the planes.  Planes are
    // independent and each is one thread's, in one order: the same bits for any split and
    // thread count.
    template <class Pool>
    void run(Pool pool, const float* divisor) const {
        if (end_ == begin_) return;
        run_releasing_gil(small_, [&] {
            const float* px = static_cast<const float*>(x_.data());
            float* py = static_cast<float*>(y_.data());
            AvgPoolGeometry g = g_;
            g.divisor = divisor;
            g.rows = rows_.data();
            run_plane_blocks(begin_, end_ - begin_, threads_, work_floats_,
                             [&](int64_t lo, int64_t hi, float* work) {
                                 (kern_->*pool)(s_, g, px, x_cs_, x_rs_, lo, hi, py, y_cs_, work);
                             });
        });
    }

    InArray x_;  // held: the kernel reads and writes through their pointers
    OutArray y_;
    const IsaKernels* kern_;
    ConvShape s_{};
    AvgPoolGeometry g_{};
    std::vector<int64_t> rows_;
    int threads_ = 1;
    int64_t begin_ = 0, end_ = 0, work_floats_ = 0, padded_height_ = 0, padded_width_ = 0;
    std::ptrdiff_t x_cs_ = 0, x_rs_ = 0, y_cs_ = 0;
    bool small_ = false;
};

// y = MaxPool(x) for planes [plane_begin, plane_end) of the N*C planes; pads = the pads before
// each axis.  A call only runs the kernel (0.5 us of conversions a call was a fifth of a small
// CNN's 2x2 pooling).
class MaxPoolCall : public PoolCallBase {
public:
    MaxPoolCall(InArray x, OutArray y, const std::vector<int64_t>& kernel,
                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                const std::vector<int64_t>& pads, const std::string& isa, int64_t plane_begin,
                int64_t plane_end, int threads)
        : PoolCallBase(x, y, kernel, strides, dilations, pads, 2, isa, plane_begin, plane_end,
                       threads, "the MaxPool work buffer", std::numeric_limits<int64_t>::max()) {}

    void operator()() const { run(&IsaKernels::maxpool2d, nullptr); }  // no divisor
};

// ---- AveragePool -----------------------------------------------------------------------------

// How many of an axis's k taps at o * s + t * d (padded coordinates) lie in [lo, hi), per output
// o < n, in closed form (ops-basic's _axis_counts): t from ceil((lo - start) / d) up to
// ceil((hi - start) / d), clipped to [0, k].  Every value is inside the checked padded extent.
std::vector<int64_t> axis_counts(int64_t n, int64_t k, int64_t s, int64_t d, int64_t lo,
                                 int64_t hi) {
    auto ceil_div = [](int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); };
    std::vector<int64_t> counts(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
        const int64_t start = o * s;
        const int64_t first = std::max<int64_t>(ceil_div(lo - start, d), 0);
        const int64_t stop = std::min<int64_t>(ceil_div(hi - start, d), k);
        counts[static_cast<size_t>(o)] = std::max<int64_t>(stop - first, 0);
    }
    return counts;
}

// y = AveragePool(x) for planes [plane_begin, plane_end) of the N*C planes (fast mode); pads =
// the pads before and after each axis (ONNX order: h begin, w begin, h end, w end), y's
// extents fix the windows.  Each output is its window's sum over x times the reciprocal of the
// elements inside x (count_include_pad 0) or inside x and its declared pads (1), never fewer
// than one.
// Checked once, when made: the layout, the divisor (one per plan) and the work size.
class AvgPoolCall : public PoolCallBase {
public:
    AvgPoolCall(InArray x, OutArray y, const std::vector<int64_t>& kernel,
                const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                const std::vector<int64_t>& pads, bool count_include_pad, const std::string& isa,
                int64_t plane_begin, int64_t plane_end, int threads)
        // the padded height only bounds the divisor's arithmetic (2^40: far past any image)
        : PoolCallBase(x, y, kernel, strides, dilations, pads, 4, isa, plane_begin, plane_end,
                       threads, "the AveragePool work buffer", int64_t(1) << 40) {
        if (end_ == begin_) return;
        const std::vector<int64_t> xs = shape_of(x);
        const int64_t oh = s_.oh, ow = s_.ow, hp = padded_height_, wide = padded_width_;
        // the divisor: both axes' counts (closed form) multiplied, laid out as the flat runs;
        // the bounds clamped to the padded extent first (no tap lies past it: no count changes)
        auto bounds = [&](int64_t axis, int64_t extent) {
            const int64_t b = std::min(pads[axis], extent), n = std::min(xs[2 + axis], extent);
            const int64_t e = std::min(pads[2 + axis], extent);
            return count_include_pad ? std::make_pair(int64_t(0), std::min(b + n + e, extent))
                                     : std::make_pair(b, std::min(b + n, extent));
        };
        const auto [h_lo, h_hi] = bounds(0, hp);
        const auto [w_lo, w_hi] = bounds(1, wide);
        const std::vector<int64_t> ch = axis_counts(oh, s_.kh, s_.sh, s_.dh, h_lo, h_hi);
        const std::vector<int64_t> cw = axis_counts(ow, s_.kw, s_.sw, s_.dw, w_lo, w_hi);
        divisor_.assign(static_cast<size_t>(oh * g_.pq + g_.slack), 1.0f);
        for (int64_t oy = 0; oy < oh; ++oy) {
            for (int64_t ox = 0; ox < ow; ++ox) {
                const double count = double(ch[size_t(oy)]) * double(cw[size_t(ox)]);
                // the reciprocal, rounded once: sums are scaled by it (pool_driver.inc)
                divisor_[size_t(oy * g_.pq + ox)] = count < 1.0 ? 1.0f : float(1.0 / count);
            }
        }
    }

    void operator()() const { run(&IsaKernels::avgpool2d, divisor_.data()); }

private:
    std::vector<float> divisor_;
};

// ---- GlobalAveragePool -----------------------------------------------------------------------

// Planes from which a global pool is split over the plugin's threads (floats read), and below
// which a call keeps the GIL.
constexpr int64_t GLOBAL_POOL_SPLIT_FLOATS = int64_t(1) << 18;
constexpr int64_t GLOBAL_POOL_KEEP_GIL_FLOATS = int64_t(1) << 14;

// y = the mean of each of x's planes (float32, C-contiguous, rank >= 3: N x C x spatial; y holds
// N * C floats, C-contiguous), fast mode: plane_means' order.  Arguments checked once.
class GlobalAvgPoolCall {
public:
    GlobalAvgPoolCall(InArray x, OutArray y, const std::string& isa, int threads)
        : x_(x), y_(y), kern_(&kernels_for(isa)) {
        check_flat(x, "x");
        check_flat(y, "y");
        if (x.ndim() < 3) throw nb::value_error("x must be (N, C, spatial...)");
        planes_ = static_cast<int64_t>(x.shape(0)) * static_cast<int64_t>(x.shape(1));
        hw_ = 1;
        for (size_t d = 2; d < x.ndim(); ++d) hw_ *= static_cast<int64_t>(x.shape(d));
        if (hw_ < 1) throw nb::value_error("x has no spatial position to pool");
        if (static_cast<int64_t>(y.size()) != planes_)
            throw nb::value_error(("y must hold " + std::to_string(planes_) + " floats, got " +
                                   std::to_string(y.size()))
                                      .c_str());
        check_no_overlap(y, x, "x");
        const int64_t floats = static_cast<int64_t>(x.size());
        threads_ = floats >= GLOBAL_POOL_SPLIT_FLOATS ? clamp_threads(threads) : 1;
        small_ = floats <= GLOBAL_POOL_KEEP_GIL_FLOATS;
        scale_ = static_cast<float>(1.0 / static_cast<double>(hw_));
    }

    void operator()() const {
        run_releasing_gil(small_, [this] {
            const float* px = static_cast<const float*>(x_.data());
            float* py = static_cast<float*>(y_.data());
            run_plane_blocks(0, planes_, threads_, 0, [&](int64_t lo, int64_t hi, float*) {
                kern_->plane_means(px, hw_, hw_, lo, hi, py, scale_);
            });
        });
    }

private:
    InArray x_;
    OutArray y_;
    const IsaKernels* kern_;
    int64_t planes_ = 0, hw_ = 1;
    int threads_ = 1;
    bool small_ = false;
    float scale_ = 1.0f;
};

// ---- depthwise convolution -------------------------------------------------------------------

// y = act(depthwise(x, w) + bias), float32 NCHW, group = channels (w: C x 1 x kh x kw, C-
// contiguous), pads = the pads before each axis, y's extents fix the windows (zeros outside x).
// Arguments checked once, when it is made (a plan binds one per run state).
class DepthwiseCall {
public:
    DepthwiseCall(InArray x, InArray w, std::optional<InArray> bias, OutArray y,
                  const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                  const std::vector<int64_t>& pads, const std::string& activation,
                  const std::string& isa, int threads)
        : x_(x), w_(w), bias_(bias), y_(y), kern_(&kernels_for(isa)) {
        check_matrix(x, "x", 4);
        check_matrix(y, "y", 4);
        check_matrix(w, "w", 4);
        check_flat(y, "y");
        check_flat(w, "w");
        const std::pair<const std::vector<int64_t>*, const char*> checks[] = {
            {&strides, "strides"}, {&dilations, "dilations"}, {&pads, "pads"}};
        for (const auto& [v, what] : checks) {
            const int64_t least = v == &pads ? 0 : 1;
            if (v->size() != 2 || (*v)[0] < least || (*v)[1] < least)
                throw nb::value_error((std::string(what) + " must be two integers >= " +
                                       std::to_string(least) + ", got " + dims(*v))
                                          .c_str());
        }
        const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y), ws = shape_of(w);
        if (ys[0] != xs[0] || ys[1] != xs[1] || ws[0] != xs[1] || ws[1] != 1 || ws[2] < 1 ||
            ws[3] < 1)
            throw nb::value_error(("x " + dims(xs) + ", w " + dims(ws) + " and y " + dims(ys) +
                                   " are not a depthwise convolution (w must be C x 1 x kh x kw "
                                   "for x's C channels, y must have x's images and channels)")
                                      .c_str());
        if (xs[3] > 1 && x.stride(3) != 1) throw nb::value_error("x must have unit column stride");
        if (xs[0] > 1 && xs[1] > 1 && x.stride(0) != xs[1] * x.stride(1))
            throw nb::value_error("x's images must be evenly spaced (stride(0) == C * stride(1))");
        check_no_overlap(y, x, "x");
        check_no_overlap(y, w, "w");
        if (bias) {
            check_matrix(*bias, "bias", 1);
            check_flat(*bias, "bias");
            if (static_cast<int64_t>(bias->shape(0)) != xs[1])
                throw nb::value_error(("bias must hold one float per channel (" +
                                       std::to_string(xs[1]) + "), got " +
                                       std::to_string(bias->shape(0)))
                                          .c_str());
            check_no_overlap(y, *bias, "bias");
        }
        act_ = parse_activation(activation);
        if (act_ != ACT_NONE && act_ != ACT_RELU)
            throw nb::value_error("the depthwise convolution takes activation none or relu");
        s_ = ConvShape{1, xs[2], xs[3], ws[2], ws[3], strides[0], strides[1],
                       dilations[0], dilations[1], pads[0], pads[1], ys[2], ys[3]};
        channels_ = xs[1];
        planes_ = mul(xs[0], xs[1], "the planes");
        threads_ = clamp_threads(threads);
        y_cs_ = ys[2] * ys[3];
        if (planes_ == 0 || s_.oh == 0 || s_.ow == 0) {  // nothing to write
            planes_ = 0;
            return;
        }
        // the staged plane (dwconv_driver.inc), every size checked before the kernel forms it
        const char* what = "the depthwise work buffer";
        const int64_t rows = padded_extent(0, 0, s_.kh, s_.sh, s_.dh, s_.oh);
        const int64_t span = padded_extent(0, 0, s_.kw, s_.sw, s_.dw, s_.ow);
        const int64_t len = add(span / s_.sw, 64, what);  // >= the driver's phase_len
        bounded(mul(mul(rows, s_.sw, what), len, what), MAX_POOL_WORK, what);
        work_floats_ = kern_->depthwise_work(s_);
        // channels in the lanes: threads take whole chunks of 16 channels of one image
        lanes_ = kern_->depthwise_lanes(s_);
        per_image_ = lanes_ ? (channels_ + 15) / 16 : channels_;
        x_cs_ = xs[1] > 1 ? x.stride(1) : x.stride(0);
        x_rs_ = x.stride(2);
        const int64_t outs = planes_ * s_.oh * s_.ow;  // y's size: no overflow
        small_ = keeps_gil(threads_, outs, s_.kh, s_.kw, int64_t(1) << 13);
    }

    // Which of the kernel's two layouts runs: "lanes" (a block of channels per vector, small
    // maps) or "planes" (one plane's outputs per vector).
    const char* kernel() const { return lanes_ ? "lanes" : "planes"; }

    void operator()() const {
        if (planes_ == 0) return;
        run_releasing_gil(small_, [this] {
            const float* px = static_cast<const float*>(x_.data());
            const float* pw = static_cast<const float*>(w_.data());
            const float* pb = bias_ ? static_cast<const float*>(bias_->data()) : nullptr;
            float* py = static_cast<float*>(y_.data());
            // each output's sum has one order: any split of the planes, the same bits
            const int64_t per = per_image_, step = lanes_ ? 16 : 1;
            auto plane = [&](int64_t u) { return u / per * channels_ + u % per * step; };
            run_plane_blocks(0, planes_ / channels_ * per, threads_, work_floats_,
                             [&](int64_t lo, int64_t hi, float* work) {
                                 kern_->depthwise2d(s_, channels_, px, x_cs_, x_rs_, plane(lo),
                                                    plane(hi), pw, pb, act_, py, y_cs_, work);
                             });
        });
    }

private:
    InArray x_, w_;  // held: the kernel reads and writes through their pointers
    std::optional<InArray> bias_;
    OutArray y_;
    const IsaKernels* kern_;
    ConvShape s_{};
    int threads_ = 1, act_ = ACT_NONE;
    int64_t channels_ = 0, planes_ = 0, work_floats_ = 0, per_image_ = 1;
    std::ptrdiff_t x_cs_ = 0, x_rs_ = 0, y_cs_ = 0;
    bool small_ = false, lanes_ = false;
};

void maxpool2d(const InArray& x, OutArray y, const std::vector<int64_t>& kernel,
               const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
               const std::vector<int64_t>& pads, const std::string& isa, int64_t plane_begin,
               int64_t plane_end, int threads) {
    MaxPoolCall(x, y, kernel, strides, dilations, pads, isa, plane_begin, plane_end, threads)();
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
    int64_t outer = 1, inner = 1, after = 1, along = 0;
    for (int64_t d = 0; d < axis; ++d) outer = mul(outer, os[d], "out's size");
    for (int64_t d = axis; d < rank; ++d) inner = mul(inner, os[d], "out's size");
    for (int64_t d = axis + 1; d < rank; ++d) after = mul(after, os[d], "out's size");
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
            if (d >= axis) size = mul(size, s[d], "an input's size");
        }
        check_no_overlap(out, x, "an input");
        src.push_back(static_cast<const float*>(x.data()));
        chunk.push_back(size);
        offset.push_back(mul(along, after, "an input's offset"));
        along = add(along, s[axis], "the inputs along the axis");
    }
    if (along != os[axis])
        throw nb::value_error(("the inputs add up to " + std::to_string(along) +
                               " along the axis, out has " + std::to_string(os[axis]))
                                  .c_str());
    float* dst = static_cast<float*>(out.data());
    const int64_t count = static_cast<int64_t>(xs.size());
    threads = clamp_threads(threads);
    if (count == 0 || inner == 0) return;  // nothing to copy (and no division by zero)
    const int64_t jobs = mul(outer, count, "the copies");
    nb::gil_scoped_release nogil;
    NativePool::get().run(jobs, threads, [&](int64_t j) {
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
    if (name == "relu") return OP_RELU;
    throw nb::value_error(
        ("unknown function '" + name + "'; expected exp, tanh, sigmoid, erf, gelu or relu")
            .c_str());
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
    threads = clamp_threads(threads);
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

namespace graphrt_simd {
// LSTM, GRU and RNN (rnn.cpp).
void bind_rnn(nb::module_& m);
// Attention, the fast element-wise functions and LayerNorm (attention.cpp).
void bind_attention(nb::module_& m);
// The int8 GEMM (qgemm.cpp).
void bind_qgemm(nb::module_& m);
// The per-channel affine of inference BatchNormalization (affine.cpp).
void bind_affine(nb::module_& m);
// The blocked (NCHWc) layout's pools and copies (blocked.cpp).
void bind_blocked(nb::module_& m);
}  // namespace graphrt_simd

NB_MODULE(_native, m) {
    // Plans, packed weights and conv plans held by Python globals are still alive when the
    // interpreter tears this module down at exit; that is not a leak worth a warning.
    nb::set_leak_warnings(false);
    m.doc() = "graphrt-ops-simd native kernels: float32 GEMM (packed fast, canonical exact), "
              "convolution, MaxPool, element-wise functions and NonMaxSuppression";

    nb::class_<PackedB>(m, "PackedB", "B packed into one ISA's panel layout (opaque).")
        .def_prop_ro("k", &PackedB::k)
        .def_prop_ro("n", &PackedB::n)
        .def_prop_ro("isa", [](const PackedB& p) { return std::string(p.isa().name); })
        .def_prop_ro("nbytes", &PackedB::nbytes)
        .def("repack", &PackedB::pack, nb::arg("b"),
             "Pack a new B of the same shape into this buffer (not while a gemm reads it).");

    m.def("available_isas", &available_isas, "ISAs this CPU and OS can run, scalar first.");
    m.def("conv_tuning", [] { return std::string(conv_tuning_name(detected_conv_tuning())); },
          "The rule set auto's convolution choices follow on avx512 on this CPU: split512 "
          "(measured on Zen 4; any CPU not known to have full-width 512-bit units) or full512 "
          "(measured on Zen 5).");
    m.def("pack_b", &pack_b, nb::arg("b"), nb::arg("isa"), nb::rv_policy::take_ownership,
          "Pack B (k x n, any strides) for the fast GEMM of one ISA.");
    m.def("pack_b_half", &pack_b_half, nb::arg("b"), nb::arg("isa"), nb::arg("kind"),
          nb::rv_policy::take_ownership,
          "Pack a float16 or bfloat16 B (its bits as a k x n uint16 array, any strides) in "
          "half-precision panels for the fast GEMM of one ISA; widened in the micro-kernel.");
    m.def("gemm", &gemm, nb::arg("a"), nb::arg("b"), nb::arg("out"),
          nb::arg("bias").none() = nb::none(), nb::arg("bias_axis") = "col",
          nb::arg("alpha") = 1.0f, nb::arg("activation") = "none", nb::arg("clip_min") = 0.0f,
          nb::arg("clip_max") = 0.0f, nb::arg("row_begin") = 0, nb::arg("row_end") = -1,
          nb::arg("threads") = 1,
          "out[rows] = act(alpha * a[rows] @ B + bias) with B packed by pack_b; with threads > "
          "1 the rows run in blocks of 64 on the plugin's threads (the same bits).");
    nb::class_<GemmCall>(m, "GemmCall",
                         "gemm's arguments checked once; calling it runs gemm on them.")
        .def(nb::init<InArray, nb::object, OutArray, std::optional<InArray>, const std::string&,
                      float, const std::string&, float, float, int64_t, int64_t, int>(),
             nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("bias").none() = nb::none(),
             nb::arg("bias_axis") = "col", nb::arg("alpha") = 1.0f,
             nb::arg("activation") = "none", nb::arg("clip_min") = 0.0f,
             nb::arg("clip_max") = 0.0f, nb::arg("row_begin") = 0, nb::arg("row_end") = -1,
             nb::arg("threads") = 1)
        .def("__call__", &GemmCall::operator());
    nb::class_<GemmBatch>(m, "GemmBatch",
                          "Repacks every B (a run-time B's matrices into their PackedB) and "
                          "then runs every GemmCall, spread over the plugin's threads: one call.")
        .def(nb::init<std::vector<nb::object>, std::vector<InArray>, std::vector<nb::object>,
                      int>(),
             nb::arg("packs"), nb::arg("bs"), nb::arg("calls"), nb::arg("threads") = 1)
        .def("__call__", &GemmBatch::operator());
    m.def("gemm_exact", &gemm_exact, nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("isa"),
          nb::arg("row_begin") = 0, nb::arg("row_end") = -1,
          "out[rows] = a[rows] @ b in the canonical exact order; NaN -> 0x7FC00000.");
    m.def("unary", &unary, nb::arg("fn"), nb::arg("x"), nb::arg("out"), nb::arg("isa"),
          nb::arg("begin") = 0, nb::arg("end") = -1, nb::arg("threads") = 1,
          "out.flat[begin:end] = fn(x.flat[begin:end]) for fn in exp, tanh, sigmoid, erf, gelu "
          "(float32, C-contiguous, out is x or apart from it) in exact mode's operation order; "
          "NaN -> 0x7FC00000.");
    bind_conv(m);
    bind_nms(m);
    bind_rnn(m);
    bind_attention(m);
    bind_qgemm(m);
    bind_affine(m);
    bind_blocked(m);
    nb::class_<MaxPoolCall>(m, "MaxPoolCall",
                            "maxpool2d's arguments checked once; calling it runs maxpool2d.")
        .def(nb::init<InArray, OutArray, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::string&, int64_t, int64_t, int>(),
             nb::arg("x"), nb::arg("y"), nb::arg("kernel"), nb::arg("strides"),
             nb::arg("dilations"), nb::arg("pads"), nb::arg("isa"), nb::arg("plane_begin") = 0,
             nb::arg("plane_end") = -1, nb::arg("threads") = 1)
        .def("__call__", &MaxPoolCall::operator());
    nb::class_<GlobalAvgPoolCall>(m, "GlobalAvgPoolCall",
                                  "A fast-mode GlobalAveragePool's arguments checked once; "
                                  "calling it writes each plane's mean to y.")
        .def(nb::init<InArray, OutArray, const std::string&, int>(), nb::arg("x"), nb::arg("y"),
             nb::arg("isa"), nb::arg("threads") = 1)
        .def("__call__", &GlobalAvgPoolCall::operator());
    nb::class_<AvgPoolCall>(m, "AvgPoolCall",
                            "A fast-mode AveragePool's arguments checked once (pads: h, w "
                            "begin then end); calling it writes y.")
        .def(nb::init<InArray, OutArray, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, bool, const std::string&, int64_t, int64_t,
                      int>(),
             nb::arg("x"), nb::arg("y"), nb::arg("kernel"), nb::arg("strides"),
             nb::arg("dilations"), nb::arg("pads"), nb::arg("count_include_pad"),
             nb::arg("isa"), nb::arg("plane_begin") = 0, nb::arg("plane_end") = -1,
             nb::arg("threads") = 1)
        .def_prop_ro("work_floats", [](const AvgPoolCall& c) { return c.work_floats(); })
        .def("__call__", &AvgPoolCall::operator());
    nb::class_<DepthwiseCall>(m, "DepthwiseCall",
                              "A depthwise convolution's arguments checked once; calling it "
                              "writes y = act(depthwise(x, w) + bias).")
        .def(nb::init<InArray, InArray, std::optional<InArray>, OutArray,
                      const std::vector<int64_t>&, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::string&, const std::string&, int>(),
             nb::arg("x"), nb::arg("w"), nb::arg("bias").none(), nb::arg("y"), nb::arg("strides"),
             nb::arg("dilations"), nb::arg("pads"), nb::arg("activation"), nb::arg("isa"),
             nb::arg("threads") = 1)
        .def_prop_ro("kernel", &DepthwiseCall::kernel)
        .def("__call__", &DepthwiseCall::operator());
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
