// LSTM, GRU and RNN in fast mode (graphrt_ops_simd.recurrent): the RnnPlan class, its argument
// checks and the sequence loop.  The cells are rnn_driver.inc's, one per ISA (rnn.h).
//
// A plan is made once per execution plan from the sizes and attributes; it fixes the packed
// weight layout (pack) and the work buffer layout (run), both caller-provided float32 arrays
// whose sizes it checks.  run is one native call for the whole node: the input projection of
// every time step and direction as one GEMM (the plugin's fast GEMM, biases in its epilogue),
// then per direction one loop over the steps, each step's panels on the plugin's threads when
// the product is large enough to pay for the hand-off, else on the calling thread; two
// directions run side by side on two threads.  Nothing is allocated per step.  Every size is
// binding.h's checked arithmetic; every argument is checked before anything is written.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "kernels.h"
#include "pool.h"
#include "rnn.h"

namespace graphrt_simd {

namespace {

// Multiply-adds of one step (all rows) from which its panels are split over the threads
// (bench/bench_transformers.py: below it the hand-off costs more than the half it saves).
constexpr int64_t STEP_SPLIT_MACS = int64_t(1) << 15;
// ... of the input projection, whose rows are then split in blocks of GEMM_ROWS ...
constexpr int64_t GEMM_SPLIT_MACS = int64_t(1) << 19;
// ... and of one direction's sequence, from which two directions run side by side.
constexpr int64_t DIRECTION_SPLIT_MACS = int64_t(1) << 18;
constexpr int64_t GEMM_ROWS = 12;  // a multiple of every ISA's micro-tile rows

const RnnKernels& rnn_kernels_of(const IsaKernels& isa) {
    const std::string name = isa.name;
    if (name == "scalar") return scalar_rnn;
#if defined(GRAPHRT_SIMD_X86)
    if (name == "avx2") return avx2_rnn;
    if (name == "avx512") return avx512_rnn;
#endif
    throw nb::value_error(("no recurrent kernels for isa '" + name + "'").c_str());
}

int parse_op(const std::string& op) {
    if (op == "RNN") return RNN_PLAIN;
    if (op == "GRU") return RNN_GRU;
    if (op == "LSTM") return RNN_LSTM;
    throw nb::value_error(("unknown recurrent operator '" + op + "'; expected RNN, GRU or LSTM")
                              .c_str());
}

template <class A>
void check_shape(const A& x, const char* what, const std::vector<int64_t>& want) {
    check_matrix(x, what, want.size());
    const std::vector<int64_t> got = shape_of(x);
    if (got != want)
        throw nb::value_error(
            (std::string(what) + " must have shape " + dims(want) + ", got " + dims(got)).c_str());
    check_flat(x, what);
}

template <class A>
const float* fdata(const A& x) {
    return static_cast<const float*>(x.data());
}

class RnnPlan {
public:
    RnnPlan(const std::string& op, const std::string& isa, int64_t input, int64_t hidden,
            const std::vector<bool>& reverse, int layout, std::optional<float> clip,
            bool linear_before_reset, bool input_forget, bool peepholes)
        : isa_(&kernels_for(isa)), rk_(&rnn_kernels_of(*isa_)), op_(parse_op(op)),
          reverse_(reverse), layout_(layout) {
        if (input < 0) throw nb::value_error("input_size must not be negative");
        if (hidden < 1) throw nb::value_error("hidden_size must be positive");
        if (reverse.size() != 1 && reverse.size() != 2)
            throw nb::value_error("reverse must list one or two directions");
        if (layout != 0 && layout != 1) throw nb::value_error("layout must be 0 or 1");
        if (clip && !(std::isfinite(*clip) && *clip > 0.0f))
            throw nb::value_error("clip must be a positive finite number");
        if (linear_before_reset && op_ != RNN_GRU)
            throw nb::value_error("linear_before_reset is a GRU attribute");
        if ((input_forget || peepholes) && op_ != RNN_LSTM)
            throw nb::value_error("input_forget and peepholes are LSTM attributes");
        clip_on_ = clip.has_value();
        clip_ = clip.value_or(0.0f);
        lbr_ = linear_before_reset;
        input_forget_ = input_forget;
        peep_ = peepholes;
        input_ = input;
        hidden_ = hidden;
        dirs_ = static_cast<int64_t>(reverse.size());
        gates_ = op_ == RNN_LSTM ? 4 : op_ == RNN_GRU ? 3 : 1;
        const int64_t w = rk_->width, nr = isa_->nr;
        if (w < 1 || nr % w != 0) throw nb::value_error("inconsistent recurrent kernel widths");
        // every extent below is checked: a hostile hidden_size fails here, not in a kernel
        panels_ = add(hidden, w - 1, "the hidden size") / w;
        hp_ = mul(panels_, w, "the padded hidden size");
        hq_ = mul(add(hidden, nr - 1, "the hidden size") / nr, nr, "the padded hidden size");
        cols_ = mul(mul(dirs_, gates_, "the projection"), hq_, "the projection");
        const int64_t wt = mul(cols_, input, "the packed W");
        r_per_ = mul(mul(gates_, hp_, "the packed R"), hidden, "the packed R");
        off_bias_ = wt;
        off_r_ = add(off_bias_, cols_, "the packed weights");
        off_peep_ = add(off_r_, mul(dirs_, r_per_, "the packed R"), "the packed weights");
        const int64_t peep = peep_ ? mul(dirs_, mul(3, hp_, "the peepholes"), "the peepholes") : 0;
        off_rbh_ = add(off_peep_, peep, "the packed weights");
        const int64_t rbh = lbr_ ? mul(dirs_, hp_, "Rbh") : 0;
        packed_ = bounded(add(off_rbh_, rbh, "the packed weights"), MAX_FLOATS,
                          "the packed weights");
    }

