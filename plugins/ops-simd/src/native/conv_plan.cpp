// graphrt_ops_simd._native: the planned 2-D convolution (ConvPlan) and its entry points.
//
// A plan checks the geometry once, packs the weight per group and cuts the work into units by
// shapes alone; stage() and run() check their arrays completely, then release the GIL and run
// the units on the plugin's threads.  docs/kernels-gemm.md, "Fast convolution".
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <utility>

#include "binding.h"
#include "conv_choice.h"
#include "pool.h"

#if defined(__linux__)
#include <sys/mman.h>  // madvise: huge pages for large packed weights
#endif

namespace graphrt_simd {

namespace {

// offs[kk] = kk * step for every kk (one channel plane after another: 1x1 kernels): that step,
// else 0 (DirectShape::kstep).
static int64_t uniform_step(const std::vector<int64_t>& offs) {
    if (offs.size() < 2 || offs[0] != 0 || offs[1] == 0) return 0;
    const int64_t step = offs[1];
    for (size_t kk = 2; kk < offs.size(); ++kk)
        if (offs[kk] != static_cast<int64_t>(kk) * step) return 0;
    return step;
}

// Bytes of packed weights per unit's chunk of output channels (see the constructor).
constexpr int64_t DIRECT_CHUNK_BYTES = 384 * 1024;
constexpr int64_t LANES_CHUNK_BYTES = 768 * 1024;

// Packed weights from HUGE_PACK_BYTES on are aligned to (and advised onto) huge pages.
constexpr size_t HUGE_PAGE_BYTES = size_t(2) << 20;
constexpr size_t HUGE_PACK_BYTES = size_t(4) << 20;

// Channels per staging block (stage() spreads them over the plugin's threads).
constexpr int64_t STAGE_CHANNELS = 16;

// The Winograd kernel's units: blocks of this many tiles (a multiple of every ISA's nr) by
// chunks of output channels of about WINO_ROWS (whole slivers of mr), so that one thread's
// 16 products (16 x 64 x 64 floats, 256 KiB) stay in L2 until A^T M A reads them.
constexpr int64_t WINO_TILES = 64;
constexpr int64_t WINO_ROWS = 64;
// ... but chunks as small as one sliver where that makes fewer than WINO_UNITS units (a 13 x 13
// map is one block of tiles: 256 channels in four chunks left one of two threads idle a
// quarter of the time), and the transform in at least WINO_STAGE_ITEMS pieces.
constexpr int64_t WINO_UNITS = 8;
constexpr int64_t WINO_STAGE_ITEMS = 8;
// One thread's chunk of V (the transform of a few panels of tiles, multiplied right after) at
// most this many floats (512 KiB: with a unit's products (256 KiB) and U it stays in a 1 MiB
// L2; against 256 KiB, one thread, Zen 5: 128->128 on 28 x 28 690 -> 660 us, 64->64 on 56 x 56
// 750 -> 737, 32->128 on 27 x 27 even, 16->64 on 55 x 55 243 -> 251; light_vgg19 and
// light_resnet50 B/A 0.98 and 0.99, light_squeezenet 1.00).
constexpr int64_t WINO_CHUNK_FLOATS = int64_t(1) << 17;
constexpr int64_t WINO_STAGE_FLOATS = int64_t(1) << 20;
// A whole call on several threads without chunks transforms and multiplies per thread from this
// many panels of tiles a thread (ConvPlan::call_at).
constexpr int64_t WINO_FUSED_MIN_PANELS = 3;

// Floats from one of V's 16 matrices to the next for c channels of `tiles` tiles: the matrices
// 320 bytes apart modulo 4 KiB, not at one offset (a 64 -> 64 layer on 56 x 56 has matrices of
// exactly 52 pages): the transform's 16 streams of stores would share L1 sets.
inline int64_t wino_vmat(int64_t c, int64_t tiles) { return (c * tiles + 1023) / 1024 * 1024 + 80; }


// One thread's buffers, allocated on first use, grown as needed and kept: a fresh 256 KiB
// allocation per call would be an mmap and page faults every time.
enum ThreadBuffer {
    CONV_BLOCK,
    WINO_PRODUCTS,
    WINO_PADDED_ROWS,
    CONV_POOL_BAND,
    CONV_POOL_WORK,
    WINO_CHUNK,
    THREAD_BUFFERS
};
float* thread_floats(ThreadBuffer which, int64_t floats) {
    thread_local std::unique_ptr<float, FreeDeleter> bufs[THREAD_BUFFERS];
    thread_local int64_t have[THREAD_BUFFERS] = {};
    if (floats > have[which]) {
        const size_t bytes = static_cast<size_t>((floats + 15) / 16 * 16) * sizeof(float);
        bufs[which].reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
        have[which] = bufs[which] ? floats : 0;
        if (!bufs[which]) throw std::bad_alloc();
    }
    return bufs[which].get();
}

// One thread's block of columns (CONV_KC x CONV_NCB floats).
float* conv_block() { return thread_floats(CONV_BLOCK, CONV_KC * CONV_NCB); }

// A convolution planned once: geometry checked, the weight packed per group, and the work cut
// into units (image, group, chunk of output channels, block of positions) by shapes alone.
// choose_conv_kernel() (conv_choice.cpp) picks one of five kernels (packed, direct, lanes,
// stream, winograd); direct, lanes and winograd read a copy of the image that stage() makes
// once per run.
class ConvPlan {
public:
    ConvPlan(const InArray& w, int64_t group, const std::vector<int64_t>& x_shape,
             const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
             const std::vector<int64_t>& pads, const std::vector<int64_t>& out,
             const std::string& isa, const std::string& kernel, bool exact,
             const std::string& tuning, int64_t x_block, bool y_blocked)
        : isa_(&kernels_for(isa)), group_(group), exact_(exact) {
        x_block_ = x_block, y_blocked_ = y_blocked;
        const ConvTuning rules = conv_tuning_named(tuning);
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
        if (group < 1 || m_ < 1 || ws[1] < 1 || x_shape[1] % group || m_ % group ||
            ws[1] != x_shape[1] / group || ws[2] < 1 || ws[3] < 1)
            throw nb::value_error(("w " + dims(ws) + " does not fit x " + dims(x_shape) + " in " +
                                   std::to_string(group) + " group(s)")
                                      .c_str());
        ConvShape& s = shape_;
        s = ConvShape{ws[1], x_shape[2], x_shape[3], ws[2], ws[3], strides[0], strides[1],
                      dilations[0], dilations[1], pads[0], pads[1], out[0], out[1]};
        mg_ = m_ / group;
        // checked sizes: every offset the kernels form below stays inside these extents
        k_ = bounded(mul(mul(s.c, s.kh, "the window depth"), s.kw, "the window depth"),
                     MAX_FLOATS, "the window depth");
        x_h_ = s.h, x_w_ = s.w, y_h_ = s.oh, y_w_ = s.ow;
        int64_t hp = padded_extent(s.h, s.ph, s.kh, s.sh, s.dh, s.oh);
        int64_t wp = padded_extent(s.w, s.pw, s.kw, s.sw, s.dw, s.ow);
        bounded(mul(s.oh, s.ow, "the output positions"), MAX_FLOATS, "the output positions");
        bounded(mul(mul(s.h, s.w, "the input plane"), s.c, "the input planes"), MAX_FLOATS,
                "the input planes");
        in_h_ = s.h, in_w_ = s.w;
        // A strided 1x1 kernel without pads reads every sh-th row and sw-th column of x and
        // nothing else: stage() copies those (subsample_at) and the plan is a plain 1x1 on the
        // copy, the kernel chosen for that.  Read in place, the strided rows and columns
        // cost the packed kernel's column packing and the lanes kernel's lines (light_resnet50's
        // 1x1/2 256->512 on 56 x 56, two threads: 513 us strided, 427 + the copy plain).
        sub_ = s.kh == 1 && s.kw == 1 && !s.ph && !s.pw && (s.sh > 1 || s.sw > 1) &&
               (s.oh - 1) * s.sh < s.h && (s.ow - 1) * s.sw < s.w &&  // no pads after either
               !x_block_ && !y_blocked_;
        if (sub_) {
            sub_sh_ = s.sh, sub_sw_ = s.sw;
            s.h = s.oh, s.w = s.ow, s.sh = s.sw = s.dh = s.dw = 1;
            x_h_ = hp = s.h, x_w_ = wp = s.w;
            bounded(mul(mul(mul(s.h, s.w, "the subsampled image"), s.c * group_,
                            "the subsampled image"),
                        n_, "the subsampled image"),
                    MAX_FLOATS, "the subsampled image");
        }
        if (y_blocked_ || x_block_) check_blocked(group);
        // a blocked output is the lanes kernel's bands (conv_blocked.inc), stored as they are
        mode_ = y_blocked_ ? LANES : choose_conv_kernel(shape_, mg_, *isa_, exact_, kernel, rules);
        packed_pairs_ = rules == FULL512;
        if (mode_ == WINO) {
            plan_winograd(w);
            return;
        }
        if (staged() && s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && !s.ph && !s.pw &&
            s.oh == s.h && s.ow == s.w) {
            // a plain 1x1 kernel sees each plane as one row of h * w positions (stage() lays
            // x's rows end to end): channels in lanes cut it into pieces of about crt
            // positions instead of 7 x 7 maps' rows of 7, each weight read fewer times
            // (light_inception_v2's 1x1 1024->128 on 7 x 7: 153 -> 123 us).  The packed and
            // stream kernels flatten the rows at run time, when x's rows lie w floats apart.
            flat_ = true;
            s.w = s.ow = wp = s.h * s.w;
            s.h = s.oh = hp = 1;
        }
        // the lanes kernel's channel tiles are one vector (avx2: 8 channels, not the 6 rows of
        // the micro-tile)
        cmr_ = mode_ == LANES ? isa_->lmr : isa_->cmr;
        const int64_t cmr = cmr_, cnr = isa_->cnr;
        tiles_ = (mg_ + cmr - 1) / cmr;
        per_group_ = mul(mul(tiles_, cmr, "the packed weight"), k_, "the packed weight");
        bounded(mul(per_group_, group_, "the packed weight"), MAX_FLOATS, "the packed weight");
        bounded(mul(m_, k_, "the weight"), MAX_FLOATS, "the weight");
        pack_weight(w);
        // The direct and lanes kernels run the whole depth per tile: the output channels of a
        // unit are a chunk of the packed weight that stays in L2 (384 KiB).  The packed path
        // blocks the depth itself, and a second chunk would pack the same columns again.
        // The lanes kernel runs up to four channel tiles at once over every position of the
        // unit: a chunk of up to 768 KiB of weights (light_resnet50's 3x3 256->256: four
        // tiles, 512->512: two) still stays in a 1 MiB L2.
        const int64_t budget = mode_ == LANES ? LANES_CHUNK_BYTES : DIRECT_CHUNK_BYTES;
        const int64_t fit = (budget / 4) / (k_ * cmr);
        int64_t per_chunk = mode_ == PACKED ? tiles_ : fit < 1 ? 1 : std::min(fit, tiles_);
        lanes_kb_ = k_;
        const int64_t multi = isa_->lanes_multi;
        if (mode_ == LANES && !y_blocked_ && fit < multi && tiles_ >= multi &&
            !LanesTiling(s.oh, s.ow, isa_->crt).narrow) {
            // A window too deep for four channel tiles in the budget (3x3 512->512: 4608
            // steps, 1.2 MiB) ran in pairs, with 9 loads per 14 multiply-adds against a quad's
            // 10 per 24; now quads (avx2: pairs) run the depth in equal blocks whose weights
            // fit it.
            const int64_t steps = (budget / 4) / (multi * cmr);
            const int64_t blocks = (k_ + steps - 1) / steps;
            lanes_kb_ = (k_ + blocks - 1) / blocks;
            per_chunk = multi;  // chunks of `multi` tiles (the last one what is left)
        }
        if (mode_ == STREAM) {  // one row of h * w positions; tap row ch is x's plane ch
            DirectShape& d = direct_shape_;
            d = DirectShape{s.c, 1, s.h * s.w, 1, 1, 0, 0, 1, s.h * s.w, 1, s.h * s.w, 0,
                            s.h * s.w};
            for (int64_t ch = 0; ch < s.c; ++ch) offs_.push_back(ch * s.h * s.w);
        }
        mchunks_ = (tiles_ + per_chunk - 1) / per_chunk;
        int64_t ptiles, tile = cnr;  // position tiles of one image and group, their size
        if (staged()) {
            // the staged planes: every read of an output's window lies inside them
            DirectShape& d = direct_shape_;
            d.c = s.c, d.h = s.h, d.w = s.w, d.kh = s.kh, d.kw = s.kw, d.ph = s.ph, d.pw = s.pw;
            d.oh = s.oh, d.ow = s.ow;
            d.hp = hp;
            d.wp = wp;
            const char* what = "the staged (padded) image";
            if (mode_ == DIRECT && (s.sh > 1 || s.sw > 1)) {  // phase planes (conv_stage)
                d.sh = s.sh, d.sw = s.sw;
                d.wp = (wp + s.sw - 1) / s.sw;
                d.hp = mul((hp + s.sh - 1) / s.sh, s.sh * s.sw, what);
            }
            const int64_t plane = bounded(mul(d.hp, d.wp, what), MAX_FLOATS, what);
            // a blocked image: whole blocks of channels, each position a block's B floats
            const int64_t xb = x_block_ ? x_block_ : 1;
            const int64_t lanes_c = (s.c + xb - 1) / xb * xb;
            const int64_t planes = bounded(mul(lanes_c, plane, what), MAX_FLOATS, what);
            d.xblock = xb;
            // each tap's offset: (dy, dx) lies in phase plane (dy % sh, dx % sw) of its
            // channel, dy / sh rows and dx / sw columns on (one plane, unit strides); in a
            // blocked image, in lane ch % B of block ch / B
            const int64_t hq = d.hp / (d.sh * d.sw);
            for (int64_t ch = 0; ch < s.c; ++ch)
                for (int64_t y = 0; y < s.kh; ++y)
                    for (int64_t x = 0; x < s.kw; ++x) {
                        const int64_t ty = y * s.dh, tx = x * s.dw;
                        const int64_t phase = (ty % d.sh) * d.sw + tx % d.sw;
                        const int64_t at = (phase * hq + ty / d.sh) * d.wp + tx / d.sw;
                        offs_.push_back(x_block_ ? (ch / xb * plane + at) * xb + ch % xb
                                                 : ch * plane + at);
                    }
            if (mode_ == DIRECT) {
                // row tiles (only a row's last one partial) or wide positions (tiles run on
                // across rows, over the pad columns), whichever makes fewer tiles: rows of 32
                // are two whole tiles, rows of 7 (9 wide) fill 7 lanes of 16 in row tiles
                const int64_t per_row = (s.ow + cnr - 1) / cnr;
                const int64_t wide = bounded(mul(s.oh, d.wp, what), MAX_FLOATS, what);
                const int64_t rows = bounded(mul(s.oh, per_row, what), MAX_FLOATS, what);
                const bool by_rows = rows <= (wide + cnr - 1) / cnr;
                ptiles = by_rows ? rows : (wide + cnr - 1) / cnr;
                d.pitch = by_rows ? per_row * cnr : d.wp;
                // the last tile reads cnr floats from its first position on; each term below
                // is at most `planes` + 2 * cnr, all bounded above
                const int64_t last = (ptiles - 1) * cnr;
                const int64_t reach = *std::max_element(offs_.begin(), offs_.end());
                d.staged = std::max(planes, reach + last / d.pitch * d.wp + last % d.pitch + cnr);
                bounded(d.staged, MAX_FLOATS, what);
            } else {
                const LanesTiling tiling(s.oh, s.ow, isa_->crt);
                tile = tiling.width;  // the positions of a whole tile
                ptiles = tiling.tiles;
                d.staged = planes;
            }
            bounded(mul(mul(n_, group_, what), d.staged, what), MAX_FLOATS, what);
        } else {
            ptiles = (s.oh * s.ow + cnr - 1) / cnr;
        }
        direct_shape_.kstep = uniform_step(offs_);
        // blocks of positions: at most CONV_NCB each (the packed path's block), and at least
        // four units in all where the positions allow, for the intra-op threads
        const int64_t most = std::max<int64_t>(1, CONV_NCB / tile);
        const int64_t others = mul(mul(n_, group_, "the work units"), mchunks_, "the work units");
        int64_t blocks = (ptiles + most - 1) / most;
        const int64_t want = (4 + others - 1) / others;
        if (blocks < want) blocks = want < ptiles ? want : ptiles;
        ptile_step_ = (ptiles + blocks - 1) / blocks;
        pblocks_ = (ptiles + ptile_step_ - 1) / ptile_step_;
        ptiles_ = ptiles;
        mul(others, pblocks_, "the work units");
    }

