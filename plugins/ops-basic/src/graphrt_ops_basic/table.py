"""The operator table of graphrt-ops-basic: one line per operator.

``since``/``until`` are the opset versions of the ai.onnx domain a kernel implements; one kernel
usually covers every version, reading ``node.opset`` where the versions differ.

The kernel modules are stand-ins (graphrt.lazy): ``binary.Add`` names the class, and the module
is imported the first time a session uses one of its operators, so a session does not pay for
kernels its model does not use.  Domain strings are therefore constants of this module.
"""

from __future__ import annotations

from graphrt.plugin import OpDef, kernel_modules

binary, constant, matmul, unary, views = kernel_modules(
    __package__, "binary constant matmul unary views"
)

OPERATORS: list[OpDef] = [
    # element-wise binary (binary.py)
    OpDef("Add", binary.Add),
    OpDef("Sub", binary.Sub),
    OpDef("Mul", binary.Mul),
    # element-wise unary (unary.py)
    OpDef("Relu", unary.Relu),
    # matrix products (matmul.py)
    OpDef("MatMul", matmul.MatMul),
    OpDef("Gemm", matmul.Gemm),
    # views (views.py)
    OpDef("Identity", views.Identity),
    OpDef("Reshape", views.Reshape),
    OpDef("Flatten", views.Flatten),
    OpDef("Squeeze", views.Squeeze),
    OpDef("Unsqueeze", views.Unsqueeze),
    # constants (constant.py)
    OpDef("Constant", constant.Constant),
]

# -- element-wise families (binary.py, unary.py, elementwise helpers) --------------------------
activation, cast, dropout, reduce, softmax, variadic, where = kernel_modules(
    __package__, "activation cast dropout reduce softmax variadic where"
)

OPERATORS += [
    # element-wise binary (binary.py)
    OpDef("Div", binary.Div),
    OpDef("Pow", binary.Pow),
    OpDef("Mod", binary.Mod, since=10),
    OpDef("BitShift", binary.BitShift, since=11),
    OpDef("Equal", binary.Equal),
    OpDef("Less", binary.Less),
    OpDef("Greater", binary.Greater),
    OpDef("LessOrEqual", binary.LessOrEqual, since=12),
    OpDef("GreaterOrEqual", binary.GreaterOrEqual, since=12),
    OpDef("And", binary.And),
    OpDef("Or", binary.Or),
    OpDef("Xor", binary.Xor),
    # variadic (variadic.py)
    OpDef("Sum", variadic.Sum),
    OpDef("Max", variadic.Max),
    OpDef("Min", variadic.Min),
    OpDef("Mean", variadic.Mean),
    # element-wise unary (unary.py)
    OpDef("Sigmoid", unary.Sigmoid),
    OpDef("Tanh", unary.Tanh),
    OpDef("Erf", unary.Erf, since=9),
    OpDef("Sqrt", unary.Sqrt),
    OpDef("Exp", unary.Exp),
    OpDef("Log", unary.Log),
    OpDef("Neg", unary.Neg),
    OpDef("Abs", unary.Abs),
    OpDef("Reciprocal", unary.Reciprocal),
    OpDef("Floor", unary.Floor),
    OpDef("Ceil", unary.Ceil),
    OpDef("Sign", unary.Sign, since=9),
    OpDef("Softplus", unary.Softplus),
    OpDef("Not", unary.Not),
    # activations with attributes, Clip (activation.py)
    OpDef("LeakyRelu", activation.LeakyRelu),
    OpDef("Elu", activation.Elu),
    OpDef("Selu", activation.Selu),
    OpDef("HardSigmoid", activation.HardSigmoid),
    OpDef("Clip", activation.Clip),
    # select, conversion, dropout (where.py, cast.py, dropout.py)
    OpDef("Where", where.Where, since=9),
    OpDef("Cast", cast.Cast),
    OpDef("CastLike", cast.CastLike, since=15),
    OpDef("Dropout", dropout.Dropout),
    # along one axis (softmax.py)
    OpDef("Softmax", softmax.Softmax),
    OpDef("LogSoftmax", softmax.LogSoftmax),
    OpDef("Hardmax", softmax.Hardmax),
    # reductions (reduce.py)
    OpDef("ReduceSum", reduce.ReduceSum),
    OpDef("ReduceMean", reduce.ReduceMean),
    OpDef("ReduceMax", reduce.ReduceMax),
    OpDef("ReduceMin", reduce.ReduceMin),
    OpDef("ReduceProd", reduce.ReduceProd),
]