    int64_t packed_floats() const { return packed_; }

    // Floats of the work buffer of one run: XW, then per direction two H buffers, the LSTM's
    // C and the GRU's r (.) H(t-1) (each batch x Hp).
    int64_t work_floats(int64_t seq, int64_t batch) const {
        if (seq < 0 || batch < 0) throw nb::value_error("seq and batch must not be negative");
        const int64_t rows = mul(seq, batch, "the time steps");
        const int64_t xw = mul(rows, cols_, "the projection");
        const int64_t state = mul(mul(dirs_, batch, "the states"), hp_, "the states");
        int64_t total = add(xw, mul(2, state, "the states"), "the work buffer");
        if (op_ == RNN_LSTM || (op_ == RNN_GRU && !lbr_))
            total = add(total, state, "the work buffer");
        return bounded(total, MAX_FLOATS, "the work buffer");
    }

    void pack(const InArray& w, const InArray& r, std::optional<InArray> b,
              std::optional<InArray> p, OutArray out) const {
        const int64_t g = gates_, h = hidden_;
        check_shape(w, "W", {dirs_, g * h, input_});
        check_shape(r, "R", {dirs_, g * h, h});
        if (b) check_shape(*b, "B", {dirs_, 2 * g * h});
        if (p && !peep_) throw nb::value_error("this plan has no peepholes");
        if (peep_ && !p) throw nb::value_error("this plan needs the peepholes P");
        if (p) check_shape(*p, "P", {dirs_, 3 * h});
        check_shape(out, "out", {packed_});
        check_no_overlap(out, w, "W");
        check_no_overlap(out, r, "R");
        if (b) check_no_overlap(out, *b, "B");
        if (p) check_no_overlap(out, *p, "P");
        const float* pw = fdata(w);
        const float* pr = fdata(r);
        const float* pb = b ? fdata(*b) : nullptr;
        const float* pp = p ? fdata(*p) : nullptr;
        float* dst = static_cast<float*>(out.data());
        nb::gil_scoped_release nogil;
        pack_into(pw, pr, pb, pp, dst);
    }