    // The Winograd plan: tiles of 2 x 2 outputs, U packed per group, units of WINO_TILES
    // tiles by chunks of slivers.
    void plan_winograd(const InArray& w) {
        const ConvShape& s = shape_;
        WinoShape& ws = wino_;
        const int64_t mr = isa_->mr, nr = isa_->nr;
        const char* what = "the Winograd tiles";
        ws.c = s.c, ws.h = s.h, ws.w = s.w, ws.ph = s.ph, ws.pw = s.pw, ws.oh = s.oh,
        ws.ow = s.ow;
        ws.th = (s.oh + 1) / 2, ws.tw = (s.ow + 1) / 2;
        ws.tiles = bounded(mul(ws.th, ws.tw, what), MAX_FLOATS, what);
        ws.tpad = (ws.tiles + nr - 1) / nr * nr;
        ws.m = mg_;
        ws.slivers = (mg_ + mr - 1) / mr;
        per_group_ = mul(mul(16, ws.slivers * mr, what), s.c, what);
        bounded(mul(per_group_, group_, what), MAX_FLOATS, what);
        ws.vmat = wino_vmat(bounded(mul(s.c, ws.tpad, what), MAX_FLOATS, what), 1);
        v_floats_ = bounded(mul(16, ws.vmat, what), MAX_FLOATS, what);
        bounded(mul(mul(n_, group_, what), v_floats_, what), MAX_FLOATS, what);
        pack_weight(w);
        const int64_t per_chunk = std::max<int64_t>(1, WINO_ROWS / mr);
        pblocks_ = (ws.tiles + WINO_TILES - 1) / WINO_TILES;
        mchunks_ = (ws.slivers + per_chunk - 1) / per_chunk;
        const int64_t others = n_ * group_ * pblocks_;  // (bounded by the positions above)
        if (others * mchunks_ < WINO_UNITS)
            mchunks_ = std::min(ws.slivers, (WINO_UNITS + others - 1) / others);
        mul(mul(mul(n_, group_, what), mchunks_, what), pblocks_, what);
        const int64_t rows = (ws.slivers + mchunks_ - 1) / mchunks_ * mr;
        scratch_floats_ = wino_scratch_floats(rows, WINO_TILES, nr, ws.tw);
        // A bound call's chunks of V (run_winograd_chunks): at most WINO_CHUNK_FLOATS, of whole
        // tile rows where such a chunk fits (a split row's input rows are copied twice); none
        // where a chunk would hold less than a unit's block of tiles (512 -> 512 on 28 x 28 in
        // chunks of one panel: U, 16 MiB, read again for every 32 tiles, 10.5 -> 14.2 ms).
        const int64_t tpanels = ws.tpad / nr;
        int64_t panels = std::min(WINO_CHUNK_FLOATS / (16 * s.c * nr), tpanels);
        const int64_t aligned = std::lcm(ws.tw, nr) / nr;  // panels of whole tile rows
        if (aligned <= panels && panels < tpanels) panels = panels / aligned * aligned;
        if (panels * nr >= std::min<int64_t>(WINO_TILES, ws.tpad)) {
            wino_chunk_panels_ = panels;
            wino_chunk_vmat_ = wino_vmat(s.c, panels * nr);
        }
    }

