// The int8 GEMM's bindings (graphrt_ops_simd.qproduct): PackedQB, B packed once per plan in
// one ISA's layout with its zero points, and QGemmCall, one call's arguments checked once (per
// run state) that computes C = (A - a_zero) @ (B - b_zero) in int32 when called.  The kernels
// are qgemm_driver.inc's (qgemm.h); the work is split into row blocks and column panel chunks
// on the plugin's threads (pool.h).  Integer sums modulo 2^32 do not depend on the split, so
// any thread count gives the same bits.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "pool.h"
#include "qgemm.h"

namespace graphrt_simd {

namespace {

// Multiply-adds below which a call keeps the GIL (the release costs more than it frees).
constexpr int64_t QGEMM_KEEP_GIL_MACS = int64_t(1) << 16;
// Bytes of packed A one work item aims for (rows of A stay in L2 while B's panels stream).
constexpr int64_t QGEMM_A_BYTES = int64_t(256) << 10;
// The most bytes of packed B (as the float kernels' bound).
constexpr int64_t QGEMM_MAX_BYTES = MAX_FLOATS * 4;

#if defined(GRAPHRT_SIMD_X86)
// The dot-product extensions, on top of the avx2 / avx512 checks of module.cpp (which cover
// the OS's register state): AVX512-VNNI (EVEX, zmm) and AVX-VNNI (VEX, ymm).
bool cpu_has_vnni() {
    static const bool vnni = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vnni") != 0;
    }();
    return vnni;
}

bool cpu_has_avxvnni() {
    static const bool vnni = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avxvnni") != 0;
    }();
    return vnni;
}
#endif

const QGemmKernels& qkernels_for(const std::string& isa) {
    if (isa == "scalar") return scalar_qgemm;
#if defined(GRAPHRT_SIMD_X86)
    if (isa == "avx2" || isa == "avx2-madd" || isa == "avx2-vnni") {
        kernels_for("avx2");  // the CPU and OS check (ValueError when absent)
        if (isa == "avx2-madd") return avx2_qgemm;
        if (cpu_has_avxvnni()) return avxvnni_qgemm;
        if (isa == "avx2-vnni")
            throw nb::value_error("isa 'avx2-vnni' is not available on this CPU/OS");
        return avx2_qgemm;
    }
    if (isa == "avx512" || isa == "avx512-madd" || isa == "avx512-vnni") {
        kernels_for("avx512");
        if (isa == "avx512-madd") return avx512_qgemm;
        if (cpu_has_vnni()) return vnni_qgemm;
        if (isa == "avx512-vnni")
            throw nb::value_error("isa 'avx512-vnni' is not available on this CPU/OS");
        return avx512_qgemm;
    }
#endif
    throw nb::value_error(("unknown isa '" + isa +
                           "'; expected scalar, avx2, avx2-madd, avx2-vnni, avx512, avx512-madd "
                           "or avx512-vnni")
                              .c_str());
}

std::vector<std::string> qgemm_variants() {
    std::vector<std::string> out;
    for (const char* name : {"scalar", "avx2-madd", "avx2-vnni", "avx512-madd", "avx512-vnni"}) {
        try {
            qkernels_for(name);
            out.push_back(name);
        } catch (...) {  // not this CPU or OS
        }
    }
    return out;
}

// Whether x is int8 (true) or uint8 (false); TypeError otherwise.
template <class A>
bool int8_signed(const A& x, const char* what) {
    if (x.dtype() == nb::dtype<int8_t>()) return true;
    if (x.dtype() == nb::dtype<uint8_t>()) return false;
    throw nb::type_error((std::string(what) + " must be an int8 or uint8 array").c_str());
}

// Byte range [lo, hi) of an array's elements (itemsize bytes each); false when empty.
template <class A>
bool byte_extent(const A& x, int64_t itemsize, uintptr_t& lo, uintptr_t& hi) {
    int64_t first = 0, last = 0;
    for (size_t d = 0; d < x.ndim(); ++d) {
        const int64_t len = static_cast<int64_t>(x.shape(d));
        if (len == 0) return false;
        const int64_t span = x.stride(d) * (len - 1);
        if (span < 0) first += span; else last += span;
    }
    const auto base = reinterpret_cast<uintptr_t>(x.data());
    lo = base + first * itemsize;
    hi = base + (last + 1) * itemsize;
    return true;
}