# -- neural-network operators (conv.py, pool.py, norm.py) -------------------------------------
conv, norm, pool = kernel_modules(__package__, "conv norm pool")

OPERATORS += [
    # convolutions (conv.py)
    OpDef("Conv", conv.Conv),
    OpDef("ConvTranspose", conv.ConvTranspose),
    # pools (pool.py)
    OpDef("MaxPool", pool.MaxPool),
    OpDef("AveragePool", pool.AveragePool),
    OpDef("LpPool", pool.LpPool),
    OpDef("GlobalAveragePool", pool.GlobalAveragePool),
    OpDef("GlobalMaxPool", pool.GlobalMaxPool),
    OpDef("GlobalLpPool", pool.GlobalLpPool),
    # normalizations (norm.py)
    OpDef("BatchNormalization", norm.BatchNormalization),
    OpDef("InstanceNormalization", norm.InstanceNormalization),
    OpDef("LayerNormalization", norm.LayerNormalization, since=17),
    OpDef("LRN", norm.LRN),
]

# -- tensor and shape operators (shape.py, tensor.py, slice.py, pad.py, gather.py) ------------
gather, pad, shape, slice, tensor = kernel_modules(__package__, "gather pad shape slice tensor")

OPERATORS += [
    # shapes (shape.py)
    OpDef("Shape", shape.Shape),
    OpDef("Size", shape.Size),
    OpDef("ConstantOfShape", shape.ConstantOfShape, since=9),
    OpDef("Range", shape.Range, since=11),
    OpDef("Expand", shape.Expand, since=8),
    # whole-tensor rearrangement (tensor.py, slice.py, pad.py)
    OpDef("Concat", tensor.Concat),
    OpDef("Split", tensor.Split),
    OpDef("Transpose", tensor.Transpose),
    OpDef("Tile", tensor.Tile),
    OpDef("Slice", slice.Slice),
    OpDef("Pad", pad.Pad),
    # indexing by values (gather.py)
    OpDef("Gather", gather.Gather),
    OpDef("GatherElements", gather.GatherElements, since=11),
    OpDef("ScatterElements", gather.ScatterElements, since=11),
    OpDef("NonZero", gather.NonZero, since=9),
]

# -- graphrt's own operators, written by the fusion passes (fused.py, gelu.py; fusion/) -------
conv_pool, fused, gelu = kernel_modules(__package__, "conv_pool fused gelu")

GRAPHRT = "com.graphrt"
#: optimizers.DOMAIN and flex_attention.DOMAIN (tests/test_cold_start.py keeps them equal).
TRAINING = "ai.onnx.preview.training"
PREVIEW = "ai.onnx.preview"

OPERATORS += [
    # Gelu: ai.onnx from opset 20, and ours for models of older opsets (gelu.py)
    OpDef("Gelu", gelu.Gelu, since=20),
    OpDef("Gelu", gelu.Gelu, domain=GRAPHRT),
    # products with their bias and activation applied in place (fused.py)
    OpDef("FusedConv", fused.FusedConv, domain=GRAPHRT),
    OpDef("FusedGemm", fused.FusedGemm, domain=GRAPHRT),
    OpDef("FusedMatMul", fused.FusedMatMul, domain=GRAPHRT),
    OpDef("FusedBatchNormalization", fused.FusedBatchNormalization, domain=GRAPHRT),
    # a convolution and the MaxPool after it (conv_pool.py)
    OpDef("FusedConvPool", conv_pool.FusedConvPool, domain=GRAPHRT),
    # LayerNormalization for models of opsets before 17 (norm.py)
    OpDef("LayerNormalization", norm.LayerNormalization, domain=GRAPHRT),
]