    int64_t units() const { return n_ * group_ * mchunks_ * pblocks_; }
    int64_t nbytes() const { return per_group_ * group_ * static_cast<int64_t>(sizeof(float)); }
    // floats of the staging buffer stage() and run() take (0: the packed path needs none)
    int64_t work_floats() const { return own_work_floats() + sub_floats(); }
    // the staged image's (or V's) floats, first in work
    int64_t own_work_floats() const {
        if (mode_ == WINO) return n_ * group_ * v_floats_;
        return staged() ? n_ * group_ * direct_shape_.staged : 0;
    }
    // the subsampled image's floats, after them (sub_ plans)
    int64_t sub_floats() const { return sub_ ? n_ * group_ * shape_.c * x_h_ * x_w_ : 0; }
    // floats of the work buffer a bound call (ConvCall) needs: none for the Winograd kernel in
    // chunks, which transforms V a chunk at a time into thread buffers (run_winograd_chunks)
    int64_t call_work_floats() const {
        const DirectShape& d = direct_shape_;
        if (y_blocked_ && (flat_ || (!shape_.ph && !shape_.pw && d.hp == x_h_ && d.wp == x_w_)))
            return 0;  // x without pads is read in place (a planar x: if C-contiguous)
        return mode_ == WINO && wino_chunk_panels_ ? 0 : work_floats();
    }
    // whether stage() writes work before run() (the Winograd kernel: V = B^T d B)
    bool staged() const { return mode_ == DIRECT || mode_ == LANES || mode_ == WINO; }
    std::string kernel() const {
        return mode_ == DIRECT   ? "direct"
               : mode_ == LANES  ? "lanes"
               : mode_ == STREAM ? "stream"
               : mode_ == WINO   ? "winograd"
                                 : "packed";
    }

    void stage(const InArray& x, OutArray work, int threads) {
        const RunArgs a = checked(x, work, nullptr, std::nullopt, "none", std::nullopt);
        if (!staged() && !sub_) return;
        nb::gil_scoped_release nogil;
        if (sub_) subsample_at(a, clamp_threads(threads));
        if (staged()) stage_at(a, clamp_threads(threads));
    }

    // The arrays of a run, checked once (run() and stage() per call, ConvCall when bound).
    struct RunArgs {
        const float* x = nullptr;
        float* work = nullptr;  // written by stage(), read by run()
        float* y = nullptr;
        const float *bias = nullptr, *z = nullptr;
        std::ptrdiff_t xs0 = 0, xs1 = 0, xs2 = 0, ys0 = 0, ys1 = 0;
        int act = ACT_NONE;
        bool x_in_place = false;  // lanes_in_place: x's planes are the staged ones
        // a sub_ plan's caller's x (x above: the subsampled copy in work) and its strides
        const float* sub_x = nullptr;
        std::ptrdiff_t sub_s0 = 0, sub_s1 = 0, sub_s2 = 0;
    };

    // Every sh-th row and sw-th column of each of x's planes into work, after the staged
    // image (a sub_ plan's x); copies, so any split over threads gives the same floats.
    void subsample_at(const RunArgs& a, int threads) const {
        const int64_t chans = group_ * shape_.c, planes = n_ * chans;
        const int64_t oh = x_h_, ow = x_w_, sh = sub_sh_, sw = sub_sw_;
        float* out = a.work + own_work_floats();
        NativePool::get().run((planes + STAGE_CHANNELS - 1) / STAGE_CHANNELS, threads,
                              [&](int64_t i) {
            for (int64_t p = i * STAGE_CHANNELS; p < std::min(planes, (i + 1) * STAGE_CHANNELS);
                 ++p) {
                const float* src = a.sub_x + p / chans * a.sub_s0 + p % chans * a.sub_s1;
                float* dst = out + p * oh * ow;
                for (int64_t r = 0; r < oh; ++r, dst += ow, src += sh * a.sub_s2) {
                    if (sw == 2)  // (a constant stride the compiler vectorizes)
                        for (int64_t j = 0; j < ow; ++j) dst[j] = src[2 * j];
                    else
                        for (int64_t j = 0; j < ow; ++j) dst[j] = src[j * sw];
                }
            }
        });
    }

    // Copies x into work, padded (the unit-stride kernels' staged planes); no GIL needed.
    // A flat lanes plan (a plain 1x1 kernel) reads x's own planes where they lie h * w floats
    // apart: its staged copy would hold the same floats (light_resnet50's 1x1 1024->256 on
    // 14 x 14 copied 800 KiB per run; light_inception_v2 and light_squeezenet B/A 0.99).
    // So does one with no padding whose staged planes are x's (light_resnet50's 1x1/2
    // 512->1024 on 28 x 28 copied 1.6 MiB).
    bool lanes_in_place(const RunArgs& a) const {
        const DirectShape& d = direct_shape_;
        const bool as_x = flat_ || (!shape_.ph && !shape_.pw && d.hp == x_h_ && d.wp == x_w_);
        if (x_block_) return as_x;  // (check_x: a blocked x is C-contiguous)
        return mode_ == LANES && as_x && a.xs1 == x_h_ * x_w_ && (x_h_ == 1 || a.xs2 == x_w_);
    }

