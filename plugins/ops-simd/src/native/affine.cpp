// graphrt_ops_simd._native.ChannelAffineCall: inference BatchNormalization, with or without the
// Relu after it, as one pass over memory (affine_driver.inc), planes spread over the plugin's
// threads.  Every argument is checked once, when the call is made (a plan binds one per run
// state); calling it only runs the kernel.
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "affine.h"
#include "binding.h"
#include "pool.h"

namespace graphrt_simd {

const AffineKernels& affine_kernels_of(const IsaKernels& kern) {
#if defined(GRAPHRT_SIMD_X86)
    if (&kern == &avx2_kernels) return avx2_affine;
    if (&kern == &avx512_kernels) return avx512_affine;
#endif
    (void)kern;
    return scalar_affine;
}

namespace {

// Elements from which the planes are spread over the threads, and up to which a one-thread
// call keeps the GIL (below, waking a worker or releasing the GIL costs about what the pass
// does: 2^15 floats are 256 KiB of traffic, a few microseconds).
constexpr int64_t AFFINE_PARALLEL = int64_t(1) << 15;
constexpr int64_t AFFINE_KEEP_GIL = int64_t(1) << 14;

// y = x * scale[c] + shift[c] (then max(0, y) for activation "relu") over a float32 (N, C, HW)
// x, C-contiguous; y has x's shape and is x itself or apart from it; scale and shift hold C
// floats.
class ChannelAffineCall {
public:
    ChannelAffineCall(InArray x, OutArray y, InArray scale, InArray shift,
                      const std::string& activation, const std::string& isa, int threads,
                      bool exact)
        : x_(x), y_(y), scale_(scale), shift_(shift),
          kern_(&affine_kernels_of(kernels_for(isa))) {
        check_matrix(x, "x", 3);
        check_matrix(y, "y", 3);
        check_flat(x, "x");
        check_flat(y, "y");
        const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
        if (xs != ys) throw nb::value_error(("y must have x's shape " + dims(xs) + ", got " +
                                             dims(ys)).c_str());
        if (y.data() != x.data()) check_no_overlap(y, x, "x unless it is x itself");
        const std::pair<const InArray*, const char*> vectors[] = {{&scale, "scale"},
                                                                  {&shift, "shift"}};
        for (const auto& [v, what] : vectors) {
            check_matrix(*v, what, 1);
            check_flat(*v, what);
            if (static_cast<int64_t>(v->shape(0)) != xs[1])
                throw nb::value_error((std::string(what) + " must hold one float per channel (" +
                                       std::to_string(xs[1]) + "), got " +
                                       std::to_string(v->shape(0)))
                                          .c_str());
            check_no_overlap(y, *v, what);
        }
        const int act = parse_activation(activation);
        if (act != ACT_NONE && act != ACT_RELU)
            throw nb::value_error("the channel affine takes activation none or relu");
        relu_ = act == ACT_RELU;
        if (exact && relu_)
            throw nb::value_error("the exact channel affine takes no activation");
        exact_ = exact;
        channels_ = xs[1];
        hw_ = xs[2];
        planes_ = mul(xs[0], xs[1], "the planes");
        const int64_t size = mul(planes_, hw_, "x's size");
        if (size == 0) planes_ = 0;  // nothing to write
        threads_ = clamp_threads(threads);
        if (size < AFFINE_PARALLEL) threads_ = 1;
        small_ = threads_ == 1 && size <= AFFINE_KEEP_GIL;
    }

    void operator()() const {
        if (planes_ == 0) return;
        const float* px = static_cast<const float*>(x_.data());
        float* py = static_cast<float*>(y_.data());
        const float* ps = static_cast<const float*>(scale_.data());
        const float* pt = static_cast<const float*>(shift_.data());
        const auto run = [&] {
            const int64_t blocks = threads_ > 1 ? std::min<int64_t>(planes_, 4 * threads_) : 1;
            // an element's arithmetic is its own: any split of the planes, the same bits
            NativePool::get().run(blocks, threads_, [&](int64_t i) {
                const int64_t per = planes_ / blocks, extra = planes_ % blocks;
                const int64_t lo = per * i + std::min(extra, i);
                const int64_t hi = per * (i + 1) + std::min(extra, i + 1);
                kern_->channel_affine(px, py, lo, hi, channels_, hw_, ps, pt, relu_, exact_);
            });
        };
        run_releasing_gil(small_, run);
    }

private:
    InArray x_;  // held: the kernel reads and writes through their pointers
    OutArray y_;
    InArray scale_, shift_;
    const AffineKernels* kern_;
    int64_t channels_ = 0, hw_ = 0, planes_ = 0;
    int threads_ = 1;
    bool relu_ = false, exact_ = false, small_ = false;
};

}  // namespace

void bind_affine(nb::module_& m) {
    nb::class_<ChannelAffineCall>(
        m, "ChannelAffineCall",
        "y = x * scale[c] + shift[c], then max(0, y) for activation 'relu', over a float32 "
        "C-contiguous (N, C, HW) x (y is x or apart from it; scale, shift: C floats), checked "
        "once; calling it runs one pass, planes spread over `threads` of the plugin's threads "
        "(the same bits for any count).  Fast mode: a fused multiply-add; exact: the product "
        "and the sum each rounded, a NaN canonical (0x7FC00000), no activation.")
        .def(nb::init<InArray, OutArray, InArray, InArray, const std::string&, const std::string&,
                      int, bool>(),
             nb::arg("x"), nb::arg("y"), nb::arg("scale"), nb::arg("shift"),
             nb::arg("activation"), nb::arg("isa"), nb::arg("threads") = 1,
             nb::arg("exact") = false)
        .def("__call__", &ChannelAffineCall::operator());
}

}  // namespace graphrt_simd
