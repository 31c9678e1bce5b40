// graphrt_ops_simd._native: the fast-mode entry points of fast.h -- scaled dot-product
// attention in one call for every batch and head, the fast element-wise functions (Gelu on a
// rational erf) and LayerNormalization over rows.
//
// Every argument is checked before a kernel runs (dtypes, ranks, shapes that agree, an output
// that neither overlaps an input nor itself, the mask's broadcast axes) and every size the
// kernels use (the per-thread work buffer, the number of work items) is computed with
// binding.h's checked arithmetic and bounded.  Kernels run with the GIL released, on the
// plugin's own threads.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.h"
#include "fast.h"
#include "pool.h"

namespace graphrt_simd {

const FastKernels& fast_kernels_of(const IsaKernels& kern) {
#if defined(GRAPHRT_SIMD_X86)
    if (&kern == &avx2_kernels) return avx2_fast;
    if (&kern == &avx512_kernels) return avx512_fast;
#endif
    (void)kern;
    return scalar_fast;
}

namespace {

// The fast kernels of an ISA this CPU and OS can run (kernels_for raises otherwise).
const FastKernels& fast_for(const std::string& isa) { return fast_kernels_of(kernels_for(isa)); }

// The most floats of one thread's attention work buffer (256 MiB), and the most one thread
// keeps between calls (16 MiB); larger buffers are freed after the call.
constexpr int64_t MAX_ATTENTION_WORK = int64_t(1) << 26;
constexpr size_t MAX_ATTENTION_KEEP = size_t(1) << 22;

// Whether no two indices of x's elements share an address (sorted by stride, each axis steps
// past everything the smaller ones span).
template <class A>
bool disjoint_layout(const A& x) {
    std::vector<std::pair<int64_t, int64_t>> axes;  // (|stride|, extent)
    for (size_t d = 0; d < x.ndim(); ++d) {
        const int64_t len = static_cast<int64_t>(x.shape(d));
        if (len == 0) return true;
        if (len > 1) axes.emplace_back(std::llabs(static_cast<int64_t>(x.stride(d))), len);
    }
    std::sort(axes.begin(), axes.end());
    int64_t span = 1;  // elements spanned by the axes so far, plus one
    for (const auto& [stride, len] : axes) {
        if (stride < span) return false;
        span = add(mul(stride, len - 1, "the output's span"), span, "the output's span");
    }
    return true;
}

std::string shape_text(const std::vector<int64_t>& v) { return dims(v); }

[[noreturn]] void bad(const std::string& message) { throw nb::value_error(message.c_str()); }

void strides_of(const InArray& x, int64_t* out) {
    for (size_t d = 0; d < 4; ++d) out[d] = x.shape(d) > 1 ? static_cast<int64_t>(x.stride(d)) : 0;
}

// y = softmax(scale * q k^T + mask) v per batch and head (fast.h, AttentionShape).
void attention(const InArray& q, const InArray& k, const InArray& v, std::optional<InArray> mask,
               OutArray y, float scale, const std::string& isa, int threads) {
    const FastKernels& kern = fast_for(isa);
    check_matrix(q, "q", 4);
    check_matrix(k, "k", 4);
    check_matrix(v, "v", 4);
    check_matrix(y, "y", 4);
    const std::vector<int64_t> qs = shape_of(q), ks = shape_of(k), vs = shape_of(v),
                               ys = shape_of(y);
    const int64_t b = qs[0], hq = qs[1], q_len = qs[2], d = qs[3];
    const int64_t hkv = ks[1], kv_len = ks[2], dv = vs[3];
    if (ks[0] != b || vs[0] != b)
        bad("q " + shape_text(qs) + ", k " + shape_text(ks) + " and v " + shape_text(vs) +
            " must have one batch size");
    if (ks[3] != d) bad("k " + shape_text(ks) + " must have q's head size " + std::to_string(d));
    if (vs[1] != hkv || vs[2] != kv_len)
        bad("v " + shape_text(vs) + " must have k's heads and length " + shape_text(ks));
    if (hkv < 1 || hq % hkv != 0)
        bad("q's " + std::to_string(hq) + " heads are not a multiple of k's " +
            std::to_string(hkv));
    const std::vector<int64_t> want_y{b, hq, q_len, dv};
    if (ys != want_y) bad("y must have shape " + shape_text(want_y) + ", got " + shape_text(ys));
    if (!disjoint_layout(y)) bad("y's elements must not share memory");
    check_no_overlap(y, q, "q");
    check_no_overlap(y, k, "k");
    check_no_overlap(y, v, "v");
    AttentionShape s{};
    s.b = b, s.hq = hq, s.hkv = hkv, s.q_len = q_len, s.kv_len = kv_len, s.d = d, s.dv = dv;
    strides_of(q, s.qs);
    strides_of(k, s.ks);
    strides_of(v, s.vs);
    for (size_t i = 0; i < 4; ++i) s.ys[i] = static_cast<int64_t>(y.stride(i));
    const float* pm = nullptr;
    if (mask) {
        check_matrix(*mask, "mask", 4);
        const std::vector<int64_t> ms = shape_of(*mask), full{b, hq, q_len, kv_len};
        for (size_t i = 0; i < 4; ++i) {
            if (ms[i] != 1 && ms[i] != full[i])
                bad("mask " + shape_text(ms) + " does not broadcast to (" + std::to_string(b) +
                    ", " + std::to_string(hq) + ", " + std::to_string(q_len) + ", " +
                    std::to_string(kv_len) + ")");
        }
        check_no_overlap(y, *mask, "mask");
        strides_of(*mask, s.ms);
        pm = static_cast<const float*>(mask->data());
    }
    s.scale = scale;
    threads = clamp_threads(threads);
    const int64_t heads = mul(b, hq, "the attention heads");
    if (heads == 0 || q_len == 0 || dv == 0) return;  // nothing to write
    // work items: enough for the threads (about four each), in row blocks of whole tiles
    const int64_t per_head = std::max<int64_t>(1, (int64_t(4) * threads + heads - 1) / heads);
    const int64_t tile = kern.amr;
    const int64_t rows = std::max<int64_t>(tile, ((q_len + per_head - 1) / per_head + tile - 1) /
                                                     tile * tile);
    s.rows = rows;
    s.row_blocks = (q_len + rows - 1) / rows;
    const int64_t items = mul(heads, s.row_blocks, "the attention work items");
    // the work buffer: packed keys, packed values, scores, row sums, scratch
    const char* what = "the attention work buffer";
    const int64_t nr = kern.anr;
    s.srow = mul(add(kv_len, nr - 1, what) / nr, nr, what);
    const int64_t v_cols = mul(add(dv, nr - 1, what) / nr, nr, what);
    s.kt = 0;
    s.vp = mul(s.srow, d, what);
    s.scores = add(s.vp, mul(v_cols, kv_len, what), what);
    s.inv = add(s.scores, mul(tile, s.srow, what), what);
    s.tmp = add(s.inv, tile, what);
    s.work = bounded(add(s.tmp, 2 * nr, what), MAX_ATTENTION_WORK, what);
    const float* pq = static_cast<const float*>(q.data());
    const float* pk = static_cast<const float*>(k.data());
    const float* pv = static_cast<const float*>(v.data());
    float* py = static_cast<float*>(y.data());
    nb::gil_scoped_release nogil;
    NativePool::get().run(items, threads, [&](int64_t i) {
        thread_local std::vector<float> work;
        work.resize(static_cast<size_t>(s.work));
        kern.attention(s, pq, pk, pv, pm, py, i, work.data());
        if (work.capacity() > MAX_ATTENTION_KEEP) std::vector<float>().swap(work);  // no hoarding
    });
}

int parse_fast(const std::string& name) {
    if (name == "gelu") return FAST_GELU;
    if (name == "erf") return FAST_ERF;
    bad("unknown fast function '" + name + "'; expected gelu or erf");
}

// Elements per block of unary_fast over the threads, at most (blocks are the range in equal
// parts, a multiple of 64 elements each, so two threads get equal shares).
constexpr int64_t FAST_BLOCK = 1 << 16;

// out.flat[begin:end] = fn(x.flat[begin:end]); out is x itself (in place) or apart from it.
void unary_fast(const std::string& fn, const InArray& x, OutArray out, const std::string& isa,
                int64_t begin, int64_t end, int threads) {
    const int op = parse_fast(fn);
    const FastKernels& kern = fast_for(isa);
    check_flat(x, "x");
    check_flat(out, "out");
    const int64_t n = static_cast<int64_t>(x.size());
    if (static_cast<int64_t>(out.size()) != n)
        bad("out has " + std::to_string(out.size()) + " elements, x has " + std::to_string(n));
    if (out.data() != x.data()) check_no_overlap(out, x, "x unless it is x itself");
    if (end == -1) end = n;
    if (begin < 0 || begin > end || end > n)
        bad("element range [" + std::to_string(begin) + ", " + std::to_string(end) +
            ") is not inside [0, " + std::to_string(n) + ")");
    const float* px = static_cast<const float*>(x.data()) + begin;
    float* py = static_cast<float*>(out.data()) + begin;
    threads = clamp_threads(threads);
    const int64_t count = end - begin;
    if (count == 0) return;
    int64_t blocks = 1, size = count;
    if (threads > 1) {
        const int64_t rounds = (count + int64_t(threads) * FAST_BLOCK - 1) / (int64_t(threads) * FAST_BLOCK);
        blocks = int64_t(threads) * rounds;
        size = ((count + blocks - 1) / blocks + 63) / 64 * 64;
        blocks = (count + size - 1) / size;
    }
    nb::gil_scoped_release nogil;
    // every element's operations are its own: any split gives the same bits
    NativePool::get().run(blocks, threads, [&](int64_t i) {
        const int64_t lo = i * size;
        const int64_t hi = std::min(count, lo + size);
        kern.unary_fast(op, px + lo, py + lo, hi - lo);
    });
}

// Elements from which layer_norm spreads its rows over the threads (below, waking a worker
// costs about what the rows do: a (128, 384) tensor takes 10-20 us on one thread).
constexpr int64_t NORM_PARALLEL = int64_t(1) << 18;

// x and y of a row-wise kernel: float32 (rows, n) matrices, C-contiguous, of one shape, y x
// itself or apart from it; returns (rows, n).
std::pair<int64_t, int64_t> checked_rows(const InArray& x, const OutArray& y) {
    check_matrix(x, "x");
    check_matrix(y, "y");
    check_flat(x, "x");
    check_flat(y, "y");
    const std::vector<int64_t> xs = shape_of(x), ys = shape_of(y);
    if (xs != ys) bad("y must have x's shape " + shape_text(xs) + ", got " + shape_text(ys));
    if (y.data() != x.data()) check_no_overlap(y, x, "x unless it is x itself");
    return {xs[0], xs[1]};
}

// fn(lo, hi) over rows [0, rows) in up to `threads` equal blocks from NORM_PARALLEL elements on
// (else one), the GIL released: rows are independent, so any split gives the same bits.
template <class Fn>
void run_rows(int64_t rows, int64_t n, int threads, const Fn& fn) {
    const int64_t blocks =
        threads > 1 && mul(rows, n, "x's size") >= NORM_PARALLEL ? std::min<int64_t>(rows, threads) : 1;
    nb::gil_scoped_release nogil;
    NativePool::get().run(blocks, threads, [&](int64_t i) {
        const int64_t per = rows / blocks, extra = rows % blocks;
        fn(per * i + std::min(extra, i), per * (i + 1) + std::min(extra, i + 1));
    });
}

// y = LayerNormalization(x) over the last axis of a C-contiguous (rows, n) x; y is x itself or
// apart from it; scale and bias (or None) are C-contiguous with n elements or one.
void layer_norm(const InArray& x, OutArray y, const InArray& scale, std::optional<InArray> bias,
                float eps, const std::string& isa, int threads) {
    const FastKernels& kern = fast_for(isa);
    const auto [rows, n] = checked_rows(x, y);
    const auto vector_of = [&, n = n](const InArray& v, const char* what) -> int64_t {
        check_matrix(v, what, 1);
        check_flat(v, what);
        const int64_t len = static_cast<int64_t>(v.shape(0));
        if (len != n && len != 1)
            bad(std::string(what) + " must have " + std::to_string(n) + " elements or one, got " +
                std::to_string(len));
        check_no_overlap(y, v, what);
        return len == n && n > 1 ? 1 : 0;
    };
    const int64_t scale_step = vector_of(scale, "scale");
    const int64_t bias_step = bias ? vector_of(*bias, "bias") : 0;
    const float* px = static_cast<const float*>(x.data());
    float* py = static_cast<float*>(y.data());
    const float* ps = static_cast<const float*>(scale.data());
    const float* pb = bias ? static_cast<const float*>(bias->data()) : nullptr;
    threads = clamp_threads(threads);
    if (rows == 0 || n == 0) return;  // nothing to write
    run_rows(rows, n, threads, [&, n = n](int64_t lo, int64_t hi) {
        kern.layer_norm(px, py, lo, hi, n, ps, scale_step, pb, bias_step, eps);
    });
}

// y = Softmax(x) over the last axis of a C-contiguous float32 (rows, n) x; y is x itself or
// apart from it.
void softmax(const InArray& x, OutArray y, const std::string& isa, int threads) {
    const FastKernels& kern = fast_for(isa);
    const auto [rows, n] = checked_rows(x, y);
    const float* px = static_cast<const float*>(x.data());
    float* py = static_cast<float*>(y.data());
    threads = clamp_threads(threads);
    if (rows == 0 || n == 0) return;
    run_rows(rows, n, threads,
             [&, n = n](int64_t lo, int64_t hi) { kern.softmax(px, py, lo, hi, n); });
}

}  // namespace

void bind_attention(nb::module_& m) {
    m.def("attention", &attention, nb::arg("q"), nb::arg("k"), nb::arg("v"),
          nb::arg("mask").none(), nb::arg("y"), nb::arg("scale"), nb::arg("isa"),
          nb::arg("threads") = 1,
          "y = softmax(scale * q @ k^T + mask) @ v for float32 (batch, heads, length, size) "
          "arrays of any strides (query head h reads key/value head h // (hq // hkv)); the "
          "mask (additive, its axes 1 or full) may be None; a row whose mask is -inf "
          "everywhere gives 0.  Fast mode: fused multiply-adds, a polynomial exp.");
    m.def("unary_fast", &unary_fast, nb::arg("fn"), nb::arg("x"), nb::arg("out"), nb::arg("isa"),
          nb::arg("begin") = 0, nb::arg("end") = -1, nb::arg("threads") = 1,
          "out.flat[begin:end] = fn(x.flat[begin:end]) for fn in gelu, erf on a rational erf "
          "(fast mode; float32, C-contiguous, out is x or apart from it); NaN -> 0x7FC00000.");
    m.def("layer_norm", &layer_norm, nb::arg("x"), nb::arg("y"), nb::arg("scale"),
          nb::arg("bias").none(), nb::arg("eps"), nb::arg("isa"), nb::arg("threads") = 1,
          "y = (x - mean) / sqrt(var + eps) * scale + bias over the rows of a C-contiguous "
          "float32 (rows, n) x (y is x or apart from it; scale, bias: n elements or one, bias "
          "may be None).  Fast mode: fused multiply-adds.");
    m.def("softmax", &softmax, nb::arg("x"), nb::arg("y"), nb::arg("isa"), nb::arg("threads") = 1,
          "y = exp(x - max) / sum(exp(x - max)) over the rows of a C-contiguous float32 (rows, "
          "n) x (y is x or apart from it).  Fast mode: a polynomial exp; a NaN or an infinity "
          "makes its row NaN.");
}

}  // namespace graphrt_simd