    void stage_at(const RunArgs& a, int threads) const {
        if (mode_ == WINO) {
            // V of blocks of STAGE_CHANNELS channels of one image and group, cut into parts of
            // tile rows where that makes fewer than WINO_STAGE_ITEMS items (a 16-channel layer
            // was one) or the padded planes would outgrow WINO_STAGE_FLOATS
            const int64_t per = (shape_.c + STAGE_CHANNELS - 1) / STAGE_CHANNELS;
            const int64_t items = n_ * group_ * per, th = wino_.th;
            const int64_t most_rows = wino_stage_rows();
            const int64_t parts =
                std::min(th, std::max({(WINO_STAGE_ITEMS + items - 1) / items,
                                       (th + most_rows - 1) / most_rows, int64_t(1)}));
            NativePool::get().run(items * parts, threads, [&](int64_t i) {
                const int64_t part = i % parts, item = i / parts;
                const int64_t ig = item / per, c0 = item % per * STAGE_CHANNELS;
                const int64_t img = ig / group_, g = ig % group_;
                wino_transform(wino_, slab_v(a, img, g), a, img, g, c0,
                               std::min(c0 + STAGE_CHANNELS, shape_.c),
                               part * th / parts * wino_.tw, (part + 1) * th / parts * wino_.tw);
            });
            return;
        }
        if (a.x_in_place) return;
        if (x_block_) return stage_blocked(a, threads);
        const float* px = a.x;
        float* pw = a.work;
        const std::ptrdiff_t xs0 = a.xs0, xs1 = a.xs1, xs2 = a.xs2;
        // a flat plan's planes are copied as one run each where x's rows lie w floats apart
        // (row by row, 7 x 7 maps' staging took 16 of 140 us of a 1x1 1024->128 layer)
        const bool rows_apart = flat_ && x_h_ > 1 && xs2 != x_w_;
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
            if (rows_apart) {  // x's rows end to end: the same staged planes, row by row
                part.h = part.hp = x_h_;
                part.w = part.wp = x_w_;
            }
            part.c = std::min(STAGE_CHANNELS, d.c - c0);
            part.staged = block + 1 == per ? d.staged - c0 * plane : part.c * plane;
            isa_->conv_stage(part, px + img * xs0 + (g * shape_.c + c0) * xs1, xs1, xs2,
                             pw + ig * d.staged + c0 * plane);
        });
    }

    // A blocked x's staged copy (its pads): per block of channels, hp rows of wp positions
    // of B floats, zero outside x; copies, so any split over threads gives the same floats.
    void stage_blocked(const RunArgs& a, int threads) const {
        const DirectShape& d = direct_shape_;
        const int64_t b = x_block_, blocks = (shape_.c + b - 1) / b;
        const int64_t prow = d.wp * b, block = d.hp * prow, xrow = x_w_ * b;
        NativePool::get().run(n_ * blocks, threads, [&](int64_t i) {
            const float* x = a.x + i / blocks * a.xs0 + i % blocks * a.xs1;
            float* dst = a.work + i / blocks * d.staged + i % blocks * block;
            for (int64_t r = 0; r < d.hp; ++r) {
                float* row = dst + r * prow;
                const int64_t iy = r - d.ph;
                if (iy < 0 || iy >= x_h_) {
                    std::memset(row, 0, sizeof(float) * prow);
                    continue;
                }
                const int64_t left = d.pw * b, right = prow - left - xrow;
                std::memset(row, 0, sizeof(float) * left);
                std::memcpy(row + left, x + iy * a.xs2, sizeof(float) * xrow);
                std::memset(row + left + xrow, 0, sizeof(float) * right);
            }
        });
    }

    // Every check of stage() and run() (ConvCall makes both): shapes, strides, overlaps (y
    // null: no output here, stage()'s x and work, or ConvPoolCall's, which checks its own y).
    template <class W>
    RunArgs checked(const InArray& x, const W& work, const OutArray* yp,
                    const std::optional<InArray>& bias, const std::string& activation,
                    const std::optional<InArray>& z, bool call = false) const {
        check_x(x);
        check_work(work, call ? call_work_floats() : work_floats());
        RunArgs a;
        a.x = static_cast<const float*>(x.data());
        a.work = static_cast<float*>(const_cast<void*>(static_cast<const void*>(work.data())));
        a.xs0 = x.stride(0), a.xs1 = x.stride(1), a.xs2 = x.stride(2);
        if (sub_) {  // the kernels read the copy subsample_at() makes
            a.sub_x = a.x, a.sub_s0 = a.xs0, a.sub_s1 = a.xs1, a.sub_s2 = a.xs2;
            a.x = a.work + own_work_floats();
            a.xs2 = x_w_, a.xs1 = x_h_ * x_w_, a.xs0 = group_ * shape_.c * a.xs1;
        }
        a.x_in_place = lanes_in_place(a);  // once per bound call, not per run
        if (call && y_blocked_ && !a.x_in_place && call_work_floats() == 0)
            throw nb::value_error("x must be C-contiguous: the call reads it in place");
        check_no_overlap(work, x, "x");  // stage() writes work while it reads x
        const std::vector<int64_t> want_y{n_, m_, y_h_, y_w_};
        if (yp && y_blocked_)
            throw nb::value_error("a plan with a blocked output runs as a BlockedConvCall");
        if (yp) {
            const OutArray& y = *yp;
            check_matrix(y, "y", 4);
            if (shape_of(y) != want_y)
                throw nb::value_error(("y must have shape " + dims(want_y) + ", got " +
                                       dims(shape_of(y)))
                                          .c_str());
            if ((y_w_ > 1 && y.stride(3) != 1) || (y_h_ > 1 && y.stride(2) != y_w_))
                throw nb::value_error("y must hold each channel's positions contiguously");
            check_no_overlap(y, x, "x");
            check_no_overlap(y, work, "work");
            a.y = static_cast<float*>(y.data());
            a.ys0 = y.stride(0), a.ys1 = y.stride(1);
        }
        const int act = parse_activation(activation);
        a.act = act;
        if (act != ACT_NONE && act != ACT_RELU)
            throw nb::value_error("the conv activation must be 'none' or 'relu'");
        if (exact_ && (act != ACT_NONE || z))
            throw nb::value_error(
                "an exact plan takes no activation or residual (exact mode applies them after "
                "the convolution)");
        if (bias) {
            check_matrix(*bias, "bias", 1);
            if (static_cast<int64_t>(bias->shape(0)) != m_)
                throw nb::value_error(("bias must have " + std::to_string(m_) +
                                       " elements, got " + std::to_string(bias->shape(0)))
                                          .c_str());
            if (m_ > 1 && bias->stride(0) != 1) throw nb::value_error("bias must be contiguous");
            if (yp) check_no_overlap(*yp, *bias, "bias");
            a.bias = static_cast<const float*>(bias->data());
        }
        if (z) {  // the residual: laid out exactly as y
            if (!yp) throw nb::value_error("a residual needs the convolution's own y");
            check_matrix(*z, "z", 4);
            if (shape_of(*z) != want_y)
                throw nb::value_error(("z must have shape " + dims(want_y) + ", got " +
                                       dims(shape_of(*z)))
                                          .c_str());
            for (size_t d = 0; d < 4; ++d)
                if (want_y[d] > 1 && z->stride(d) != yp->stride(d))
                    throw nb::value_error("z must have y's strides");
            if (z->data() != yp->data())
                check_no_overlap(*yp, *z, "z");
            else if (!z_in_place())  // (z is y itself: same shape and strides, checked above)
                throw nb::value_error(
                    "z may be y itself only for a plan whose z_in_place holds (this one's "
                    "partial sums of depth blocks would overwrite z before it is read)");
            a.z = static_cast<const float*>(z->data());
        }
        return a;
    }

    // Whether run() may take z as y itself (FusedConv's Z dying at the node, its output
    // planned over it): every kernel then writes each output once, after its whole depth,
    // reading its Z element first; not where partial sums of depth blocks go to y (the packed
    // and stream kernels' columns deeper than CONV_KC), nor in exact plans (they take no z).
    // The lanes kernel's quads keep their partial sums in a buffer of their own.
    bool z_in_place() const {
        if (exact_ || y_blocked_) return false;
        if (mode_ == PACKED || mode_ == STREAM) return k_ <= CONV_KC;
        return true;  // direct, lanes, winograd
    }