# == family: math == (trigonometric and hyperbolic, rounding, tests, bitwise, more activations,
# more normalizations)
bitwise, normalize, trig = kernel_modules(__package__, "bitwise normalize trig")

OPERATORS += [
    # trigonometric and hyperbolic (trig.py)
    OpDef("Sin", trig.Sin, since=7),
    OpDef("Cos", trig.Cos, since=7),
    OpDef("Tan", trig.Tan, since=7),
    OpDef("Asin", trig.Asin, since=7),
    OpDef("Acos", trig.Acos, since=7),
    OpDef("Atan", trig.Atan, since=7),
    OpDef("Sinh", trig.Sinh, since=9),
    OpDef("Cosh", trig.Cosh, since=9),
    OpDef("Asinh", trig.Asinh, since=9),
    OpDef("Acosh", trig.Acosh, since=9),
    OpDef("Atanh", trig.Atanh, since=9),
    # rounding and float class tests (unary.py)
    OpDef("Round", unary.Round, since=11),
    OpDef("IsNaN", unary.IsNaN, since=9),
    OpDef("IsInf", unary.IsInf, since=10),
    # bitwise operators and BitCast (bitwise.py)
    OpDef("BitwiseAnd", bitwise.BitwiseAnd, since=18),
    OpDef("BitwiseOr", bitwise.BitwiseOr, since=18),
    OpDef("BitwiseXor", bitwise.BitwiseXor, since=18),
    OpDef("BitwiseNot", bitwise.BitwiseNot, since=18),
    OpDef("BitCast", bitwise.BitCast, since=26),
    # more activations (activation.py)
    OpDef("PRelu", activation.PRelu),
    OpDef("Celu", activation.Celu, since=12),
    OpDef("Shrink", activation.Shrink, since=9),
    OpDef("Softsign", activation.Softsign),
    OpDef("ThresholdedRelu", activation.ThresholdedRelu, since=10),
    OpDef("HardSwish", activation.HardSwish, since=14),
    OpDef("Mish", activation.Mish, since=18),
    OpDef("Swish", activation.Swish, since=24),
    # more normalizations (normalize.py)
    OpDef("LpNormalization", normalize.LpNormalization),
    OpDef("GroupNormalization", normalize.GroupNormalization, since=18),
    OpDef("MeanVarianceNormalization", normalize.MeanVarianceNormalization, since=9),
]
# == end: math ==

# == family: reduce == (more reductions, arg and top-k search, unique, cumulative, linear algebra)
cumulative, linalg, search, unique = kernel_modules(__package__, "cumulative linalg search unique")

OPERATORS += [
    # reductions with steps before and after the sum (reduce.py)
    OpDef("ReduceL1", reduce.ReduceL1),
    OpDef("ReduceL2", reduce.ReduceL2),
    OpDef("ReduceSumSquare", reduce.ReduceSumSquare),
    OpDef("ReduceLogSum", reduce.ReduceLogSum),
    OpDef("ReduceLogSumExp", reduce.ReduceLogSumExp),
    # positions of extremes (search.py)
    OpDef("ArgMax", search.ArgMax),
    OpDef("ArgMin", search.ArgMin),
    OpDef("TopK", search.TopK),
    # distinct values (unique.py), running sums and products (cumulative.py)
    OpDef("Unique", unique.Unique, since=11),
    OpDef("CumSum", cumulative.CumSum, since=11),
    OpDef("CumProd", cumulative.CumProd, since=26),
    # linear algebra (linalg.py)
    OpDef("Det", linalg.Det, since=11),
    OpDef("Einsum", linalg.Einsum, since=12),
]
# == end: reduce ==