template <class A, class B>
void check_apart(const A& out, const B& in, int64_t in_size, const char* what) {
    uintptr_t a0, a1, b0, b1;
    if (byte_extent(out, 4, a0, a1) && byte_extent(in, in_size, b0, b1) && a0 < b1 && b0 < a1)
        throw nb::value_error((std::string("out must not overlap ") + what).c_str());
}

template <class A>
bool c_contiguous(const A& x) {
    if (x.size() == 0) return true;  // no element to address: any strides will do
    int64_t expect = 1;
    for (size_t d = x.ndim(); d-- > 0;) {
        if (x.shape(d) > 1 && x.stride(d) != expect) return false;
        expect *= static_cast<int64_t>(x.shape(d));
    }
    return true;
}

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};

void* aligned_bytes(int64_t bytes) {
    const size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, size);
    return p;
}

class PackedQB {
public:
    PackedQB(const InArray& b, std::optional<InArray> zero, const std::string& isa)
        : kern_(&qkernels_for(isa)) {
        b_signed_ = int8_signed(b, "b");
        if (b.ndim() != 2)
            throw nb::value_error(("b must have 2 dimensions, got " + std::to_string(b.ndim()))
                                      .c_str());
        if (!c_contiguous(b)) throw nb::value_error("b must be C-contiguous");
        k_ = static_cast<int64_t>(b.shape(0));
        n_ = static_cast<int64_t>(b.shape(1));
        std::vector<int32_t> zb(static_cast<size_t>(n_), 0);
        if (zero) {
            if (int8_signed(*zero, "b_zero") != b_signed_)
                throw nb::type_error("b_zero must have b's type");
            const int64_t count = static_cast<int64_t>(zero->size());
            if (zero->ndim() > 1 || (count != 1 && count != n_))
                throw nb::value_error("b_zero must hold one value or one per column of b");
            if (count > 0 && !c_contiguous(*zero))
                throw nb::value_error("b_zero must be C-contiguous");
            for (int64_t j = 0; j < n_; ++j) {
                const int64_t i = count == 1 ? 0 : j;
                zb[j] = b_signed_ ? static_cast<const int8_t*>(zero->data())[i]
                                  : static_cast<const uint8_t*>(zero->data())[i];
            }
        }
        const int64_t kg = kern_->kgroup, nr = kern_->nr;
        kp_ = add(k_, kg - 1, "the packed depth") / kg * kg;
        panels_ = add(n_, nr - 1, "the packed width") / nr;
        const int64_t cols = mul(panels_, nr, "the packed width");
        bytes_ = bounded(mul(mul(cols, kp_, "the packed B"), kern_->esize, "the packed B"),
                         QGEMM_MAX_BYTES, "the packed B");
        data_.reset(aligned_bytes(bytes_));
        bz_.assign(static_cast<size_t>(cols), 0);
        bcorr_.assign(static_cast<size_t>(cols), 0);
        kern_->pack_b(k_, n_, kp_, b.data(), b_signed_, zb.data(), data_.get(), bz_.data(),
                      bcorr_.data());
    }

    const QGemmKernels& kern() const { return *kern_; }
    int64_t k() const { return k_; }
    int64_t n() const { return n_; }
    int64_t kp() const { return kp_; }
    int64_t panels() const { return panels_; }
    int64_t nbytes() const { return bytes_; }
    bool b_signed() const { return b_signed_; }
    const void* data() const { return data_.get(); }
    const int32_t* bz() const { return bz_.data(); }
    const int32_t* bcorr() const { return bcorr_.data(); }

private:
    const QGemmKernels* kern_;
    bool b_signed_ = false;
    int64_t k_ = 0, n_ = 0, kp_ = 0, panels_ = 0, bytes_ = 0;
    std::unique_ptr<void, AlignedFree> data_;
    std::vector<int32_t> bz_, bcorr_;
};

// One thread's packed rows of A, kept between calls (grown, never shrunk).
void* thread_work(int64_t bytes) {
    struct Buffer {
        void* p = nullptr;
        int64_t cap = 0;
        ~Buffer() { std::free(p); }
    };
    thread_local Buffer buf;
    if (bytes > buf.cap) {
        void* fresh = aligned_bytes(bytes);
        std::free(buf.p);
        buf.p = fresh;
        buf.cap = bytes;
    }
    return buf.p;
}