    // Whether run_rows() computes any band of output rows on its own (ConvPoolCall): the
    // direct kernel in fast mode, one group, the output's own rows (not a flat 1x1 plan's one
    // long row) in row tiles (a tile never runs on into a next row).
    bool row_bands() const {
        const DirectShape& d = direct_shape_;
        return mode_ == DIRECT && !exact_ && group_ == 1 && !flat_ && !sub_ && d.oh == y_h_ &&
               d.ow == y_w_ && d.pitch % isa_->cnr == 0;
    }
    // Whether run_rows_blocked() computes bands of output rows kept channels-last
    // (ConvPoolCall's blocked bands): the lanes kernel in fast mode, one group, the output's
    // own rows (not a flat 1x1 plan's one long row), the whole depth per tile.
    bool lanes_bands() const {
        return mode_ == LANES && !exact_ && group_ == 1 && !flat_ && !sub_ &&
               isa_->conv_lanes_ok && lanes_kb_ == k_ && shape_.oh == y_h_ && shape_.ow == y_w_;
    }
    int64_t channel_tile() const { return cmr_; }
    bool y_blocked() const { return y_blocked_; }
    // Output positions per row of the kernels' geometry and its rows (a flat plan: one row)
    int64_t row_positions() const { return shape_.ow; }
    int64_t rows() const { return shape_.oh; }
    bool flat() const { return flat_; }
    std::vector<int64_t> out_shape() const { return {n_, m_, y_h_, y_w_}; }

    // Output rows [r0, r1) of output channels [m0, m1) (m0 a multiple of channel_tile()) of
    // image img, from the image stage_at() staged (row_bands() plans only): channel c's row r
    // goes to out + (c - m0) * ldo + (r - r0) * ow.  The direct kernel's own arithmetic, so
    // the bits of a whole run.
    void run_rows(const RunArgs& a, int64_t img, int64_t m0, int64_t m1, int64_t r0, int64_t r1,
                  float* out, std::ptrdiff_t ldo) const {
        const DirectShape& d = direct_shape_;
        // the kernel adds channel and row offsets to its Y; this one puts (m0, r0) at out
        float* y = out - (m0 * ldo + r0 * d.ow);
        isa_->conv_direct[0](d, a.work + img * d.staged, offs_.data(), packed_.get(), m0, m1,
                             r0 * d.pitch, r1 * d.pitch, y, nullptr, ldo, a.bias, a.act);
    }

    // Output rows [r0, r1) of output channels [m0, m1) (m0 a multiple of channel_tile()) of
    // image img, from the image stage_at() staged (lanes_bands() plans only), channels-last
    // in vectors of channel_tile(): vector v's (r, x) at band + v * vstride + ((r - r0) * ow +
    // x) * channel_tile().  bias: whole vectors from m0 on, or null.  The lanes kernel's bits.
    void run_rows_blocked(const RunArgs& a, int64_t img, int64_t m0, int64_t m1, int64_t r0,
                          int64_t r1, float* band, int64_t vstride, const float* bias) const {
        const DirectShape& d = direct_shape_;
        const float* staged = a.x_in_place ? a.x + img * a.xs0 : a.work + img * d.staged;
        isa_->conv_lanes_band(shape_, d, staged, offs_.data(), packed_.get(), m0, m1, r0, r1,
                              band, vstride, bias, a.act);
    }
    // ... and positions [q0, q1) of a flat plan's one row (a 1x1 kernel's positions lie end to
    // end in x and in the band: the part is a row of its own, its first position at band).
    void run_part_blocked(const RunArgs& a, int64_t img, int64_t m0, int64_t m1, int64_t q0,
                          int64_t q1, float* band, int64_t vstride, const float* bias) const {
        const DirectShape& d = direct_shape_;
        const float* staged = a.x_in_place ? a.x + img * a.xs0 : a.work + img * d.staged;
        ConvShape part = shape_;
        part.ow = q1 - q0;
        isa_->conv_lanes_band(part, d, staged + q0 * d.xblock, offs_.data(), packed_.get(), m0,
                              m1, 0, 1, band, vstride, bias, a.act);
    }

    void run(const InArray& x, const InArray& work, OutArray y, std::optional<InArray> bias,
             const std::string& activation, int64_t u0, int64_t u1, int threads,
             std::optional<InArray> z) {
        const RunArgs args = checked(x, work, &y, bias, activation, z);
        if (u1 == -1) u1 = units();
        if (u0 < 0 || u0 > u1 || u1 > units())
            throw nb::value_error(("unit range [" + std::to_string(u0) + ", " +
                                   std::to_string(u1) + ") is not inside [0, " +
                                   std::to_string(units()) + ")")
                                      .c_str());
        nb::gil_scoped_release nogil;
        run_at(args, u0, u1, clamp_threads(threads));
    }

    // Tile rows whose padded planes (STAGE_CHANNELS of them) stay within WINO_STAGE_FLOATS.
    int64_t wino_stage_rows() const {
        return std::max<int64_t>(1, WINO_STAGE_FLOATS / (STAGE_CHANNELS * 2 * wino_pitch(wino_)));
    }

    // Image img and group g's V in work (the whole map's, stage_at's and the units').
    float* slab_v(const RunArgs& a, int64_t img, int64_t g) const {
        return a.work + (img * group_ + g) * v_floats_;
    }

    // V of channels [c0, c1) and tiles [t0, t1) of image img, group g into v (ws: its layout).
    void wino_transform(const WinoShape& ws, float* v, const RunArgs& a, int64_t img, int64_t g,
                        int64_t c0, int64_t c1, int64_t t0, int64_t t1) const {
        float* rows = thread_floats(WINO_PADDED_ROWS, wino_input_floats(ws, c1 - c0, t0, t1));
        isa_->wino_input(ws, a.x + img * a.xs0 + g * shape_.c * a.xs1, a.xs1, a.xs2, c0, c1, t0,
                         t1, v, rows);
    }

    // V of every channel and tiles [t0, t1) of image img, group g into v, in blocks of
    // STAGE_CHANNELS channels and of tile rows whose padded planes stay within
    // WINO_STAGE_FLOATS (one thread's part of a bound call).
    void wino_transform_all(const WinoShape& ws, float* v, const RunArgs& a, int64_t img,
                            int64_t g, int64_t t0, int64_t t1) const {
        const int64_t most = wino_stage_rows() * ws.tw;  // tiles per transform call
        for (int64_t c0 = 0; c0 < shape_.c; c0 += STAGE_CHANNELS)
            for (int64_t t = t0; t < t1; t += most)
                wino_transform(ws, v, a, img, g, c0, std::min(c0 + STAGE_CHANNELS, shape_.c), t,
                               std::min(t + most, t1));
    }

    // Channel chunk mc and tiles [t0, t1) of image img, group g from v (ws: its layout): the 16
    // products and A^T M A; x and the dense weight for the outputs taken by their windows.
    void wino_unit(const WinoShape& ws, const float* v, const RunArgs& a, int64_t img, int64_t g,
                   int64_t mc, int64_t t0, int64_t t1) const {
        const std::ptrdiff_t yo = img * a.ys0 + g * mg_ * a.ys1;
        const WinoWindows win{a.x + img * a.xs0 + g * shape_.c * a.xs1, a.xs1, a.xs2,
                              wino_w_.data() + g * mg_ * k_};
        isa_->wino_tiles(ws, v, packed_.get() + g * per_group_, mc * ws.slivers / mchunks_,
                         (mc + 1) * ws.slivers / mchunks_, t0, t1, a.y + yo,
                         a.z ? a.z + yo : nullptr, a.ys1, a.bias ? a.bias + g * mg_ : nullptr,
                         a.act, win, thread_floats(WINO_PRODUCTS, scratch_floats_));
    }

    // Every unit of tiles [t0, t1) (t0 a multiple of nr) of image img, group g from v: blocks of
    // WINO_TILES tiles by chunks of output channels (one thread's part of a bound call).
    void wino_units_all(const WinoShape& ws, const float* v, const RunArgs& a, int64_t img,
                        int64_t g, int64_t t0, int64_t t1) const {
        for (int64_t tb = t0; tb < t1; tb += WINO_TILES)
            for (int64_t mc = 0; mc < mchunks_; ++mc)
                wino_unit(ws, v, a, img, g, mc, tb, std::min(tb + WINO_TILES, t1));
    }