# == family: indexing == (N-d gathers and scatters, masks, one-hot, triangles, layout moves)
compress, depth, gather_nd, onehot, reverse, triangle = kernel_modules(
    __package__, "compress depth gather_nd onehot reverse triangle"
)

OPERATORS += [
    # index tuples (gather_nd.py); Scatter, ScatterElements' old name (gather.py)
    OpDef("GatherND", gather_nd.GatherND, since=11),
    OpDef("ScatterND", gather_nd.ScatterND, since=11),
    OpDef("TensorScatter", gather_nd.TensorScatter, since=24),
    OpDef("Scatter", gather.Scatter, since=9, until=10),
    # masks and one-hot (compress.py, onehot.py)
    OpDef("Compress", compress.Compress, since=9),
    OpDef("OneHot", onehot.OneHot, since=9),
    # diagonals (triangle.py)
    OpDef("Trilu", triangle.Trilu, since=14),
    OpDef("EyeLike", triangle.EyeLike, since=9),
    # layout moves (reverse.py, depth.py)
    OpDef("ReverseSequence", reverse.ReverseSequence, since=10),
    OpDef("SpaceToDepth", depth.SpaceToDepth),
    OpDef("DepthToSpace", depth.DepthToSpace),
]
# == end: indexing ==

# == family: resample == (Resize, Upsample, GridSample, AffineGrid)
grid, resize = kernel_modules(__package__, "grid resize")

OPERATORS += [
    # separable interpolation (resize.py, resize_taps.py)
    OpDef("Resize", resize.Resize, since=10),
    OpDef("Upsample", resize.Upsample, since=7, until=9),
    # sampling at the positions of a flow field (grid.py)
    OpDef("GridSample", grid.GridSample, since=16),
    OpDef("AffineGrid", grid.AffineGrid, since=20),
]
# == end: resample ==

# == family: detection == (RoiAlign, NonMaxSuppression, DeformConv, Col2Im, MaxUnpool,
# CenterCropPad)
col2im, crop, deform_conv, nms, roi_align, unpool = kernel_modules(
    __package__, "col2im crop deform_conv nms roi_align unpool"
)

OPERATORS += [
    # regions and boxes (roi_align.py, nms.py)
    OpDef("RoiAlign", roi_align.RoiAlign, since=10),
    OpDef("NonMaxSuppression", nms.NonMaxSuppression, since=10),
    # deformable convolution, folding columns back, unpooling (deform_conv.py, col2im.py,
    # unpool.py)
    OpDef("DeformConv", deform_conv.DeformConv, since=19),
    OpDef("Col2Im", col2im.Col2Im, since=18),
    OpDef("MaxUnpool", unpool.MaxUnpool, since=9),
    # centred crop or pad (crop.py)
    OpDef("CenterCropPad", crop.CenterCropPad, since=18),
]
# == end: detection ==

# == family: signal == (DFT, STFT, windows, MelWeightMatrix, ImageDecoder, TfIdfVectorizer)
image, spectral, tfidf, windows = kernel_modules(__package__, "image spectral tfidf windows")

OPERATORS += [
    # Fourier transforms (spectral.py)
    OpDef("DFT", spectral.DFT, since=17),
    OpDef("STFT", spectral.STFT, since=17),
    # windows and mel filters, computed per plan (windows.py)
    OpDef("HannWindow", windows.HannWindow, since=17),
    OpDef("HammingWindow", windows.HammingWindow, since=17),
    OpDef("BlackmanWindow", windows.BlackmanWindow, since=17),
    OpDef("MelWeightMatrix", windows.MelWeightMatrix, since=17),
    # n-gram counts (tfidf.py)
    OpDef("TfIdfVectorizer", tfidf.TfIdfVectorizer, since=9),
    # image decoding through the optional Pillow (image.py)
    OpDef("ImageDecoder", image.ImageDecoder, since=20),
]
# == end: signal ==

# == family: training == (losses, optimizers, random generators)
generators, loss, optimizers = kernel_modules(__package__, "generators loss optimizers")