    void run(const InArray& packed, const InArray& x, std::optional<InArray> lens,
             std::optional<InArray> h0, std::optional<InArray> c0, std::optional<OutArray> y,
             std::optional<OutArray> yh, std::optional<OutArray> yc, OutArray work,
             int threads) const {
        check_shape(packed, "packed", {packed_});
        check_matrix(x, "x", 3);
        check_flat(x, "x");
        const std::vector<int64_t> xs = shape_of(x);
        const int64_t seq = layout_ ? xs[1] : xs[0], batch = layout_ ? xs[0] : xs[1];
        if (xs[2] != input_)
            throw nb::value_error(("x has " + std::to_string(xs[2]) +
                                   " features, the plan was made for " + std::to_string(input_))
                                      .c_str());
        const int64_t need = work_floats(seq, batch);
        check_matrix(work, "work", 1);
        check_flat(work, "work");
        if (static_cast<int64_t>(work.shape(0)) < need)
            throw nb::value_error(("work must hold at least " + std::to_string(need) +
                                   " floats, got " + std::to_string(work.shape(0)))
                                      .c_str());
        const std::vector<int64_t> state =
            layout_ ? std::vector<int64_t>{batch, dirs_, hidden_}
                    : std::vector<int64_t>{dirs_, batch, hidden_};
        const std::vector<int64_t> yshape =
            layout_ ? std::vector<int64_t>{batch, seq, dirs_, hidden_}
                    : std::vector<int64_t>{seq, dirs_, batch, hidden_};
        if (h0) check_shape(*h0, "initial_h", state);
        if (c0 && op_ != RNN_LSTM) throw nb::value_error("initial_c is an LSTM input");
        if (c0) check_shape(*c0, "initial_c", state);
        if (y) check_shape(*y, "y", yshape);
        if (yh) check_shape(*yh, "y_h", state);
        if (yc && op_ != RNN_LSTM) throw nb::value_error("y_c is an LSTM output");
        if (yc) check_shape(*yc, "y_c", state);
        // what is written (work, y, y_h, y_c) overlaps nothing else
        std::vector<const InArray*> reads{&packed, &x};
        if (h0) reads.push_back(&*h0);
        if (c0) reads.push_back(&*c0);
        std::vector<std::pair<const OutArray*, const char*>> writes{{&work, "work"}};
        if (y) writes.push_back({&*y, "y"});
        if (yh) writes.push_back({&*yh, "y_h"});
        if (yc) writes.push_back({&*yc, "y_c"});
        for (size_t i = 0; i < writes.size(); ++i) {
            for (const InArray* in : reads) no_overlap(*writes[i].first, *in, writes[i].second);
            for (size_t j = i + 1; j < writes.size(); ++j)
                no_overlap(*writes[i].first, *writes[j].first, writes[i].second);
        }
        std::vector<int64_t> len(static_cast<size_t>(batch), seq);
        if (lens) read_lens(*lens, batch, seq, len);
        threads = clamp_threads(threads);

        Run run{};
        run.packed = fdata(packed);
        run.x = fdata(x);
        run.h0 = h0 ? fdata(*h0) : nullptr;
        run.c0 = c0 ? fdata(*c0) : nullptr;
        run.y = y ? static_cast<float*>(y->data()) : nullptr;
        run.yh = yh ? static_cast<float*>(yh->data()) : nullptr;
        run.yc = yc ? static_cast<float*>(yc->data()) : nullptr;
        run.work = static_cast<float*>(work.data());
        run.seq = seq;
        run.batch = batch;
        run.len = len.data();
        nb::gil_scoped_release nogil;
        execute(run, threads);
    }

private:
    struct Run {
        const float* packed;
        const float* x;
        const float* h0;
        const float* c0;
        float* y;
        float* yh;
        float* yc;
        float* work;
        int64_t seq, batch;
        const int64_t* len;
    };

    template <class A, class B>
    static void no_overlap(const A& out, const B& in, const char* what) {
        uintptr_t a0, a1, b0, b1;
        if (extent(out, a0, a1) && extent(in, b0, b1) && a0 < b1 && b0 < a1)
            throw nb::value_error((std::string(what) + " overlaps another argument").c_str());
    }

    static void read_lens(const InArray& lens, int64_t batch, int64_t seq,
                          std::vector<int64_t>& len) {
        const bool i32 = lens.dtype() == nb::dtype<int32_t>();
        if (!i32 && lens.dtype() != nb::dtype<int64_t>())
            throw nb::type_error("sequence_lens must be an int32 or int64 array");
        if (i32) check_aligned<int32_t>(lens, "sequence_lens", "int32");
        else check_aligned<int64_t>(lens, "sequence_lens", "int64");
        if (lens.ndim() != 1 || static_cast<int64_t>(lens.shape(0)) != batch)
            throw nb::value_error(("sequence_lens must have shape (" + std::to_string(batch) +
                                   ",)")
                                      .c_str());
        const int64_t stride = batch > 1 ? static_cast<int64_t>(lens.stride(0)) : 0;
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t v = i32 ? static_cast<const int32_t*>(lens.data())[b * stride]
                                  : static_cast<const int64_t*>(lens.data())[b * stride];
            if (v < 0 || v > seq)
                throw nb::value_error(("sequence_lens values must lie in [0, " +
                                       std::to_string(seq) + "]")
                                          .c_str());
            len[static_cast<size_t>(b)] = v;
        }
    }