    // A bound call's Winograd run (call_at): each image and group's panels of tiles in chunks
    // of wino_chunk_panels_ (on several threads at most that, as many as the threads take, of
    // sizes within a panel of each other), each chunk a unit on one thread: the chunk's V
    // (every input channel) into that thread's buffer, then its products and A^T M A.  V of
    // the whole map in the slab (850 KiB for 16 -> 64 on 55 x 55, 3.2 MiB for 64 -> 64 on
    // 56 x 56) was found out of cache in a model's run (the other layers' data and, in the
    // bench, onnxruntime's run in between), so every store of the transform fetched its line
    // from memory; and a thread's own V is never read by another core (reading V another
    // thread wrote moved it between the cores' caches: at 2 threads, 64->64 on 56 x 56 8% and
    // 16->64 on 55 x 55 16% slower).  V's values and the products' order are the whole map's,
    // so the same bits.
    void run_winograd_chunks(const RunArgs& a, int threads) const {
        const int64_t nr = isa_->nr, tpanels = wino_.tpad / nr, images = n_ * group_;
        const int64_t per = wino_chunk_panels_;  // one thread: chunks of `per` panels
        int64_t chunks = (tpanels + per - 1) / per;
        if (threads > 1) {  // each image's chunks a multiple of its share of the threads, even
            const int64_t share = (threads + images - 1) / images;
            chunks = std::min(tpanels, (chunks + share - 1) / share * share);
        }
        auto first_panel = [&](int64_t k) {
            return threads > 1 ? k * tpanels / chunks : std::min(k * per, tpanels);
        };
        WinoShape base = wino_;
        base.vmat = threads > 1 ? wino_vmat(shape_.c, (tpanels + chunks - 1) / chunks * nr)
                                : wino_chunk_vmat_;
        NativePool::get().run(images * chunks, threads, [&](int64_t i) {
            const int64_t ig = i / chunks, img = ig / group_, g = ig % group_;
            const int64_t t0 = first_panel(i % chunks) * nr;
            const int64_t t1 = std::min(first_panel(i % chunks + 1) * nr, base.tiles);
            if (t0 >= t1) return;
            WinoShape ws = base;
            ws.v_p0 = t0 / nr;
            float* v = thread_floats(WINO_CHUNK, 16 * ws.vmat);
            wino_transform_all(ws, v, a, img, g, t0, t1);
            wino_units_all(ws, v, a, img, g, t0, t1);
        });
    }

    // Units [u0, u1) of the Winograd plan: each one's 16 products and A^T M A.
    void run_winograd(const RunArgs& a, int64_t u0, int64_t u1, int threads) const {
        NativePool::get().run(u1 - u0, threads, [&](int64_t i) {
            int64_t rest = u0 + i;
            const int64_t pb = rest % pblocks_;
            rest /= pblocks_;
            const int64_t mc = rest % mchunks_;
            rest /= mchunks_;
            const int64_t t0 = pb * WINO_TILES;
            const int64_t img = rest / group_, g = rest % group_;
            wino_unit(wino_, slab_v(a, img, g), a, img, g, mc, t0,
                      std::min(t0 + WINO_TILES, wino_.tiles));
        });
    }

    // A whole call (ConvCall): stage() then run(), except for the Winograd kernel: in chunks of
    // tiles that each transform V and multiply it on one thread (run_winograd_chunks), or, with
    // input channels too many for a chunk, on several threads with panels of tiles enough for
    // each, each thread transforming into work the tiles it then multiplies (reading V another
    // thread wrote moved it between the cores' caches: at 2 threads, 64->64 on 56 x 56 8% and
    // 16->64 on 55 x 55 16% slower than the parts).  An output's arithmetic does not depend on
    // its thread, chunk or block, so neither do the bits.
    void call_at(const RunArgs& a, int threads) const {
        if (sub_) subsample_at(a, threads);  // (a 1x1 kernel: never Winograd)
        if (mode_ == WINO && wino_chunk_panels_) return run_winograd_chunks(a, threads);
        const int64_t panels = mode_ == WINO ? wino_.tpad / isa_->nr : 0;
        if (threads <= 1 || panels < WINO_FUSED_MIN_PANELS * threads) {
            if (staged()) stage_at(a, threads);
            run_at(a, 0, units(), threads);
            return;
        }
        const int64_t nr = isa_->nr;
        NativePool::get().run(n_ * group_ * threads, threads, [&](int64_t i) {
            const int64_t ig = i / threads, k = i % threads;
            const int64_t img = ig / group_, g = ig % group_;
            const int64_t ta = k * panels / threads * nr;
            const int64_t tb = std::min((k + 1) * panels / threads * nr, wino_.tiles);
            float* v = slab_v(a, img, g);
            wino_transform_all(wino_, v, a, img, g, ta, tb);
            wino_units_all(wino_, v, a, img, g, ta, tb);
        });
    }