OPERATORS += [
    # losses (loss.py)
    OpDef("NegativeLogLikelihoodLoss", loss.NegativeLogLikelihoodLoss, since=12),
    OpDef("SoftmaxCrossEntropyLoss", loss.SoftmaxCrossEntropyLoss, since=12),
    # optimizers of ai.onnx.preview.training (optimizers.py)
    OpDef("Adagrad", optimizers.Adagrad, domain=TRAINING),
    OpDef("Adam", optimizers.Adam, domain=TRAINING),
    OpDef("Momentum", optimizers.Momentum, domain=TRAINING),
    # random generators, never folded (generators.py)
    OpDef("RandomNormal", generators.RandomNormal),
    OpDef("RandomUniform", generators.RandomUniform),
    OpDef("RandomNormalLike", generators.RandomNormalLike),
    OpDef("RandomUniformLike", generators.RandomUniformLike),
    OpDef("Multinomial", generators.Multinomial, since=7),
    OpDef("Bernoulli", generators.Bernoulli, since=15),
]
# == end: training ==

# == family: sequence == (RNN, LSTM, GRU and the attention family: issue 12)
(rnn,) = kernel_modules(__package__, "rnn")

OPERATORS += [
    # recurrent layers, every opset: 1, 3 (GRU), 7, 14 (layout), 22 (rnn.py, rnn_cells.py)
    OpDef("RNN", rnn.RNN),
    OpDef("GRU", rnn.GRU),
    OpDef("LSTM", rnn.LSTM),
]
# == end: sequence ==

# == family: attention == (the attention family: issue 12)
attention, causal_conv, flex_attention, linear_attention, rms_norm, rotary, swiglu = kernel_modules(
    __package__, "attention causal_conv flex_attention linear_attention rms_norm rotary swiglu"
)

OPERATORS += [
    # scaled dot-product attention, opsets 23-25 (attention.py, attention_mask.py)
    OpDef("Attention", attention.Attention, since=23),
    OpDef("FlexAttention", flex_attention.FlexAttention, domain=PREVIEW),
    # recurrent linear attention and the causal depthwise convolution before it
    # (linear_attention.py, causal_conv.py)
    OpDef("LinearAttention", linear_attention.LinearAttention, since=27),
    OpDef("CausalConvWithState", causal_conv.CausalConvWithState, since=27),
    # positions, normalization and gating of transformer blocks (rotary.py, rms_norm.py,
    # swiglu.py)
    OpDef("RotaryEmbedding", rotary.RotaryEmbedding, since=23),
    OpDef("RMSNormalization", rms_norm.RMSNormalization, since=23),
    OpDef("SwiGLU", swiglu.SwiGLU, since=28),
    # the same kernels for the fusion passes of models before opset 23 (fusion/attention.py,
    # fusion/rms_norm.py)
    OpDef("Attention", attention.Attention, domain=GRAPHRT),
    OpDef("RMSNormalization", rms_norm.RMSNormalization, domain=GRAPHRT),
]
# == end: attention ==

# == family: quantization == (issue 17: linear quantization, integer and quantized products)
qconv, qmatmul, quantize = kernel_modules(__package__, "qconv qmatmul quantize")

OPERATORS += [
    # linear (de)quantization, opsets 10-28: per tensor, per axis, blocked (quantize.py)
    OpDef("QuantizeLinear", quantize.QuantizeLinear, since=10),
    OpDef("DequantizeLinear", quantize.DequantizeLinear, since=10),
    OpDef("DynamicQuantizeLinear", quantize.DynamicQuantizeLinear, since=11),
    # exact integer products through float BLAS, requantized (qmatmul.py, qconv.py)
    OpDef("MatMulInteger", qmatmul.MatMulInteger, since=10),
    OpDef("QLinearMatMul", qmatmul.QLinearMatMul, since=10),
    OpDef("ConvInteger", qconv.ConvInteger, since=10),
    OpDef("QLinearConv", qconv.QLinearConv, since=10),
]
# == end: quantization ==
