// graphrt_ops_simd._native: which kernel a planned convolution runs, "auto"'s rules with the
// measurements behind each bound (bench/conv_micro.py --kernels unless named), apart from
// the plan's mechanics (conv_plan.cpp): a new measurement changes this file only.
#include "conv_choice.h"

#include <cmath>

#include "binding.h"

namespace graphrt_simd {

namespace {

// Where "auto" takes the channels-in-lanes kernel (bench/conv_micro.py --kernels): output
// positions up to which it beat the packed one (1x1), the window depth from which it beat the
// direct kernel with unit strides (light_squeezenet's 3x3 16->64 on 55 x 55, a depth of 144:
// lanes 0.26, direct 0.29 ms; the bench's small_cnn, 3x3 16->32 on 16 x 16, 144: a tie at
// 14 us; its 3x3 3->16 on 32 x 32, 27: lanes 10, direct 6 us), the depth below which the
// direct kernel still wins on rows of whole tiles (small_cnn's 16->32 with Relu, rows of 16:
// direct 13.5, lanes 14.5 us; deeper than 256 untried: lanes), the least fill of the direct
// kernel's row tiles (in quarters) below which lanes run shallow windows too (7 x 7 maps fill
// 7 of 16 lanes), and the depth from which it beats packing columns for strided ones
// (light_squeezenet's 3x3/2 3->64 on 224 x 224, a depth of 27: lanes 0.30, packed 0.34 ms
// once; since packed tiles pair and stride-2 columns are copied by vectors, packed 0.253,
// lanes 0.264 ms, the model 0.98x: 27 is now below the bound).
constexpr int64_t LANES_MAX_POSITIONS_1X1 = 64;
// ... and for plain 1x1 kernels, read as one row of positions, this deep on maps up to this
// many positions (avx512, bench/conv_micro.py --kernels: 1x1 576->128 on 14 x 14: lanes 264,
// stream 292 us; 1024->256 on 14 x 14: 909, packed 991; 384->48 on 13 x 13: 62, stream 67;
// but 64->256 on 13 x 13: 61, packed 55; 512->256 on 28 x 28 a tie); strided 1x1 kernels
// on as few output positions as deep too (light_resnet50's 1x1/2 512->1024 on 28 x 28: lanes
// 1904, packed 1993 us warm, 2067 and 2122 with the caches flushed; but 256->512 on 56 x 56,
// 784 positions: 2209 and 1962 flushed).
constexpr int64_t LANES_MIN_DEPTH_FLAT = 256;
constexpr int64_t LANES_MAX_POSITIONS_FLAT = 256;
constexpr int64_t LANES_MIN_DEPTH_UNIT = 128;
constexpr int64_t LANES_MIN_DEPTH_WHOLE_ROWS = 256;
constexpr int64_t DIRECT_MIN_FILL_QUARTERS = 3;
// Rows of whole direct tiles this wide or wider stay with the direct kernel at any depth
// (since its tiles pair and prefetch the next block's lines; light_vgg19's 3x3 layers, 1 and 2
// threads: 64->64 on 224 x 224, direct 33.96 / 17.71 ms, lanes 34.74 / 18.39; 64->128 on
// 112 x 112 16.57 / 8.65, lanes 16.54 / 10.05; 128->128 32.8 / 17.2, lanes 33.1 / 19.0; but on
// 56 x 56 lanes won by 3% at 1 thread: 128->256, 256->256, light_resnet50's 64->64).
constexpr int64_t DIRECT_MIN_WIDTH_WHOLE_ROWS = 112;
constexpr int64_t LANES_MIN_DEPTH = 32;
// avx2 (8 channels per lanes tile, pairs of them on rows in equal pieces of at most 5;
// bench/conv_micro.py --kernels --isa avx2, every layer of light_resnet50, light_inception_v1
// and light_squeezenet, Zen 4): channels in lanes for windows above 1x1 at least 400 deep
// with unit strides (3x3 256->256 on 14 x 14: lanes 2.22, direct 2.41 ms; 64->64 on 56 x 56,
// 576 deep: 2.36, 2.51; 5x5 16->32 on 27 x 27, 400: 0.193, 0.226; but 3x3 32->128 on 27 x 27,
// 288: 1.14 against the direct kernel's 1.11, 16->64 on 55 x 55, 144: 1.25, 1.13) and for
// strided windows of the avx512 bound (7x7/2 3->64, 147 deep: 2.62, packed 2.80; 3x3/2 3->64,
// 27 deep: 0.81, packed 0.56); 1x1 kernels pack their columns (on 7 x 7 maps lanes lost,
// 512->2048: 1.46 against 1.27 ms, and still do under 4 MiB of weights, below) and read x
// in place (stream) only for very few output channels: stream lost to packed columns on
// every 1x1 layer of light_resnet50 (256->128 on 56 x 56: 2.71 against 2.03 ms; 6-channel
// tiles share a packed panel well; since the stream tiles step from plane to plane and
// prefetch, 1.99 against 2.06, a tie in the model) and on light_squeezenet's 256->32 on
// 27 x 27 (0.167, 0.156), but won where three tiles of 6 hold 16 channels (64->16 on
// 55 x 55: 0.091, 0.104; inception_v1's 192->16 on 27 x 27: 0.065, 0.074) and tied at 24
// (512->24 on 13 x 13: 0.115, 0.116).
constexpr int64_t LANES_MIN_DEPTH_UNIT_AVX2 = 400;
// ... and for 1x1 kernels on one position (a classifier or a squeeze-and-excite layer as a
// Conv: densenet121's 1024->1000 0.10 against packed 0.25 ms, 2048->1000 166 against 485 us;
// since the packed kernel takes its last few positions in lanes, 126 / 78 against 110 / 81 us
// at one / two threads, kept) and on up to LANES_MAX_POSITIONS_1X1 positions that leave the
// packed tiles' 16 columns partly empty, more of them than the packed kernel takes in lanes
// (isa.conv_tail) or all, under weights up to this size (since the lanes tiles step from plane
// to plane and prefetch: 7 x 7 maps, light_densenet121's 512->128 to 992->128 0.07-0.13
// against 0.08-0.16 ms, light_inception_v2's 1024->352 0.78 against 0.80, light_inception_v1's
// 832->384 on 6 x 6 0.24 against 0.27; 2 to 4 MiB of weights tied, light_resnet50's 4 MiB
// 512->2048 lost, 1.29 against 1.15 ms in bench/conv_micro.py; 4 x 4 and 8 x 8 maps, whole
// tiles, lost 7-8%).  With the last positions in lanes packed wins 7 x 7 and 6 x 6 maps (x
// rewritten and the caches swept before each call, one / two threads: 512->128 on 7 x 7 104 /
// 106 against 112 / 119 us, 992->128 194 / 152 against 207 / 219, 1024->352 476 / 285
// against 576 / 326, 832->384 425 / 256 against 535 / 304, 512->512 on 6 x 6 215 / 147
// against 262 / 169), lanes still 2 x 2 (512->512 80 / 56 against 118 / 76).
constexpr double LANES_MAX_WEIGHT_BYTES_1X1_AVX2 = 2.0 * 1024 * 1024;
constexpr int64_t STREAM_MAX_CHANNELS_AVX2 = 24;
// ... but since the lanes kernel reads a plain 1x1 kernel's planes as one row, it wins the
// squeezes, few output channels from at least twice as many inputs: up to 64 channels on any
// map, and up to 128 from at least four times as many inputs on maps of 196 positions or more
// (avx2, the plan's stage and run, x rewritten and the caches swept before each call, lanes
// against packed, one and two threads: 256->64 on 56 x 56 1038 / 613 against 1124 / 694 us,
// 192->64 on 28 x 28 203 / 168 against 218 / 193, 512->64 on 13 x 13 121 / 85 against 134 /
// 89, 128->32 on 55 x 55 277 / 173 against 337 / 190; 1024->128 on 14 x 14 511 / 303 against
// 536 / 311, 768->128 387 / 239 against 408 / 243, 512->128 on 28 x 28 1006 / 688 against 1047
// / 692; but 1024->128 on 7 x 7 lost, 183 / 183 against 167 / 127, and from fewer inputs
// 256->128 on 28 x 28 at two threads, 359 against 333; 1024->256 on 14 x 14 lost at one
// thread, 1047 against 1028).
constexpr int64_t LANES_MAX_SQUEEZE_AVX2 = 64;
constexpr int64_t LANES_MAX_DEEP_SQUEEZE_AVX2 = 128;
constexpr int64_t LANES_DEEP_SQUEEZE_RATIO_AVX2 = 4;
constexpr int64_t LANES_MIN_DEEP_SQUEEZE_POSITIONS_AVX2 = 196;
// ... except where a unit-stride image outgrows half of L2 and there are output channels
// enough to repay packing its columns: there the lanes and direct kernels wait on its taps
// (light_vgg19's 3x3 512->512 on 28 x 28, a 1.8 MiB image: packed 36.5, direct 40.8, lanes 42.2
// ms; 128->256 on 56 x 56: 17.8, 19.3, 18.5; light_inception_v1's 64->192 on 56 x 56: 6.67,
// 7.33, 7.01; but with 64 channels, light_resnet50's 64->64 on 56 x 56: 2.70, 2.51, 2.36, and
// with a smaller image its 128->128 on 28 x 28, 460 KiB: 2.57, 2.50, 2.25).
constexpr int64_t PACKED_MIN_CHANNELS_AVX2 = 128;
constexpr int64_t PACKED_MIN_IMAGE_BYTES_AVX2 = 512 * 1024;
// Plain 1x1 kernels on mid-size maps with a deep input: the stream kernel reads x's planes in
// place up to this depth, packed columns from there on (avx512, bench/conv_micro.py --kernels
// and 14 x 14 maps, since whole tiles run in pairs: 768->128 stream 177, packed 184, lanes 191
// us; 992->128 stream 246, packed 234, lanes 244; 1024->256 packed 458, lanes 458, stream 493).
// Channels in lanes no longer win there (before the pairs they did: 1024->256 lanes 2.43,
// packed 2.70 ms for five).  avx2 keeps stream at any depth until someone measures it.
constexpr int64_t STREAM_MAX_DEPTH_AVX512 = 768;
// Output channels per group below which a plain 1x1 convolution reads x's planes in place (the
// stream kernel) instead of packing them: with more, the packed panel serves enough channel
// tiles to repay its copy (light_resnet50's 64->256 at 56 x 56: packed 0.99, stream 1.08 ms;
// with whole tiles in pairs, on 14 x 14 maps: 576->160 stream 166, packed 169 us, 576->192
// stream 209, packed 200).
constexpr int64_t STREAM_MAX_CHANNELS = 192;

// Where "auto" takes the Winograd kernel (3x3, unit strides and dilations; bench/conv_micro.py
// --kernels --threads 1|2, bound calls): from 16 input and output channels per group and 2**24
// multiply-adds of direct convolution (from 32 input channels, 2**23: since a last partial
// panel of tiles costs only its own columns, light_squeezenet's 48->192 on 13 x 13, 14 M, ran
// 0.89 of lanes on avx512 and a tie on avx2, light_inception_v2's 64->96 on 14 x 14, 11 M, 0.81
// and a tie, 40->128 on 16 x 16 0.70 and 0.57; 16->128 on 27 x 27, 13 M, lost, 1.16 and 1.2),
// with V (16 floats per input channel and tile) up to 32 MiB, from 40 tiles (a 7 x 7 map's 16
// tiles fill half of an avx512 panel of 32: 512->512 1.5x slower than lanes; on avx2 a tie
// in light_resnet50, where its U, 16 MiB, came from memory each call instead of from L3 as in
// a loop of one layer, 0.68; avx2's own rule below).  Against the kernel
// "auto" took before, one thread, Zen 4: avx512 64->64 on 56 x 56 0.67, 128->128 on 28 x 28
// 0.65, 256->256 on 14 x 14 0.71, 512->512 on 28 x 28 0.58, 16->64 on 55 x 55 0.90, 32->128
// on 27 x 27 0.86, 64->256 on 13 x 13 0.89; avx2 0.65, 0.67, 0.73, 0.57, 0.92, 0.88, 0.95; two
// threads 0.86-0.95 on light_squeezenet's.  Below the bounds it lost: 128->32 on 14 x 14
// (7.2 M multiply-adds) 1.23, 16->32 on 16 x 16 1.2, 3->16 on 32 x 32 2.2 (products too
// shallow or too small to repay the transforms).
constexpr int64_t WINO_MIN_CHANNELS = 16;
// ... and on avx2 from 32 output channels: with fewer its products (6-row slivers) do not
// repay the transform against the lanes kernel (128->16 on 28 x 28, one thread, L3-warm 277
// against 283 us, from memory 443 against 322).  With 32 they do since Winograd's partial
// vectors take no masked stores (light_densenet121's 128->32 on 28 x 28 427 against 543 us,
// on 56 x 56 2199 against 2228, two threads 333 / 386 and 1085 / 1470; from memory lanes
// still wins at one thread, 664 / 599; the model, forcing those 18 layers in one process,
// interleaved: 0.97 of lanes at one thread, 0.94 at two).  Below 64 channels it had lost
// before (densenet's 56 x 56: 2.70 against 2.37 ms).
constexpr int64_t WINO_MIN_OUT_CHANNELS_AVX2 = 32;
constexpr double WINO_MIN_MACS = 16777216.0;
constexpr int64_t WINO_DEEP_CHANNELS = 32;
constexpr double WINO_MIN_MACS_DEEP = 8388608.0;
constexpr double WINO_MAX_V_BYTES = 32.0 * 1024 * 1024;
constexpr int64_t WINO_MIN_TILES = 40;
// ... but on avx2 from one whole panel of tiles (7 x 7 maps: 16 tiles, avx2's nr) where U
// fits L3 beside the rest of a model (light_inception_v2's 7 x 7 layers, conv_micro --kernels
// --isa avx2, against lanes: 192->320 0.78, 160->224 0.87, 224->224 0.84, 192->224 0.86, at two
// threads 0.71-0.79; light_resnet50's 512->512, U 16 MiB, a tie, left to lanes).  On avx512
// half of a panel of 32, which won two of those four layers and lost the others.
constexpr double WINO_MAX_U_BYTES_FEW_TILES_AVX2 = 8.0 * 1024 * 1024;

// avx512 on full-width 512-bit units (FULL512, Zen 5): the rules above but where these
// measurements differ (light_resnet50, light_squeezenet, light_inception_v2, each kernel forced
// on every layer in turn, per-layer minimums in the model against onnxruntime's
// (bench/profile_vs_ort.py); then the models interleaved, bench/bench_interleaved.py).  There
// Winograd needs more tiles to repay its transforms: on 14 x 14 and 13 x 13 maps (49 tiles)
// lanes won every layer, light_inception_v2's 128->128 236 against 305 us, 96->128 179 / 239,
// 192->192 519 / 628, light_squeezenet's 64->256 210 / 294, 48->192 121 / 179,
// light_resnet50's 256->256 942 / 994; on 28 x 28 and 27 x 27 (196 tiles) Winograd still won
// or tied (128->128 734 / 907, 32->128 222 / 226).
constexpr int64_t WINO_MIN_TILES_FULL512 = 100;
// ... 1x1 kernels on up to LANES_MAX_POSITIONS_1X1 positions take lanes only under 2 MiB of
// weights, as avx2 (light_resnet50's 512->2048 on 7 x 7, 4 MiB: packed 463, lanes 531 us;
// 2048->512 484 / 525; 1x1/2 1024->2048 to 7 x 7 941 / 1088; light_inception_v2's 1024->352,
// 1.4 MiB, a tie; 1024->128 lanes 63, packed 77) ...
constexpr double LANES_MAX_WEIGHT_BYTES_1X1_FULL512 = 2.0 * 1024 * 1024;
// ... deep 1x1 kernels on up to LANES_MAX_POSITIONS_FLAT positions only where they squeeze,
// fewer output channels than input ones (light_resnet50's 256->1024 on 14 x 14: packed 444,
// lanes 493 us; 1024->256 lanes 426, packed 463; 1024->512 a tie; then bench/conv_micro.py's
// native_kernel, one / two threads, lanes against packed: light_squeezenet's classifier
// 512->1000 on 13 x 13 1.06 / 1.14 (in the model 723 against 683 us), 384->768 1.05 / 1.11,
// 512->1024 on 14 x 14 1.04 / 1.08, 512->512 1.00 / 1.02 on 14 x 14 and 1.01 / 1.06 on 13 x 13,
// 1x1/2 512->1024 to 14 x 14 1.06 / 0.98; the squeezes 768->384 0.97 / 0.94, 1024->256
// 0.93 / 0.87) ...
constexpr int64_t LANES_MAX_EXPANSION_FULL512 = 1;
// ... and the stream kernel serves up to this many output channels on maps of more than
// LANES_MAX_POSITIONS_FLAT positions (light_resnet50's 64->256 on 56 x 56: stream 459, packed
// 496 us; 128->512 on 28 x 28 428 / 457; 512->256 794 / 911; 512->1024 a tie at 955); on
// smaller ones STREAM_MAX_CHANNELS holds (bench/conv_micro.py's native_kernel, one / two
// threads, stream against packed: 256->256 on 14 x 14 106 / 67 against 101 / 58 us, 256->512
// 213 / 115 against 202 / 106, 512->512 on 13 x 13 389 / 200 against 363 / 189).
constexpr int64_t STREAM_MAX_CHANNELS_FULL512 = 512;

// The direct kernel with strides (phase planes): where "auto" takes it
constexpr int64_t DIRECT_AUTO_MAX_STRIDE = 3;
constexpr int64_t DIRECT_MAX_STRIDED_CHANNELS = 8;

}  // namespace

// "auto" picks by the measured rules above; a forced kernel the geometry or ISA cannot run is
// a ValueError.
ConvKernel choose_conv_kernel(const ConvShape& s, int64_t mg, const IsaKernels& isa, bool exact,
                              const std::string& kernel, ConvTuning tuning) {
    const bool unit = s.sh == 1 && s.sw == 1;
    const bool lanes_ok = isa.conv_lanes_ok;
    const bool avx512 = isa.lmr >= 16;  // (avx2's lanes tiles are 8 channels)
    const bool full = avx512 && tuning == FULL512;
    const bool one = s.kh * s.kw == 1;
    if (kernel == "packed") return PACKED;
    const bool wino_ok = s.kh == 3 && s.kw == 3 && unit && s.dh == 1 && s.dw == 1;
    if (kernel == "winograd") {
        if (exact)
            throw nb::value_error(
                "the winograd kernel computes other sums than exact mode's");
        if (!wino_ok)
            throw nb::value_error(
                "the winograd kernel needs a 3x3 kernel, unit strides and dilations");
        return WINO;
    }
    const bool phases_ok = s.sh <= DIRECT_MAX_STRIDE && s.sw <= DIRECT_MAX_STRIDE;
    if (kernel == "direct") {
        if (!phases_ok) throw nb::value_error("the direct kernel needs strides up to 4");
        return DIRECT;
    }
    // x's own planes are the column matrix (the stream kernel)
    const bool in_place = one && unit && !s.ph && !s.pw && s.oh == s.h && s.ow == s.w;
    if (kernel == "stream") {
        if (!in_place)
            throw nb::value_error(
                "the stream kernel needs a 1x1 kernel, unit strides and no padding");
        return STREAM;
    }
    if (kernel == "lanes") {
        if (!lanes_ok)
            throw nb::value_error(("isa '" + std::string(isa.name) +
                                   "' has no channels-in-lanes conv kernel")
                                      .c_str());
        return LANES;
    }
    if (kernel != "auto")
        throw nb::value_error(("unknown conv kernel '" + kernel +
                               "'; expected auto, direct, lanes, packed, stream or "
                               "winograd")
                                  .c_str());
    if (!exact && wino_ok && lanes_ok && s.c >= WINO_MIN_CHANNELS &&
        mg >= WINO_MIN_CHANNELS) {
        const int64_t nr = isa.nr;
        const double tiles = static_cast<double>((s.oh + 1) / 2) * ((s.ow + 1) / 2);
        const double tpad = std::ceil(tiles / nr) * nr;
        const double macs = 9.0 * s.c * mg * static_cast<double>(s.oh) * s.ow;
        const double u_bytes = 64.0 * s.c * mg;  // 16 floats per weight window
        const bool enough_tiles =
            tiles >= (full ? WINO_MIN_TILES_FULL512 : WINO_MIN_TILES) ||
            (!avx512 && tiles >= nr && u_bytes <= WINO_MAX_U_BYTES_FEW_TILES_AVX2);
        const double min_macs =
            s.c >= WINO_DEEP_CHANNELS ? WINO_MIN_MACS_DEEP : WINO_MIN_MACS;
        if (macs >= min_macs && 64.0 * s.c * tpad <= WINO_MAX_V_BYTES &&
            (avx512 || mg >= WINO_MIN_OUT_CHANNELS_AVX2) && enough_tiles)
            return WINO;
    }
    // Strided windows over few input channels (the RGB stems): the direct kernel on phase
    // planes (bench/conv_micro.py, one thread, Zen 4, against the kernel auto took before:
    // 3x3/2 3->64 on 224 x 224 0.90 on avx512 and avx2, 7x7/2 3->64 0.93 and 0.89, 7x7/2
    // 3->96 0.96 and 0.89, 3x3/2 8->32 0.93 and 0.93; with 16 channels lanes won, 1.08 and
    // 1.06, and at stride 4 too, 11x11/4 3->96 1.06 and 1.07)
    if (lanes_ok && !one && !unit && s.sh <= DIRECT_AUTO_MAX_STRIDE &&
        s.sw <= DIRECT_AUTO_MAX_STRIDE && s.c <= DIRECT_MAX_STRIDED_CHANNELS)
        return DIRECT;
    // From every layer of light_resnet50 and light_squeezenet (bench/conv_micro.py
    // --kernels): channels in lanes where the windows are deep or the rows narrow, the
    // direct kernel for shallow windows on rows that fill its tiles, x's own
    // planes for plain 1x1 kernels on large maps with few output channels (stream), and
    // packed columns for the other 1x1 kernels and for very shallow strided windows.
    const int64_t positions = s.oh * s.ow, depth = s.c * s.kh * s.kw;
    // the direct kernel's row tiles: 4 * ow below this fills less than 3/4 of their lanes
    const int64_t cnr = isa.cnr;
    const int64_t fill_quarters = DIRECT_MIN_FILL_QUARTERS * ((s.ow + cnr - 1) / cnr) * cnr;
    const bool too_deep_to_stream = avx512 && depth > STREAM_MAX_DEPTH_AVX512;
    if (lanes_ok && !avx512) {  // avx2: rules of its own
        // (in double: no overflow, whatever the pads)
        const double image_bytes = 4.0 * static_cast<double>(s.c) *
                                   (static_cast<double>(s.h) + 2.0 * s.ph) *
                                   (static_cast<double>(s.w) + 2.0 * s.pw);
        if (unit && !one && mg >= PACKED_MIN_CHANNELS_AVX2 &&
            image_bytes > static_cast<double>(PACKED_MIN_IMAGE_BYTES_AVX2))
            return PACKED;
        if (!one && depth >= (unit ? LANES_MIN_DEPTH_UNIT_AVX2 : LANES_MIN_DEPTH))
            return LANES;
        if (one && (positions == 1 || (positions <= LANES_MAX_POSITIONS_1X1 &&
                                       (positions < cnr || positions % cnr > isa.conv_tail) &&
                                       4.0 * static_cast<double>(mg) * depth <=
                                           LANES_MAX_WEIGHT_BYTES_1X1_AVX2)))
            return LANES;
        const bool squeeze =
            (s.c >= 2 * mg && mg <= LANES_MAX_SQUEEZE_AVX2) ||
            (s.c >= LANES_DEEP_SQUEEZE_RATIO_AVX2 * mg && mg <= LANES_MAX_DEEP_SQUEEZE_AVX2 &&
             positions >= LANES_MIN_DEEP_SQUEEZE_POSITIONS_AVX2);
        if (in_place && squeeze) return LANES;
        if (in_place && mg <= STREAM_MAX_CHANNELS_AVX2) return STREAM;
        return unit && !one ? DIRECT : PACKED;
    }
    if (lanes_ok) {
        const bool heavy = full && positions > 1 && positions <= LANES_MAX_POSITIONS_1X1 &&
                           4.0 * static_cast<double>(mg) * depth >
                               LANES_MAX_WEIGHT_BYTES_1X1_FULL512;
        const bool flat = (in_place || !unit) && depth >= LANES_MIN_DEPTH_FLAT &&
                          positions <= LANES_MAX_POSITIONS_FLAT &&
                          (!full || mg < LANES_MAX_EXPANSION_FULL512 * s.c);
        if (one ? !heavy && (positions <= LANES_MAX_POSITIONS_1X1 || flat)
                : unit ? (s.ow % cnr ? depth >= LANES_MIN_DEPTH_UNIT
                                     : depth >= LANES_MIN_DEPTH_WHOLE_ROWS &&
                                           s.ow < DIRECT_MIN_WIDTH_WHOLE_ROWS) ||
                             4 * s.ow < fill_quarters
                       : depth >= LANES_MIN_DEPTH)
            return LANES;
    }
    if (unit && !one) return DIRECT;
    if (in_place && !too_deep_to_stream &&
        (full && positions > LANES_MAX_POSITIONS_FLAT ? mg <= STREAM_MAX_CHANNELS_FULL512
                                                       : mg < STREAM_MAX_CHANNELS))
        return STREAM;
    return PACKED;
}

}  // namespace graphrt_simd