    // Units [u0, u1) on checked arrays, over `threads` (clamped) threads; no GIL needed.
    void run_at(const RunArgs& args, int64_t u0, int64_t u1, int threads) const {
        if (mode_ == WINO) {
            run_winograd(args, u0, u1, threads);
            return;
        }
        const ConvShape& s = shape_;
        // the packed path reads a 1x1 kernel with unit strides and no padding as one long row
        ConvShape run_shape = s;
        std::ptrdiff_t x_rs = args.xs2;
        const bool flat = s.kh == 1 && s.kw == 1 && s.ph == 0 && s.pw == 0 && s.sh == 1 &&
                          s.sw == 1 && s.oh == s.h && s.ow == s.w && (s.h == 1 || x_rs == s.w);
        if (flat) {
            run_shape.w = run_shape.ow = s.h * s.w;
            run_shape.h = run_shape.oh = 1;
            x_rs = run_shape.w;
        }
        // the stream kernel reads x's planes in place: they must lie h * w floats apart
        const bool stream = mode_ == STREAM && flat &&
                            (s.c * group_ == 1 || args.xs1 == s.h * s.w);
        const float* px = args.x;
        const float* pw = args.work;
        const bool in_place = args.x_in_place;
        float* py = args.y;
        const float *pb = args.bias, *pz = args.z;
        const int act = args.act;
        const std::ptrdiff_t xs0 = args.xs0, xs1 = args.xs1, ys0 = args.ys0, ys1 = args.ys1;
        const int64_t cmr = cmr_, cnr = isa_->cnr;
        // A whole run re-cuts each image, group and channel chunk's positions into one span of
        // tiles per thread (in pairs of tiles, as the micro-kernels pair them) where the
        // positions are the outer loop (packed, stream, direct): the plan's blocks (up to
        // CONV_NCB positions, at least four units) left one thread 8 tiles of a 14 x 14 map's
        // 13 and the other 5, and the packed kernel streamed the whole weight once per block
        // (light_squeezenet's 512->1000 on 13 x 13: four blocks of 48 positions, 2 MiB).  An
        // output's arithmetic does not depend on its tile's unit, so neither do the bits.  The
        // lanes kernel keeps blocks of about the plan's size (its channel groups are the outer
        // loop: a block's image stays in cache for each), but as many as a multiple of the
        // threads, of equal size (13 blocks of 18 tiles left one of two threads 7).
        const bool whole = u0 == 0 && u1 == units();
        const bool lanes = mode_ == LANES;
        // Packed columns of a small map under a large weight (1x1 512->2048 on 7 x 7: 100 KiB
        // of columns, 4 MiB of weight): a whole run gives each thread a span of the output
        // channels over all positions instead, so the weight is streamed once, not once per
        // thread (the columns, packed once per thread, are the cheaper copy).
        const bool by_channels = whole && threads > 1 && mode_ == PACKED && mchunks_ == 1 &&
                                 tiles_ >= 2 * threads && mg_ > shape_.oh * shape_.ow;
        const int64_t spans =
            !whole        ? 0
            : by_channels ? threads
            : lanes ? std::min<int64_t>(ptiles_, (pblocks_ + threads - 1) / threads * threads)
                    : std::min<int64_t>(ptiles_, threads);
        const int64_t pairs = (ptiles_ + 1) / 2;
        auto span_tile = [&](int64_t k) {  // the first tile of span k
            if (k >= spans) return ptiles_;
            return lanes ? k * ptiles_ / spans : std::min(ptiles_, 2 * (k * pairs / spans));
        };
        const int64_t count = spans ? units() / pblocks_ * spans : u1 - u0;
        NativePool::get().run(count, threads, [&](int64_t i) {
            float* block = mode_ == PACKED || (mode_ == STREAM && !stream) ? conv_block() : nullptr;
            int64_t rest = spans ? i / spans : u0 + i;
            int64_t p0 = 0, p1 = 0;  // the unit's position tiles [p0, p1)
            if (by_channels) {
                p1 = ptiles_;
            } else if (spans) {
                p0 = span_tile(i % spans);
                p1 = span_tile(i % spans + 1);
            } else {
                p0 = rest % pblocks_ * ptile_step_;
                p1 = std::min(p0 + ptile_step_, ptiles_);
                rest /= pblocks_;
            }
            const int64_t mc = rest % mchunks_;
            rest /= mchunks_;
            const int64_t g = rest % group_, img = rest / group_;
            // chunks of `multi` tiles where quads run in depth blocks, else an even split
            const bool quads = lanes_kb_ < k_;
            const int64_t multi = isa_->lanes_multi;
            const int64_t t0 = by_channels ? i % spans * tiles_ / spans
                               : quads     ? mc * multi
                                           : mc * tiles_ / mchunks_;
            const int64_t t1 = by_channels ? (i % spans + 1) * tiles_ / spans
                               : quads     ? std::min(t0 + multi, tiles_)
                                           : (mc + 1) * tiles_ / mchunks_;
            const int64_t m0 = t0 * cmr, m1 = std::min(t1 * cmr, mg_);
            const float* wg = packed_.get() + g * per_group_;
            float* yg = py + img * ys0 + g * mg_ * ys1;
            const float* bg = pb ? pb + g * mg_ : nullptr;
            const float* zg = pz ? pz + img * ys0 + g * mg_ * ys1 : nullptr;
            if (mode_ == DIRECT) {
                const DirectShape& d = direct_shape_;
                isa_->conv_direct[exact_](d, pw + (img * group_ + g) * d.staged, offs_.data(),
                                          wg, m0, m1, p0 * cnr,
                                          std::min(p1 * cnr, s.oh * d.pitch), yg, zg, ys1, bg,
                                          act);
                return;
            }
            if (mode_ == LANES) {
                const DirectShape& d = direct_shape_;
                const float* staged = in_place ? px + img * xs0 + g * s.c * xs1
                                               : pw + (img * group_ + g) * d.staged;
                isa_->conv_lanes[exact_](s, d, staged, offs_.data(), wg, m0, m1, p0, p1, yg, zg,
                                         ys1, bg, act, lanes_kb_);
                return;
            }
            const float* xg = px + img * xs0 + g * s.c * xs1;
            const int64_t positions = s.oh * s.ow;
            int64_t j_from = p0 * cnr;
            if (stream) {  // whole tiles straight from x, the last partial one packed
                const int64_t whole = std::min(p1 * cnr, positions / cnr * cnr);
                if (j_from < whole)
                    isa_->conv_direct[exact_](direct_shape_, xg, offs_.data(), wg, m0, m1,
                                              j_from, whole, yg, zg, ys1, bg, act);
                j_from = std::max(j_from, whole);
                if (j_from < std::min(p1 * cnr, positions)) block = conv_block();
            }
            for (int64_t j0 = j_from; j0 < std::min(p1 * cnr, positions); j0 += CONV_NCB) {
                const int64_t j1 = std::min({j0 + CONV_NCB, p1 * cnr, positions});
                isa_->conv_fast[exact_](run_shape, xg, xs1, x_rs, wg,
                                        blocked_weights() ? tiles_ : 0, m0, m1, j0, j1, yg,
                                        zg, ys1, bg, act, block, packed_pairs_);
            }
        });
    }

private:
    void pack_weight(const InArray& w) {
        // a large weight on huge pages where the OS offers them: its first touch (below) was a
        // page fault per 4 KiB, much of a large model's planning time
        // (+ PACK_SLACK zeroed floats: the packed kernel's last positions read a whole vector
        // at a tile's last depth step, avx2 two floats past its 6)
        const size_t used = static_cast<size_t>(per_group_ * group_) * sizeof(float);
        const size_t want = used + PACK_SLACK * sizeof(float);
        const size_t align = want >= HUGE_PACK_BYTES ? HUGE_PAGE_BYTES : 64;
        const size_t bytes = (want + align - 1) / align * align;
        packed_.reset(static_cast<float*>(std::aligned_alloc(align, bytes)));
        if (!packed_) throw std::bad_alloc();
        std::memset(reinterpret_cast<char*>(packed_.get()) + used, 0, want - used);
#ifdef MADV_HUGEPAGE
        if (align == HUGE_PAGE_BYTES) madvise(packed_.get(), bytes, MADV_HUGEPAGE);  // a hint
#endif
        const ConvShape& s = shape_;
        const float* pw = static_cast<const float*>(w.data());
        // a C-contiguous w already is the dense (m, k) rows the packing reads: no copy (a copy
        // of the whole weight was most of a large model's planning time)
        bool dense_w = true;
        int64_t expect = 1;
        for (size_t d = 4; d-- > 0;) {
            if (w.shape(d) > 1 && w.stride(d) != expect) dense_w = false;
            expect *= static_cast<int64_t>(w.shape(d));
        }
        std::vector<float> dense;
        if (!dense_w) {
            dense.resize(static_cast<size_t>(m_ * k_));
            const int64_t s0 = w.stride(0), s1 = w.stride(1), s2 = w.stride(2), s3 = w.stride(3);
            for (int64_t o = 0; o < m_; ++o)  // w in any strides -> dense (m, k) rows
                for (int64_t ci = 0; ci < s.c; ++ci)
                    for (int64_t y = 0; y < s.kh; ++y)
                        for (int64_t x = 0; x < s.kw; ++x)
                            dense[o * k_ + (ci * s.kh + y) * s.kw + x] =
                                pw[o * s0 + ci * s1 + y * s2 + x * s3];
            pw = dense.data();
        }
        if (mode_ == WINO) wino_w_.assign(pw, pw + m_ * k_);
        for (int64_t g = 0; g < group_; ++g)
            (mode_ == WINO        ? isa_->wino_pack_u
             : mode_ == LANES     ? isa_->conv_pack_w_lanes
             : blocked_weights() ? isa_->conv_pack_w_blocked
                                 : isa_->conv_pack_w)(
                mg_, mode_ == WINO ? s.c : k_, pw + g * mg_ * k_, packed_.get() + g * per_group_);
    }

    // What a blocked plan needs: the lanes kernel in fast mode, one group, x blocked in the
    // ISA's vectors (and only with a blocked output: conv_lanes writes planes from planes).
    void check_blocked(int64_t group) const {
        std::string why;
        for (const auto& [bad, what] : {std::pair{exact_, "exact mode"},
                                        std::pair{group != 1, "more than one group"},
                                        std::pair{!isa_->conv_lanes_ok, "this path"}})
            if (bad) why += (why.empty() ? "" : ", ") + std::string(what);
        if (!why.empty())
            throw nb::value_error(("unsupported: a blocked convolution takes one group in fast "
                                   "mode on a path with the lanes kernel (avx2, avx512), not " +
                                   why)
                                      .c_str());
        if (x_block_ && (x_block_ != isa_->lmr || !y_blocked_))
            throw nb::value_error(("x_block must be this path's " + std::to_string(isa_->lmr) +
                                   " channels, with y_blocked, got " + std::to_string(x_block_))
                                      .c_str());
    }

    void check_x(const InArray& x) const {
        if (x_block_) {  // (n, ceil(c / B), h, w, B), C-contiguous
            check_matrix(x, "x", 5);
            const std::vector<int64_t> want{n_, (shape_.c + x_block_ - 1) / x_block_, x_h_,
                                            x_w_, x_block_};
            if (shape_of(x) != want)
                throw nb::value_error(("a blocked x must have shape " + dims(want) + ", got " +
                                       dims(shape_of(x)))
                                          .c_str());
            check_flat(x, "x");
            return;
        }
        check_matrix(x, "x", 4);
        const std::vector<int64_t> want{n_, shape_.c * group_, in_h_, in_w_};
        if (shape_of(x) != want)
            throw nb::value_error(
                ("x must have shape " + dims(want) + ", got " + dims(shape_of(x))).c_str());
        if (in_w_ > 1 && x.stride(3) != 1)
            throw nb::value_error("x must have unit column stride");
    }

    template <class A>
    void check_work(const A& work, int64_t need) const {
        check_flat(work, "work");
        if (static_cast<int64_t>(work.size()) < need)
            throw nb::value_error(("work must hold " + std::to_string(need) + " floats, got " +
                                   std::to_string(work.size()))
                                      .c_str());
    }