    void pack_into(const float* w, const float* r, const float* b, const float* p,
                   float* dst) const {
        const int64_t g_n = gates_, h = hidden_, hp = hp_, hq = hq_, in = input_;
        const int64_t wd = rk_->width;
        const bool gru_split = op_ == RNN_GRU && !lbr_;
        for (int64_t d = 0; d < dirs_; ++d) {
            for (int64_t g = 0; g < g_n; ++g) {
                const int64_t block = d * g_n + g;
                // W's gate rows as the GEMM's B (input x hidden), columns padded to hq
                const float* wg = w + (block * h) * in;
                isa_->pack_b(in, h, Strided{wg, 1, static_cast<std::ptrdiff_t>(in)},
                             dst + block * hq * in);
                // the biases the projection adds: Wb + Rb (Wbh alone with linear_before_reset)
                float* bias = dst + off_bias_ + block * hq;
                for (int64_t j = 0; j < hq; ++j) {
                    float v = 0.0f;
                    if (b != nullptr && j < h) {
                        const float* bd = b + d * 2 * g_n * h;
                        v = bd[g * h + j];
                        if (!(lbr_ && g == 2)) v = v + bd[g_n * h + g * h + j];
                    }
                    bias[j] = v;
                }
            }
            // R in panels (rnn.h)
            float* rd = dst + off_r_ + d * r_per_;
            const float* src = r + d * g_n * h * h;
            const int64_t first[2] = {0, 2};
            const int64_t count[2] = {gru_split ? 2 : g_n, 1};
            for (int blk = 0; blk < (gru_split ? 2 : 1); ++blk) {
                const int64_t v_n = count[blk];
                float* out = rd + (blk == 0 ? 0 : 2 * hp * h);
                for (int64_t pnl = 0; pnl < panels_; ++pnl) {
                    for (int64_t k = 0; k < h; ++k) {
                        for (int64_t v = 0; v < v_n; ++v) {
                            float* lane = out + ((pnl * h + k) * v_n + v) * wd;
                            for (int64_t l = 0; l < wd; ++l) {
                                const int64_t j = pnl * wd + l;
                                lane[l] = j < h ? src[((first[blk] + v) * h + j) * h + k] : 0.0f;
                            }
                        }
                    }
                }
            }
            if (peep_) {  // i, o, f
                float* pd = dst + off_peep_ + d * 3 * hp;
                for (int64_t q = 0; q < 3; ++q) {
                    for (int64_t j = 0; j < hp; ++j)
                        pd[q * hp + j] = j < h ? p[d * 3 * h + q * h + j] : 0.0f;
                }
            }
            if (lbr_) {
                float* rb = dst + off_rbh_ + d * hp;
                for (int64_t j = 0; j < hp; ++j)
                    rb[j] = (b != nullptr && j < h) ? b[d * 6 * h + 5 * h + j] : 0.0f;
            }
        }
    }

