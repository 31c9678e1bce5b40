// What the binding files of graphrt_ops_simd._native share: the array types, the argument
// checks every entry point runs before a kernel touches memory, and the ISA lookup.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels.h"

namespace graphrt_simd {

namespace nb = nanobind;

using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;

// The kernels of an ISA this CPU and OS can run (ValueError otherwise); module.cpp.
const IsaKernels& kernels_for(const std::string& isa);

// numpy allows arrays at any byte address (np.frombuffer with an offset); the kernels read
// whole elements, and a misaligned load is undefined behaviour (UBSan aborts on it).
template <class T = float, class A>
inline void check_aligned(const A& x, const char* what, const char* type = "float32") {
    if (x.size() > 0 && reinterpret_cast<uintptr_t>(x.data()) % alignof(T) != 0)
        throw nb::value_error(
            (std::string(what) + " must be an aligned " + type + " array").c_str());
}

template <class A>
inline void check_matrix(const A& x, const char* what, size_t ndim = 2) {
    if (x.dtype() != nb::dtype<float>())
        throw nb::type_error((std::string(what) + " must be a float32 array").c_str());
    if (x.ndim() != ndim)
        throw nb::value_error((std::string(what) + " must have " + std::to_string(ndim) +
                               " dimension(s), got " + std::to_string(x.ndim()))
                                  .c_str());
    check_aligned(x, what);
}

// Byte range [lo, hi) an array's elements occupy; empty arrays occupy nothing.
template <class A>
inline bool extent(const A& x, uintptr_t& lo, uintptr_t& hi) {
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
inline void check_no_overlap(const A& out, const B& in, const char* what) {
    uintptr_t a0, a1, b0, b1;
    if (extent(out, a0, a1) && extent(in, b0, b1) && a0 < b1 && b0 < a1)
        throw nb::value_error((std::string("out must not overlap ") + what).c_str());
}

template <class A>
inline void check_flat(const A& x, const char* what) {
    if (x.dtype() != nb::dtype<float>())
        throw nb::type_error((std::string(what) + " must be a float32 array").c_str());
    if (x.size() == 0) return;  // no element to address: any strides will do
    check_aligned(x, what);
    int64_t expect = 1;
    for (size_t d = x.ndim(); d-- > 0;) {
        if (x.shape(d) > 1 && x.stride(d) != expect)
            throw nb::value_error((std::string(what) + " must be C-contiguous").c_str());
        expect *= static_cast<int64_t>(x.shape(d));
    }
}

// ---- checked sizes ---------------------------------------------------------------------------
//
// Every size the entry points compute from attributes and shapes goes through these: a product
// or sum that overflows int64, or a buffer beyond a sane bound, is a ValueError whose message
// starts with "unsupported:" (the Python wrappers raise it as SessionError kind "unsupported")
// before anything is allocated.

// The most floats of any buffer the native code sizes or allocates itself (2 GiB, the core's
// plan limit); its thread-local work buffers keep far less (module.cpp).
constexpr int64_t MAX_FLOATS = int64_t(1) << 29;
// The most threads a call spreads over (as nms.cpp): more is clamped, fewer than 1 means 1.
constexpr int MAX_NATIVE_THREADS = 256;

[[noreturn]] inline void too_large(const char* what) {
    throw nb::value_error(
        (std::string("unsupported: ") + what + " overflows or exceeds the native bound").c_str());
}

inline int64_t mul(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) too_large(what);
    return r;
}

inline int64_t add(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) too_large(what);
    return r;
}

inline int64_t bounded(int64_t v, int64_t limit, const char* what) {
    if (v < 0 || v > limit) too_large(what);
    return v;
}

inline int clamp_threads(int threads) {
    return threads < 1 ? 1 : threads > MAX_NATIVE_THREADS ? MAX_NATIVE_THREADS : threads;
}

// The floats of a padded axis a window geometry reads: max(pad + n, (o - 1) * s + (k - 1) * d +
// 1), checked (every term >= 0 and o, k >= 1 by the callers' checks).
inline int64_t padded_extent(int64_t n, int64_t pad, int64_t k, int64_t stride, int64_t dil,
                             int64_t o) {
    const int64_t reach = add(add(mul(o - 1, stride, "the window reach"),
                                  mul(k - 1, dil, "the window reach"), "the window reach"),
                              1, "the window reach");
    return std::max(add(pad, n, "the padded extent"), reach);
}

inline std::string dims(const std::vector<int64_t>& v) {
    std::string out = "(";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
    return out + (v.size() == 1 ? ",)" : ")");
}

template <class A>
inline std::vector<int64_t> shape_of(const A& x) {
    std::vector<int64_t> out;
    for (size_t d = 0; d < x.ndim(); ++d) out.push_back(static_cast<int64_t>(x.shape(d)));
    return out;
}

inline int parse_activation(const std::string& name) {
    if (name == "none") return ACT_NONE;
    if (name == "relu") return ACT_RELU;
    if (name == "clip") return ACT_CLIP;
    if (name == "sigmoid") return ACT_SIGMOID;
    throw nb::value_error(("unknown activation '" + name + "'; expected none, relu, clip or sigmoid")
                              .c_str());
}

struct FreeDeleter {
    void operator()(float* p) const { std::free(p); }
};

// The most floats of a pool's per-thread work buffer (256 MiB: a ring of at least 2 planes' oh
// padded rows; a 4096 x 4096 image needs 32 Mi floats).
constexpr int64_t MAX_POOL_WORK = int64_t(1) << 26;

// A pool's window over h x w planes with oh x ow outputs, its attributes checked (module.cpp).
ConvShape pool_shape(const std::vector<int64_t>& kernel, const std::vector<int64_t>& strides,
                     const std::vector<int64_t>& dilations, const std::vector<int64_t>& pads,
                     size_t pads_size, int64_t h, int64_t w, int64_t oh, int64_t ow);

// The row layout of pool_driver.inc's pool2d (module.cpp): fills g (all but the divisor) and
// rows; returns the work buffer's floats, every step checked and bounded.
int64_t pool_layout(const ConvShape& s, int64_t wide, const char* what, AvgPoolGeometry& g,
                    std::vector<int64_t>& rows);

// The kernels pool2d runs on for s (module.cpp): avx512's or, for some narrow rows, avx2's.
const IsaKernels* narrow_pool_kernels(const IsaKernels* kern, const ConvShape& s,
                                      const AvgPoolGeometry& g);

// The convolution's class and entry points (conv_plan.cpp), registered on the module.
void bind_conv(nb::module_& m);

// NonMaxSuppression's entry point (nms.cpp), registered on the module.
void bind_nms(nb::module_& m);

// run() with the GIL held (a small call: releasing and taking it back costs more) or released.
template <class F>
void run_releasing_gil(bool small, const F& run) {
    if (small) {
        run();
        return;
    }
    nb::gil_scoped_release nogil;
    run();
}

}  // namespace graphrt_simd