    const IsaKernels* isa_;
    ConvShape shape_{};  // the kernels' geometry (flat_: one row of h * w positions)
    int64_t x_h_ = 0, x_w_ = 0, y_h_ = 0, y_w_ = 0;  // the planes the kernels read and write
    int64_t in_h_ = 0, in_w_ = 0;  // the caller's x planes (sub_: x_h_ x x_w_ of them read)
    bool sub_ = false;  // a strided 1x1 kernel without pads, run on the subsampled image
    int64_t sub_sh_ = 1, sub_sw_ = 1;
    bool flat_ = false;
    int64_t x_block_ = 0;     // x blocked in blocks of this many channels (0: planes)
    bool y_blocked_ = false;  // the output blocked too: BlockedConvCall's bands only
    bool packed_pairs_ = false;  // the packed kernel's whole tiles in pairs (FULL512's rules)
    bool exact_ = false;  // exact mode's sums (a multiply and an add per term; no Winograd)
    DirectShape direct_shape_{};
    std::vector<int64_t> offs_;
    int64_t group_, n_ = 0, m_ = 0, mg_ = 0, k_ = 0, tiles_ = 0, per_group_ = 0;
    int64_t cmr_ = 1;  // output channels per tile of the packed weight (the kernel's)
    int64_t mchunks_ = 1, pblocks_ = 1, ptile_step_ = 1, ptiles_ = 1;
    int64_t lanes_kb_ = 0;  // the lanes kernel's depth block for quads (k_: the whole depth)
    ConvKernel mode_ = PACKED;
    // The packed kernel's weights lie depth block after depth block (conv_pack_w_blocked);
    // the stream kernel's, which its direct tiles read whole depth at a time, do not.
    bool blocked_weights() const { return mode_ == PACKED; }
    WinoShape wino_{};
    std::vector<float> wino_w_;  // the dense weight (m x c x 3 x 3), for wino_window
    int64_t v_floats_ = 0;       // floats of one image and group's V (the Winograd kernel)
    int64_t wino_chunk_panels_ = 0;  // the most panels of a bound call's chunk (0: V whole)
    int64_t wino_chunk_vmat_ = 0;    // floats from one of such a chunk's V matrices to the next
    int64_t scratch_floats_ = 0;  // floats of one Winograd unit's scratch

    std::unique_ptr<float, FreeDeleter> packed_;
};

// A plan's stage() and run() over one set of arrays, checked once when made (a plan binds one
// per run state): a call converts no arguments (stage and run through nanobind took 1.7 us of
// a tiny convolution, a tenth of the bench's small_cnn).  Holds the plan and the arrays.
class ConvCall {
public:
    ConvCall(nb::object plan, InArray x, OutArray work, OutArray y, std::optional<InArray> bias,
             const std::string& activation, int threads, std::optional<InArray> z)
        : plan_obj_(std::move(plan)), plan_(&nb::cast<const ConvPlan&>(plan_obj_)), x_(x),
          work_(work), y_(y), bias_(bias), z_(z),
          args_(plan_->checked(x, work, &y, bias, activation, z, true)),
          threads_(clamp_threads(threads)) {}

    void operator()() const {
        nb::gil_scoped_release nogil;
        plan_->call_at(args_, threads_);
    }

private:
    nb::object plan_obj_;
    const ConvPlan* plan_;
    InArray x_;  // held: args_ points into these arrays
    OutArray work_, y_;
    std::optional<InArray> bias_, z_;
    ConvPlan::RunArgs args_;
    int threads_;
};

#include "conv_pool.inc"
#include "conv_blocked.inc"

ConvPlan* conv_plan(const InArray& w, int64_t group, const std::vector<int64_t>& x_shape,
                    const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                    const std::vector<int64_t>& pads, const std::vector<int64_t>& out,
                    const std::string& isa, const std::string& kernel, bool exact,
                    const std::string& tuning, int64_t x_block, bool y_blocked) {
    return new ConvPlan(w, group, x_shape, strides, dilations, pads, out, isa, kernel, exact,
                        tuning, x_block, y_blocked);
}

}  // namespace

void bind_conv(nb::module_& m) {
    nb::class_<ConvPlan>(m, "ConvPlan", "A planned 2-D convolution: packed weight, work units.")
        .def_prop_ro("units", &ConvPlan::units)
        .def_prop_ro("nbytes", &ConvPlan::nbytes)
        .def_prop_ro("work_floats", &ConvPlan::work_floats,
                     "Floats of the work buffer stage() and run() take.")
        .def_prop_ro("call_work_floats", &ConvPlan::call_work_floats,
                     "Floats of the work buffer a ConvCall takes (none for the Winograd "
                     "kernel, which transforms in chunks into buffers of its threads).")
        .def_prop_ro("staged", &ConvPlan::staged)
        .def_prop_ro("kernel", &ConvPlan::kernel)
        .def_prop_ro("z_in_place", &ConvPlan::z_in_place,
                     "Whether a run may take z as y itself (a residual written over).")
        .def_prop_ro("row_bands", &ConvPlan::row_bands,
                     "Whether ConvPoolCall can run this plan in bands of output rows.")
        .def_prop_ro("lanes_bands", &ConvPlan::lanes_bands,
                     "Whether ConvPoolCall can run this plan in bands of output rows kept "
                     "channels-last (the lanes kernel).")
        .def("stage", &ConvPlan::stage, nb::arg("x"), nb::arg("work"), nb::arg("threads") = 1,
             "Copy x into work, padded, for the direct, lanes and Winograd kernels, and a "
             "strided 1x1 kernel's subsampled x for every kernel (else nothing): run() reads "
             "them.")
        .def("run", &ConvPlan::run, nb::arg("x"), nb::arg("work"), nb::arg("y"),
             nb::arg("bias").none(), nb::arg("activation"), nb::arg("unit_begin") = 0,
             nb::arg("unit_end") = -1, nb::arg("threads") = 1, nb::arg("z").none() = nb::none(),
             "y = act((conv(x) + bias) + z) for units [unit_begin, unit_end) (activation none "
             "or relu; z, a residual laid out as y, optional), over `threads` threads of the "
             "plugin's pool; units are independent outputs, so any split and thread count give "
             "the same bits.");
    nb::class_<ConvCall>(m, "ConvCall",
                         "A plan's stage() and run() of all its units on fixed arrays, checked "
                         "once: y = act((conv(x) + bias) + z).")
        .def(nb::init<nb::object, InArray, OutArray, OutArray, std::optional<InArray>,
                      const std::string&, int, std::optional<InArray>>(),
             nb::arg("plan"), nb::arg("x"), nb::arg("work"), nb::arg("y"), nb::arg("bias").none(),
             nb::arg("activation"), nb::arg("threads") = 1, nb::arg("z").none() = nb::none())
        .def("__call__", &ConvCall::operator());
    nb::class_<ConvPoolCall>(m, "ConvPoolCall",
                             "A plan's convolution (y = act(conv(x) + bias)) and a MaxPool after "
                             "it in bands of rows, on fixed arrays, checked once; y is the pool's "
                             "output (pads: before each spatial axis).")
        .def(nb::init<nb::object, InArray, OutArray, OutArray, std::optional<InArray>,
                      const std::string&, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::vector<int64_t>&,
                      const std::vector<int64_t>&, const std::string&, int>(),
             nb::arg("plan"), nb::arg("x"), nb::arg("work"), nb::arg("y"), nb::arg("bias").none(),
             nb::arg("activation"), nb::arg("kernel"), nb::arg("strides"), nb::arg("dilations"),
             nb::arg("pads"), nb::arg("isa"), nb::arg("threads") = 1)
        .def_prop_ro("thread_floats", &ConvPoolCall::thread_floats_needed,
                     "Floats of the buffers each thread keeps (the band and the pool's work).")
        .def("__call__", &ConvPoolCall::operator());
    nb::class_<BlockedConvCall>(m, "BlockedConvCall",
                                "A plan with a blocked output (y_blocked) on fixed arrays, "
                                "checked once: y = act(conv(x) + bias), y (n, ceil(m / B), oh, "
                                "ow, B) for the plan's ISA's vector of B channels.")
        .def(nb::init<nb::object, InArray, OutArray, OutArray, std::optional<InArray>,
                      const std::string&, int>(),
             nb::arg("plan"), nb::arg("x"), nb::arg("work"), nb::arg("y"), nb::arg("bias").none(),
             nb::arg("activation"), nb::arg("threads") = 1)
        .def("__call__", &BlockedConvCall::operator());
    m.def("conv_plan", &conv_plan, nb::arg("w"), nb::arg("group"), nb::arg("x_shape"),
          nb::arg("strides"), nb::arg("dilations"), nb::arg("pads"), nb::arg("out"),
          nb::arg("isa"), nb::arg("kernel") = "auto", nb::arg("exact") = false,
          nb::arg("tuning") = "auto", nb::arg("x_block") = 0, nb::arg("y_blocked") = false,
          nb::rv_policy::take_ownership,
          "Plan a float32 2-D convolution (pads = the pads before each spatial axis; out = the "
          "output extents, which fix the pads after; kernel: auto, direct, lanes, packed, "
          "stream or winograd; exact: exact mode's sums, bit for bit on every ISA, no "
          "Winograd, no activation or residual in the run; tuning: the rule set auto follows "
          "on avx512, auto (this CPU's: conv_tuning()), split512 or full512; x_block: x is "
          "blocked in blocks of this many channels, the ISA's vector (0: planes); y_blocked: "
          "the output blocked the same way, by a BlockedConvCall).");
}

}  // namespace graphrt_simd
