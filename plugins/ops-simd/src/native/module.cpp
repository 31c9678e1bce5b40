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

void gemm(const InArray& a, const PackedB& b, OutArray out, std::optional<InArray> bias,
          const std::string& bias_axis, float alpha, const std::string& activation,
          float clip_min, float clip_max, int64_t row_begin, int64_t row_end) {
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
    b.isa().gemm_fast(row_begin, row_end, n, k, sa, b.data(), c, ldc, &ep);
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

// ---- element-wise functions ------------------------------------------------------------------

int parse_unary(const std::string& name) {
    if (name == "exp") return OP_EXP;
    if (name == "tanh") return OP_TANH;
    if (name == "sigmoid") return OP_SIGMOID;
    if (name == "erf") return OP_ERF;
    throw nb::value_error(
        ("unknown function '" + name + "'; expected exp, tanh, sigmoid or erf").c_str());
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

// out.flat[begin:end] = fn(x.flat[begin:end]); out is x itself (in place) or apart from it.
void unary(const std::string& fn, const InArray& x, OutArray out, const std::string& isa,
           int64_t begin, int64_t end) {
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
    kern.unary(op, px, py, end - begin);
}

}  // namespace

NB_MODULE(_native, m) {
    m.doc() = "graphrt-ops-simd native kernels (float32 GEMM: packed fast and canonical exact)";

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
          "out[rows] = act(alpha * a[rows] @ B + bias) with B packed by pack_b.");
    m.def("gemm_exact", &gemm_exact, nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("isa"),
          nb::arg("row_begin") = 0, nb::arg("row_end") = -1,
          "out[rows] = a[rows] @ b in the canonical exact order; NaN -> 0x7FC00000.");
    m.def("unary", &unary, nb::arg("fn"), nb::arg("x"), nb::arg("out"), nb::arg("isa"),
          nb::arg("begin") = 0, nb::arg("end") = -1,
          "out.flat[begin:end] = fn(x.flat[begin:end]) for fn in exp, tanh, sigmoid, erf "
          "(float32, C-contiguous, out is x or apart from it) in exact mode's operation order; "
          "NaN -> 0x7FC00000.");
    m.def("canonicalize_nan", &canonicalize_nan, nb::arg("x"),
          "Rewrite every NaN of x to 0x7FC00000 in place.");
}