class QGemmCall {
public:
    QGemmCall(InArray a, nb::object packed, OutArray out, std::optional<InArray> a_zero,
              int threads)
        : a_(a), packed_(std::move(packed)), out_(out), a_zero_(a_zero),
          threads_(clamp_threads(threads)) {
        if (!nb::isinstance<PackedQB>(packed_))
            throw nb::type_error("packed must be a PackedQB (graphrt_ops_simd._native.PackedQB)");
        const PackedQB& pb = nb::cast<const PackedQB&>(packed_);
        const bool a_signed = int8_signed(a, "a");
        if (a.ndim() != 2)
            throw nb::value_error(("a must have 2 dimensions, got " + std::to_string(a.ndim()))
                                      .c_str());
        const int64_t m = static_cast<int64_t>(a.shape(0)), k = static_cast<int64_t>(a.shape(1));
        if (k != pb.k())
            throw nb::value_error(("inner dimensions differ: a has " + std::to_string(k) +
                                   " columns, the packed b " + std::to_string(pb.k()) + " rows")
                                      .c_str());
        if (m > 0 && k > 1 && a.stride(1) != 1)
            throw nb::value_error("a must have unit column stride");
        if (out.dtype() != nb::dtype<int32_t>()) throw nb::type_error("out must be an int32 array");
        if (out.ndim() != 2 || static_cast<int64_t>(out.shape(0)) != m ||
            static_cast<int64_t>(out.shape(1)) != pb.n())
            throw nb::value_error(("out must have shape (" + std::to_string(m) + ", " +
                                   std::to_string(pb.n()) + ")")
                                      .c_str());
        if (!c_contiguous(out)) throw nb::value_error("out must be C-contiguous");
        check_aligned<int32_t>(out, "out", "int32");
        check_apart(out, a, 1, "a");
        if (a_zero) {
            if (int8_signed(*a_zero, "a_zero") != a_signed)
                throw nb::type_error("a_zero must have a's type");
            if (a_zero->size() != 1) throw nb::value_error("a_zero must hold one value");
        }
        args_.m = m;
        args_.n = pb.n();
        args_.k = k;
        args_.kp = pb.kp();
        args_.a = a.data();
        args_.lda = m > 1 ? static_cast<std::ptrdiff_t>(a.stride(0)) : 0;
        args_.a_signed = a_signed;
        args_.packed = pb.data();
        args_.bz = pb.bz();
        args_.bcorr = pb.bcorr();
        args_.c = static_cast<int32_t*>(out.data());
        args_.ldc = static_cast<std::ptrdiff_t>(pb.n());
        kern_ = &pb.kern();
        panels_ = pb.panels();
        const int64_t mr = kern_->mr;
        const int64_t row_bytes = std::max<int64_t>(1, args_.kp * kern_->esize);
        mb_ = std::max<int64_t>(mr, std::min<int64_t>(1024, QGEMM_A_BYTES / row_bytes) / mr * mr);
        small_ = m == 0 || pb.n() == 0 || m * pb.n() <= QGEMM_KEEP_GIL_MACS / std::max<int64_t>(k, 1);
    }

    void operator()() {
        if (a_zero_) {
            const void* z = a_zero_->data();
            args_.a_zero = args_.a_signed ? *static_cast<const int8_t*>(z)
                                          : *static_cast<const uint8_t*>(z);
        }
        run_releasing_gil(small_, [this] { run(); });
    }

private:
    void run() const {
        const int64_t m = args_.m;
        if (m == 0 || panels_ == 0) return;
        const int64_t rblocks = (m + mb_ - 1) / mb_;
        int64_t chunks = 1;
        if (threads_ > 1) {
            const int64_t want = (2 * int64_t(threads_) + rblocks - 1) / rblocks;
            chunks = std::max<int64_t>(1, std::min(panels_, want));
        }
        const int64_t work = qgemm_work_bytes(*kern_, mb_, args_.kp);
        const int64_t items = rblocks * chunks;
        auto item = [&](int64_t i) {
            const int64_t rb = i / chunks, cc = i % chunks;
            const int64_t m0 = rb * mb_, m1 = std::min(m, m0 + mb_);
            const int64_t p0 = panels_ * cc / chunks, p1 = panels_ * (cc + 1) / chunks;
            kern_->gemm(args_, m0, m1, p0, p1, thread_work(work));
        };
        if (items == 1 || threads_ == 1) {
            for (int64_t i = 0; i < items; ++i) item(i);
            return;
        }
        NativePool::get().run(items, threads_, item);
    }