    void execute(const Run& run, int threads) const {
        const int64_t seq = run.seq, batch = run.batch, h = hidden_, hp = hp_;
        const int64_t rows = seq * batch;  // bounded by work_floats
        float* xw = run.work;
        float* hbuf = xw + rows * cols_;
        const int64_t state = dirs_ * batch * hp;
        float* cbuf = op_ == RNN_LSTM ? hbuf + 2 * state : nullptr;
        float* tbuf = op_ == RNN_GRU && !lbr_ ? hbuf + 2 * state : nullptr;
        NativePool& pool = NativePool::get();

        // XW = X W^T + biases, every step and direction at once
        if (rows > 0) {
            Epilogue ep;
            ep.bias = run.packed + off_bias_;
            ep.bias_axis = BIAS_COL;
            const Strided a{run.x, static_cast<std::ptrdiff_t>(input_), 1};
            const int64_t blocks = (rows + GEMM_ROWS - 1) / GEMM_ROWS;
            const bool big = rows * cols_ >= GEMM_SPLIT_MACS / std::max<int64_t>(input_, 1);
            const int64_t parts = threads > 1 && big ? std::min<int64_t>(threads, blocks) : 1;
            pool.run(parts, threads, [&](int64_t i) {
                const int64_t lo = std::min(rows, blocks * i / parts * GEMM_ROWS);
                const int64_t hi = std::min(rows, blocks * (i + 1) / parts * GEMM_ROWS);
                isa_->gemm_fast(lo, hi, cols_, input_, a, run.packed, xw, cols_, &ep);
            });
        }

        // the initial states (zero where not given), padded lanes zero
        std::memset(hbuf, 0, static_cast<size_t>(2 * state) * sizeof(float));
        if (cbuf) std::memset(cbuf, 0, static_cast<size_t>(state) * sizeof(float));
        if (tbuf) std::memset(tbuf, 0, static_cast<size_t>(state) * sizeof(float));
        for (int64_t d = 0; d < dirs_; ++d) {
            for (int64_t b = 0; b < batch; ++b) {
                const int64_t at = state_index(d, b, batch);
                if (run.h0) std::memcpy(hbuf + (d * 2 * batch + b) * hp, run.h0 + at,
                                        static_cast<size_t>(h) * sizeof(float));
                if (run.c0) std::memcpy(cbuf + (d * batch + b) * hp, run.c0 + at,
                                        static_cast<size_t>(h) * sizeof(float));
            }
        }

        // below 2^58: rows * cols_ and the packed R (r_per_) are each at most MAX_FLOATS
        const int64_t dir_macs = rows * r_per_;
        if (dirs_ == 2 && threads >= 2 && dir_macs >= DIRECTION_SPLIT_MACS) {  // side by side
            pool.run(2, threads, [&](int64_t d) { direction(run, d, 1, xw, hbuf, cbuf, tbuf); });
        } else {
            for (int64_t d = 0; d < dirs_; ++d) direction(run, d, threads, xw, hbuf, cbuf, tbuf);
        }
    }

    int64_t state_index(int64_t d, int64_t b, int64_t batch) const {
        return (layout_ ? b * dirs_ + d : d * batch + b) * hidden_;
    }

    void direction(const Run& run, int64_t d, int threads, const float* xw, float* hbuf,
                   float* cbuf, float* tbuf) const {
        const int64_t seq = run.seq, batch = run.batch, h = hidden_, hp = hp_;
        const size_t h_bytes = static_cast<size_t>(h) * sizeof(float);
        const float* pk = run.packed;
        RnnCell cell{};
        cell.op = op_;
        cell.linear_before_reset = lbr_;
        cell.input_forget = input_forget_;
        cell.clip_on = clip_on_;
        cell.clip = clip_;
        cell.hidden = h;
        cell.panels = panels_;
        cell.xw_gate = hq_;
        cell.r = pk + off_r_ + d * r_per_;
        cell.r_h = op_ == RNN_GRU && !lbr_ ? cell.r + 2 * hp * h : nullptr;
        cell.peep = peep_ ? pk + off_peep_ + d * 3 * hp : nullptr;
        cell.rbh = lbr_ ? pk + off_rbh_ + d * hp : nullptr;
        const int phases = op_ == RNN_GRU && !lbr_ ? 2 : 1;
        const bool rev = reverse_[static_cast<size_t>(d)];
        const int64_t macs_per_row = gates_ * hp * h;
        std::vector<RnnRow> act(static_cast<size_t>(batch));
        NativePool& pool = NativePool::get();
        // one std::function for every step (a capturing lambda per step would allocate)
        int phase = 0;
        int64_t count = 0, parts = 1;
        bool backward = false;
        const std::function<void(int64_t)> part = [&](int64_t i) {
            rk_->step(cell, phase, panels_ * i / parts, panels_ * (i + 1) / parts, backward,
                      count, act.data());
        };
        for (int64_t s = 0; s < seq; ++s) {
            const int64_t t = rev ? seq - 1 - s : s;
            const int64_t cur = s & 1;
            float* hprev = hbuf + (d * 2 + cur) * batch * hp;
            float* hnew = hbuf + (d * 2 + (1 - cur)) * batch * hp;
            count = 0;
            for (int64_t b = 0; b < batch; ++b) {
                if (t < run.len[b]) {
                    const int64_t row = layout_ ? b * seq + t : t * batch + b;
                    act[static_cast<size_t>(count++)] =
                        RnnRow{xw + row * cols_ + d * gates_ * hq_, hprev + b * hp,
                               hnew + b * hp, cbuf ? cbuf + (d * batch + b) * hp : nullptr,
                               tbuf ? tbuf + (d * batch + b) * hp : nullptr};
                } else {  // past this entry's sequence: its state stays
                    std::memcpy(hnew + b * hp, hprev + b * hp,
                                static_cast<size_t>(hp) * sizeof(float));
                }
            }
            if (count > 0) {
                const bool split =
                    threads > 1 && panels_ > 1 && macs_per_row * count >= STEP_SPLIT_MACS;
                parts = split ? std::min<int64_t>(threads, panels_) : 1;
                // every other step walks its panels backwards: the panels read last are
                // still cached when R is larger than the cache (a cyclic walk misses on all)
                backward = (s & 1) != 0;
                for (phase = 0; phase < phases; ++phase) {
                    if (parts == 1)
                        rk_->step(cell, phase, 0, panels_, backward, count, act.data());
                    else
                        pool.run(parts, threads, part);
                }
            }
            if (run.y) {
                for (int64_t b = 0; b < batch; ++b) {
                    const int64_t at =
                        (layout_ ? (b * seq + t) * dirs_ + d : (t * dirs_ + d) * batch + b) * h;
                    if (t < run.len[b])
                        std::memcpy(run.y + at, hnew + b * hp, h_bytes);
                    else
                        std::memset(run.y + at, 0, h_bytes);
                }
            }
        }
        // the final states; zero for an entry without any step (onnxruntime's choice)
        const float* hlast = hbuf + (d * 2 + (seq & 1)) * batch * hp;
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t at = state_index(d, b, batch);
            const bool any = run.len[b] > 0;
            if (run.yh) {
                if (any) std::memcpy(run.yh + at, hlast + b * hp, h_bytes);
                else std::memset(run.yh + at, 0, h_bytes);
            }
            if (run.yc) {
                if (any) std::memcpy(run.yc + at, cbuf + (d * batch + b) * hp, h_bytes);
                else std::memset(run.yc + at, 0, h_bytes);
            }
        }
    }

