// graphrt_ops_simd._native: NonMaxSuppression on float32 boxes, greedy per batch and class.
//
// The selection of graphrt_ops_basic.nms, box for box: per (batch, class) row the candidates
// (scores strictly above the threshold, or all of them) in descending score order, ties by
// ascending index, NaN scores last (-0 ties +0); a candidate is selected unless its IoU with a
// selected box is strictly above iou_threshold, until max_output_boxes_per_class are selected.
// The IoU is the same float32 operations in the same order (this file, like the others, is
// compiled with -ffp-contract=off): corners by numpy's NaN-propagating min/max, extents,
// inter = max(dx, 0) * max(dy, 0), union = (area_selected + area_candidate) - inter,
// inter / union > threshold.  Only the outcome of that comparison is used, and any NaN, or a
// zero of either sign where min/max could pick either, gives the same outcome in both.
//
// Per row the candidates are ordered a chunk at a time (select_row), so a small limit orders
// few of them; each candidate in turn is tested against the selected boxes sixteen at a time
// (IsaKernels::nms_suppressed, nms_driver.inc: vectorised with the path's registers).  Rows
// are independent: with threads > 1 they run on the plugin's pool, each into its own list,
// joined in row order, so the thread count never changes the output.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "pool.h"

namespace graphrt_simd {

namespace {

// numpy's maximum and minimum: a NaN in either operand gives NaN.
inline float np_max(float a, float b) { return (a >= b || a != a) ? a : b; }
inline float np_min(float a, float b) { return (a <= b || a != a) ? a : b; }

// A box as the IoU reads it: x_min, y_min, x_max, y_max and area, as graphrt_ops_basic.nms's
// _corners computes them.
struct Corners {
    std::vector<float> x1, y1, x2, y2, area;
    // n NaN boxes
    void reset(size_t n) {
        for (std::vector<float>* v : {&x1, &y1, &x2, &y2, &area})
            v->assign(n, std::numeric_limits<float>::quiet_NaN());
    }
};

// The rank of a score as an unsigned integer ordered as the floats (-0 as +0); NaN lowest.
inline uint32_t score_rank(float v) {
    v = v + 0.0f;  // -0 + 0 = +0 (never optimised away: IEEE, no fast-math)
    if (v != v) return 0;
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    int32_t s;
    std::memcpy(&s, &u, sizeof s);
    s ^= (s >> 31) & 0x7FFFFFFF;  // negative floats: reverse their order (arithmetic shift)
    return static_cast<uint32_t>(s) ^ 0x80000000u;
}

struct Problem {
    const float* boxes;
    int64_t box_b, box_i, box_k;  // element strides of boxes (batch, box, coordinate)
    const float* scores;
    int64_t score_b, score_c, score_i;
    int64_t batches, classes, n, limit;
    float iou, floor;
    bool has_floor;
    int center;
    const IsaKernels* isa;
};

// Box i of batch b as x_min, y_min, x_max, y_max, area (graphrt_ops_basic.nms._corners).
inline void corners_of(const Problem& p, int64_t b, int64_t i, float c[5]) {
    const float* r = p.boxes + b * p.box_b + i * p.box_i;
    const float r0 = r[0], r1 = r[p.box_k], r2 = r[2 * p.box_k], r3 = r[3 * p.box_k];
    if (p.center) {  // [x_center, y_center, width, height]
        const float hw = r2 / 2.0f, hh = r3 / 2.0f;
        c[0] = r0 - hw;
        c[1] = r1 - hh;
        c[2] = r0 + hw;
        c[3] = r1 + hh;
    } else {  // [y1, x1, y2, x2], any two diagonal corners
        c[0] = np_min(r1, r3);
        c[1] = np_min(r0, r2);
        c[2] = np_max(r1, r3);
        c[3] = np_max(r0, r2);
    }
    c[4] = (c[2] - c[0]) * (c[3] - c[1]);
}

// Elements a thread's buffers keep between calls (larger ones are freed after the row).
constexpr size_t KEEP_CAPACITY = 1 << 16;

// The selected boxes of row (b, c), in selection order.  The candidates' keys (rank, then
// the index reversed: distinct, larger first) are ordered a chunk at a time: the chunk's
// largest keys are split off (nth_element, linear) and sorted; the first chunk is sized to the
// limit, later ones double, so a small limit orders few boxes.
void select_row(const Problem& p, int64_t b, int64_t c, std::vector<int32_t>& out) {
    thread_local std::vector<uint64_t> keys;
    thread_local Corners kept;
    keys.clear();
    const float* s = p.scores + b * p.score_b + c * p.score_c;
    for (int64_t i = 0; i < p.n; ++i) {
        const float v = s[i * p.score_i];
        if (p.has_floor && !(v > p.floor)) continue;
        keys.push_back((static_cast<uint64_t>(score_rank(v)) << 32) |
                       (0xFFFFFFFFu - static_cast<uint32_t>(i)));
    }
    const size_t m = keys.size();
    // the selected boxes' corners, padded with NaN boxes (never suppress) to whole chunks
    const int64_t most = std::min<int64_t>(p.limit, static_cast<int64_t>(m));
    kept.reset(static_cast<size_t>((most + NMS_CHUNK - 1) / NMS_CHUNK * NMS_CHUNK));
    const float* const sel[5] = {kept.x1.data(), kept.y1.data(), kept.x2.data(),
                                 kept.y2.data(), kept.area.data()};
    int64_t count = 0;
    size_t chunk = static_cast<size_t>(std::max<int64_t>(16, p.limit + p.limit / 4));
    for (size_t pos = 0; pos < m && count < p.limit; pos += chunk, chunk *= 2) {
        const auto first = keys.begin() + pos;
        const auto mid = first + std::min(chunk, m - pos);
        if (mid != keys.end()) std::nth_element(first, mid - 1, keys.end(), std::greater<>());
        std::sort(first, mid, std::greater<>());
        for (auto q = first; q != mid && count < p.limit; ++q) {
            const int64_t i = 0xFFFFFFFFu - static_cast<uint32_t>(*q);
            float box[5];
            corners_of(p, b, i, box);
            if (p.isa->nms_suppressed(sel, count, box, p.iou)) continue;
            kept.x1[count] = box[0];
            kept.y1[count] = box[1];
            kept.x2[count] = box[2];
            kept.y2[count] = box[3];
            kept.area[count] = box[4];
            ++count;
            out.push_back(static_cast<int32_t>(i));
        }
        if (mid == keys.end()) break;
    }
    if (keys.capacity() > KEEP_CAPACITY) std::vector<uint64_t>().swap(keys);  // no hoarding
    if (kept.x1.capacity() > KEEP_CAPACITY) kept = Corners();
}

// Rows * boxes from which the rows are spread over the plugin's threads, and the most threads.
constexpr int64_t PARALLEL_SCORES = 1 << 14;
constexpr int64_t MAX_THREADS = 256;

template <class A>
void check_float3(const A& x, const char* what) {
    if (x.dtype() != nb::dtype<float>())
        throw nb::type_error((std::string(what) + " must be a float32 array").c_str());
    if (x.ndim() != 3)
        throw nb::value_error((std::string(what) + " must have 3 dimensions, got " +
                               std::to_string(x.ndim()))
                                  .c_str());
}

using Selected = nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>;

// [num_selected, 3] int64 rows [batch, class, box].
Selected nms(const InArray& boxes, const InArray& scores, int64_t max_per_class,
             float iou_threshold, std::optional<float> score_threshold, int center,
             const std::string& isa, int threads) {
    const IsaKernels& kern = kernels_for(isa);
    check_float3(boxes, "boxes");
    check_float3(scores, "scores");
    const std::vector<int64_t> bs = shape_of(boxes), ss = shape_of(scores);
    if (bs[2] != 4 || ss[0] != bs[0] || ss[2] != bs[1])
        throw nb::value_error(("boxes " + dims(bs) + " and scores " + dims(ss) +
                               " must be (batches, boxes, 4) and (batches, classes, boxes)")
                                  .c_str());
    for (const void* data : {boxes.data(), scores.data()})
        if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0)
            throw nb::value_error("boxes and scores must be aligned float32 arrays");
    if (bs[1] > std::numeric_limits<int32_t>::max())
        throw nb::value_error("more than 2**31 - 1 boxes");
    if (!(iou_threshold >= 0.0f && iou_threshold <= 1.0f))
        throw nb::value_error("iou_threshold must be in [0, 1]");
    if (center != 0 && center != 1) throw nb::value_error("center_point_box must be 0 or 1");
    Problem p;
    p.boxes = static_cast<const float*>(boxes.data());
    p.box_b = boxes.stride(0);
    p.box_i = boxes.stride(1);
    p.box_k = boxes.stride(2);
    p.scores = static_cast<const float*>(scores.data());
    p.score_b = scores.stride(0);
    p.score_c = scores.stride(1);
    p.score_i = scores.stride(2);
    p.batches = bs[0];
    p.classes = ss[1];
    p.n = bs[1];
    // at most n: with no boxes the rows are never counted (batches * classes could overflow
    // when scores has no elements; with some, it is at most their number)
    p.limit = std::min(std::max<int64_t>(max_per_class, 0), p.n);
    p.iou = iou_threshold;
    p.has_floor = score_threshold.has_value();
    p.floor = p.has_floor ? *score_threshold : 0.0f;
    p.center = center;
    p.isa = &kern;
    const int64_t rows = p.limit > 0 ? p.batches * p.classes : 0;
    std::vector<std::vector<int32_t>> picked;
    if (rows > 0) {
        nb::gil_scoped_release nogil;
        picked.resize(static_cast<size_t>(rows));
        // rows * n is scores' element count: no overflow
        const int split = rows * p.n >= PARALLEL_SCORES
                              ? static_cast<int>(std::clamp<int64_t>(
                                    std::min<int64_t>(threads, rows), 1, MAX_THREADS))
                              : 1;
        NativePool::get().run(rows, split, [&](int64_t r) {
            select_row(p, r / p.classes, r % p.classes, picked[r]);
        });
    }
    size_t total = 0;
    for (const auto& row : picked) total += row.size();
    std::unique_ptr<int64_t[]> data(new int64_t[std::max<size_t>(total, 1) * 3]);
    int64_t* w = data.get();
    for (int64_t r = 0; r < static_cast<int64_t>(picked.size()); ++r) {
        for (const int32_t i : picked[r]) {
            w[0] = r / p.classes;
            w[1] = r % p.classes;
            w[2] = i;
            w += 3;
        }
    }
    nb::capsule owner(data.get(), [](void* q) noexcept { delete[] static_cast<int64_t*>(q); });
    return Selected(data.release(), {total, 3}, owner);
}

}  // namespace

void bind_nms(nb::module_& m) {
    m.def("nms", &nms, nb::arg("boxes"), nb::arg("scores"), nb::arg("max_output_boxes_per_class"),
          nb::arg("iou_threshold"), nb::arg("score_threshold").none(),
          nb::arg("center_point_box"), nb::arg("isa"), nb::arg("threads") = 1,
          "NonMaxSuppression of float32 boxes (batches, boxes, 4) and scores (batches, classes, "
          "boxes), any strides: [num_selected, 3] int64 rows [batch, class, box], the greedy "
          "selection of graphrt_ops_basic.nms on every isa (thresholds as float32; "
          "score_threshold None: every box is a candidate); rows spread over `threads` of the "
          "plugin's threads.");
}

}  // namespace graphrt_simd