    InArray a_;  // held: the pointers in args_ point into these
    nb::object packed_;
    OutArray out_;
    std::optional<InArray> a_zero_;
    int threads_;
    QGemmArgs args_{};
    const QGemmKernels* kern_ = nullptr;
    int64_t panels_ = 0, mb_ = 1;
    bool small_ = false;
};

// DynamicQuantizeLinear: ops-basic's quantize.py formula step by step in float32 (so the same
// bits): lo = fmin(min x, 0), hi = fmax(max x, 0) with a NaN anywhere making both 0 (numpy's
// minimum.reduce propagates it, fmin drops it); scale = (hi - lo) / 255; scale 0 (or not
// finite): y_scale 1 (or that scale), zero point 0, y 0; else zero = rint(clip(0 - lo / scale,
// 0, 255)) and y = clip(rint(x / scale) + zero, 0, 255).  |x / scale| <= 255 up to the rounding
// of scale (at most twice that for a subnormal scale), far below 2^22, where adding and
// subtracting 1.5 * 2^23 rounds half to even like rint.
void dynamic_quantize(const InArray& x, OutArray y, OutArray y_scale, OutArray y_zero,
                      const std::string& isa) {
    check_flat(x, "x");
    if (y.dtype() != nb::dtype<uint8_t>() || y_zero.dtype() != nb::dtype<uint8_t>())
        throw nb::type_error("y and y_zero must be uint8 arrays");
    if (y_scale.dtype() != nb::dtype<float>()) throw nb::type_error("y_scale must be float32");
    if (y.size() != x.size() || !c_contiguous(y))
        throw nb::value_error("y must be C-contiguous with x's size");
    if (y_scale.size() != 1 || y_zero.size() != 1)
        throw nb::value_error("y_scale and y_zero must hold one value each");
    check_aligned(y_scale, "y_scale");
    check_apart(y_scale, x, 4, "x");
    uintptr_t a0, a1, b0, b1;
    if (byte_extent(y, 1, a0, a1) && byte_extent(x, 4, b0, b1) && a0 < b1 && b0 < a1)
        throw nb::value_error("y must not overlap x");
    const float* px = static_cast<const float*>(x.data());
    uint8_t* py = static_cast<uint8_t*>(y.data());
    const int64_t n = static_cast<int64_t>(x.size());
    float* ps = static_cast<float*>(y_scale.data());
    uint8_t* pz = static_cast<uint8_t*>(y_zero.data());
    const QGemmKernels& kern = qkernels_for(isa);
    nb::gil_scoped_release nogil;
    float lo = 0.0f, hi = 0.0f;  // the range always includes 0
    int nan = 0;
    kern.dq_range(px, n, &lo, &hi, &nan);
    if (nan) lo = hi = 0.0f;
    const float scale = (hi - lo) / 255.0f;
    if (scale == 0.0f || !std::isfinite(scale)) {
        *ps = scale == 0.0f ? 1.0f : scale;
        *pz = 0;
        std::memset(py, 0, static_cast<size_t>(n));
        return;
    }
    const float magic = 12582912.0f;  // 1.5 * 2^23
    float zero = 0.0f - lo / scale;
    zero = zero < 0.0f ? 0.0f : zero > 255.0f ? 255.0f : zero;
    zero = (zero + magic) - magic;
    *ps = scale;
    *pz = static_cast<uint8_t>(zero);
    kern.dq_quantize(px, n, scale, zero, py);
}

