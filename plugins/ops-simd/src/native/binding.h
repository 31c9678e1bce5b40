// What the binding files of graphrt_ops_simd._native share: the array types, the argument
// checks every entry point runs before a kernel touches memory, and the ISA lookup.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

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

template <class A>
inline void check_matrix(const A& x, const char* what, size_t ndim = 2) {
    if (x.dtype() != nb::dtype<float>())
        throw nb::type_error((std::string(what) + " must be a float32 array").c_str());
    if (x.ndim() != ndim)
        throw nb::value_error((std::string(what) + " must have " + std::to_string(ndim) +
                               " dimension(s), got " + std::to_string(x.ndim()))
                                  .c_str());
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
    int64_t expect = 1;
    for (size_t d = x.ndim(); d-- > 0;) {
        if (x.shape(d) > 1 && x.stride(d) != expect)
            throw nb::value_error((std::string(what) + " must be C-contiguous").c_str());
        expect *= static_cast<int64_t>(x.shape(d));
    }
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

// The convolution's class and entry points (conv_plan.cpp), registered on the module.
void bind_conv(nb::module_& m);

// NonMaxSuppression's entry point (nms.cpp), registered on the module.
void bind_nms(nb::module_& m);

}  // namespace graphrt_simd