    const IsaKernels* isa_;
    const RnnKernels* rk_;
    int op_;
    std::vector<bool> reverse_;
    int layout_;
    bool clip_on_ = false, lbr_ = false, input_forget_ = false, peep_ = false;
    float clip_ = 0.0f;
    int64_t input_ = 0, hidden_ = 0, dirs_ = 1, gates_ = 1;
    int64_t panels_ = 0, hp_ = 0, hq_ = 0, cols_ = 0, r_per_ = 0;
    int64_t off_bias_ = 0, off_r_ = 0, off_peep_ = 0, off_rbh_ = 0, packed_ = 0;
};

}  // namespace

void bind_rnn(nb::module_& m) {
    nb::class_<RnnPlan>(m, "RnnPlan",
                        "An LSTM, GRU or RNN node in fast mode for one ISA: its packed weight "
                        "layout and its sequence loop (src/native/rnn.cpp).")
        .def(nb::init<const std::string&, const std::string&, int64_t, int64_t,
                      const std::vector<bool>&, int, std::optional<float>, bool, bool, bool>(),
             nb::arg("op"), nb::arg("isa"), nb::arg("input_size"), nb::arg("hidden_size"),
             nb::arg("reverse"), nb::arg("layout") = 0, nb::arg("clip").none() = nb::none(),
             nb::arg("linear_before_reset") = false, nb::arg("input_forget") = false,
             nb::arg("peepholes") = false)
        .def_prop_ro("packed_floats", &RnnPlan::packed_floats)
        .def("work_floats", &RnnPlan::work_floats, nb::arg("seq"), nb::arg("batch"),
             "Floats of run's work buffer for these sizes.")
        .def("pack", &RnnPlan::pack, nb::arg("w"), nb::arg("r"),
             nb::arg("b").none() = nb::none(), nb::arg("p").none() = nb::none(),
             nb::arg("out"),
             "Pack ONNX's W, R, B and P (float32, C-contiguous) into out (packed_floats).")
        .def("run", &RnnPlan::run, nb::arg("packed"), nb::arg("x"),
             nb::arg("sequence_lens").none(), nb::arg("initial_h").none(),
             nb::arg("initial_c").none(), nb::arg("y").none(), nb::arg("y_h").none(),
             nb::arg("y_c").none(), nb::arg("work"), nb::arg("threads") = 1,
             "Run the node: y, y_h, y_c (each optional) from x and the packed weights; "
             "sequence_lens int32 or int64; work holds work_floats(seq, batch) floats.");
}

}  // namespace graphrt_simd