// QLinearConv's requantization (qgemm.h, requant): acc (G, N, P, Mg) int32 C-contiguous; y a
// (G, N, P, Mg) int8/uint8 view of Y (N, M, P) (any strides); bias (M) int32 or none; mult 1 or
// M float32 values.
void requantize_i32(const nb::ndarray<nb::ro, nb::device::cpu>& acc,
                    std::optional<nb::ndarray<nb::ro, nb::device::cpu>> bias,
                    const nb::ndarray<nb::ro, nb::device::cpu>& mult, float zero, float lo,
                    float hi, nb::ndarray<nb::device::cpu> y, const std::string& isa) {
    if (acc.dtype() != nb::dtype<int32_t>() || acc.ndim() != 4 || !c_contiguous(acc))
        throw nb::value_error("acc must be a C-contiguous 4-D int32 array");
    const bool y_signed = y.dtype() == nb::dtype<int8_t>();
    if ((!y_signed && y.dtype() != nb::dtype<uint8_t>()) || y.ndim() != 4)
        throw nb::value_error("y must be a 4-D int8 or uint8 array");
    for (size_t d = 0; d < 4; ++d) {
        if (y.shape(d) != acc.shape(d)) throw nb::value_error("y must have acc's shape");
    }
    const int64_t g = acc.shape(0), n = acc.shape(1), rows = acc.shape(2), cols = acc.shape(3);
    const int64_t m = mul(g, cols, "the output channels");
    if (mult.dtype() != nb::dtype<float>() || (mult.size() != 1 && int64_t(mult.size()) != m) ||
        !c_contiguous(mult))
        throw nb::value_error("mult must hold 1 or M float32 values");
    const int32_t* pb = nullptr;
    if (bias) {
        if (bias->dtype() != nb::dtype<int32_t>() || int64_t(bias->size()) != m ||
            !c_contiguous(*bias))
            throw nb::value_error("bias must hold M int32 values");
        pb = static_cast<const int32_t*>(bias->data());
    }
    uintptr_t a0, a1, b0, b1;
    if (byte_extent(y, 1, a0, a1) && byte_extent(acc, 4, b0, b1) && a0 < b1 && b0 < a1)
        throw nb::value_error("y must not overlap acc");
    const QGemmKernels& kern = qkernels_for(isa);
    const int32_t* pa = static_cast<const int32_t*>(acc.data());
    const float* pm = static_cast<const float*>(mult.data());
    const bool per_col = mult.size() != 1;
    char* py = static_cast<char*>(y.data());
    nb::gil_scoped_release nogil;
    for (int64_t gi = 0; gi < g; ++gi) {
        for (int64_t ni = 0; ni < n; ++ni) {
            const int32_t* slab = pa + (gi * n + ni) * rows * cols;
            char* yb = py + gi * y.stride(0) + ni * y.stride(1);
            kern.requant(slab, rows, cols, pb ? pb + gi * cols : nullptr,
                         per_col ? pm + gi * cols : pm, per_col, zero, lo, hi, yb, y.stride(2),
                         y.stride(3), y_signed);
        }
    }
}

}  // namespace

void bind_qgemm(nb::module_& m) {
    nb::class_<PackedQB>(m, "PackedQB",
                         "An int8/uint8 B with its zero points, packed for one ISA's int8 GEMM.")
        .def(nb::init<const InArray&, std::optional<InArray>, const std::string&>(),
             nb::arg("b"), nb::arg("b_zero").none(), nb::arg("isa"))
        .def_prop_ro("k", &PackedQB::k)
        .def_prop_ro("n", &PackedQB::n)
        .def_prop_ro("isa", [](const PackedQB& p) { return std::string(p.kern().name); })
        .def_prop_ro("nbytes", &PackedQB::nbytes)
        .def_prop_ro("b_signed", &PackedQB::b_signed);
    nb::class_<QGemmCall>(m, "QGemmCall",
                          "The int8 GEMM's arguments checked once; calling it writes out = (a - "
                          "a_zero) @ (b - b_zero) in int32 (a_zero read at each call).")
        .def(nb::init<InArray, nb::object, OutArray, std::optional<InArray>, int>(),
             nb::arg("a"), nb::arg("packed"), nb::arg("out"),
             nb::arg("a_zero").none() = nb::none(), nb::arg("threads") = 1)
        .def("__call__", &QGemmCall::operator());
    m.def("requantize_i32", &requantize_i32, nb::arg("acc"), nb::arg("bias").none(),
          nb::arg("mult"), nb::arg("zero"), nb::arg("lo"), nb::arg("hi"), nb::arg("y"),
          nb::arg("isa"),
          "y = clip(rint(float32(acc + bias) * mult) + zero, lo, hi): QLinearConv's "
          "requantization of (G, N, P, Mg) int32 sums into a view of Y, as ops-basic's.");
    m.def("dynamic_quantize", &dynamic_quantize, nb::arg("x"), nb::arg("y"),
          nb::arg("y_scale"), nb::arg("y_zero"), nb::arg("isa"),
          "DynamicQuantizeLinear of float32 x (C-contiguous) into uint8 y, float32 y_scale "
          "and uint8 y_zero: ops-basic's formula, the same bits.");
    m.def("qgemm_variants", &qgemm_variants,
          "The int8 GEMM kernels this CPU and OS can run (scalar, avx2-madd, avx2-vnni, "
          "avx512-madd, avx512-vnni); isa 'avx2' ('avx512') picks its vnni kernels when "
          "present.");
}

}  // namespace graphrt_simd
