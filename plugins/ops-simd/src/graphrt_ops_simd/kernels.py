"""MatMul and Gemm on the native GEMM, falling back to the table's numpy kernel.

A kernel here wraps the numpy kernel its path was given (``numpy_factory(node)``).  ``infer``
first lets the numpy kernel validate and shape the node on a probe context (so errors and
output types are the table's, word for word), then decides per plan:

* exact mode, float32: the native exact GEMM (canonical order, bit-identical to
  ``graphrt_ops_basic.matmul.exact_matmul``) for every MatMul and Gemm it can address;
* fast mode, float32, constant B, avx2 and avx512: the native packed GEMM with B packed once
  per plan and Gemm's alpha and bias folded into the epilogue (``FAST_NATIVE``), except for a
  product of a few rows whose B is too large to hold a packed copy of beside it
  (``FAST_ANY_B_ROWS``, ``FAST_VECTOR_MAX_B_BYTES``);
* fast mode, float32, a run-time B (MatMul): the native GEMM with B packed into the run
  state's own buffer per run, where numpy's BLAS has no AVX-512 kernels for this CPU, on the
  avx512 and avx2 paths (``dynamic_b_native``);
* anything else (other dtypes, other run-time B in fast mode, ...): the numpy kernel, planned
  on the real context as if this wrapper did not exist.

Rows are split into blocks of ROW_BLOCK, a count that depends on shapes only: a fast product
hands them to the plugin's own threads in one native call (src/native/pool.h), an exact one to
the session's intra-op pool; a row's arithmetic never depends on its block, so results do not
depend on threads.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from graphrt.plugin import InferContext, KernelContext, NodeInfo, OpKernel
from graphrt_ops_basic._geometry import call_all
from graphrt_ops_basic.matmul import COL_BLOCK, COL_SPLIT_THRESHOLD

from . import _native

#: Rows per block when a product is split over intra-op threads (as in ops-basic).
ROW_BLOCK = 64
#: Multiply-adds from which a product is split over the intra-op threads.
PARALLEL_THRESHOLD = 1 << 21
#: Whether fast mode takes a path's native GEMM for products with a constant B (packed once
#: per plan, Gemm's alpha, bias and Relu in its epilogue).  The scalar kernels never beat BLAS:
#: that path is for exact mode, and its fast mode keeps numpy's products.  On avx2 and avx512
#: the packed product is ahead of numpy's OpenBLAS (its AVX-512 kernels, on the Zen 4 these
#: were measured on) at every shape measured, one thread, native / numpy microseconds, B
#: contiguous as the numpy kernel holds it: 4 to 127 rows of (K, N) = (1024, 10), (512, 10),
#: (256, 10), (1024, 32), (256, 64), (128, 128), (64, 64), (2048, 100), (768, 768), e.g. avx2
#: 16 x 128 @ 128 x 128 4.8 / 6.2, 5 x 2048 @ 2048 x 100 21 / 58, 64 x 1024 @ 1024 x 32 37 /
#: 48, 96 x 1024 @ 1024 x 10 28.1 / 28.0 (the closest); 128-row products 1.1-1.25x ahead
#: (bench/gemm_micro.py); one to three rows run a row at a time over several panels of B
#: (gemm_rows.inc, VECTOR_MAX_ROWS; avx512 1 x 1024 @ 1024 x 1000 44 us, numpy 51).
FAST_NATIVE = {"scalar": False, "avx2": True, "avx512": True}
#: Products of fewer rows than this keep numpy's product when B is larger than
#: FAST_VECTOR_MAX_B_BYTES: the packed copy is held beside the model's own B, and a
#: classifier's first layer at batch 1 (light_vgg19's 25088 x 4096, 392 MiB) would double its
#: weight.
FAST_ANY_B_ROWS = 8
FAST_VECTOR_MAX_B_BYTES = 32 << 20
#: Products of at most this many rows (the row-at-a-time kernel) split their columns over the
#: plugin's threads from ops-basic's COL_SPLIT_THRESHOLD on.
FAST_VECTOR_MAX_ROWS = {"scalar": 0, "avx2": 3, "avx512": 3}
F32 = np.dtype(np.float32)

NumpyFactory = Callable[[NodeInfo], OpKernel]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a native step needs; any other ``ctx.prepared`` belongs to the numpy kernel."""

    exact: bool
    a_shape: tuple[int, ...]  # A as the product reads it (MatMul: rank >= 2, batch broadcast)
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]  # rank >= 2
    pairs: tuple[tuple[int, int], ...]  # (A batch index, B batch index) per output batch
    rows_flat: bool  # B is one matrix: A's batch rows are one (batch*M, K) matrix
    blocks: int  # row blocks of the flattened product
    packed: Any = None  # _native.PackedB of a constant B (fast mode)
    b_dynamic: bool = False  # fast mode, a run-time B: packed per run into the run state's own
    b_const: np.ndarray | None = None  # a constant B, C-contiguous (exact mode)
    bias: np.ndarray | None = None  # Gemm fast mode: beta*C as a per-column or per-row vector
    bias_axis: str = "col"
    alpha: float = 1.0  # Gemm fast mode: in the epilogue
    alpha_arr: np.ndarray | None = None  # Gemm exact mode: y = y * alpha (skipped when 1)
    c_scaled: np.ndarray | None = None  # Gemm: beta*C added after the product (numpy)
    c_in_epilogue: bool = False
    activation: str = "none"  # the native epilogue's activation (FusedMatMul: none or relu)
    gelu: bool = False  # FusedMatMul's Gelu (erf form): the path's native Gelu after the product
    b_half: np.ndarray | None = None  # exact mode, a half-stored B: widened per run into ...
    b_scratch: int | None = None  # ... this scratch (float32, b_shape) before the product
    fused: Any = None  # exact mode's fused bias and activation: ops-basic's Epilogue, after it


def contiguous_call(
    x: np.ndarray,
    y: np.ndarray,
    shape: tuple[int, ...],
    make: Callable[[np.ndarray, np.ndarray], Callable[[], Any]],
) -> Callable[[], Any]:
    """The step of a native kernel that reads X and writes Y as C-contiguous arrays of
    ``shape`` (and may write Y over X): ``make(x, y)`` bound once per run state, or for a
    strided X or Y (a view some kernel produced) a step that runs ``make`` in place on a
    contiguous float32 copy of X and copies the result into Y, per run."""
    if x.flags.c_contiguous and y.flags.c_contiguous:
        return make(x.reshape(shape), y.reshape(shape))
    return functools.partial(_through_copy, x, y, shape, make)


def _through_copy(
    x: np.ndarray,
    y: np.ndarray,
    shape: tuple[int, ...],
    make: Callable[[np.ndarray, np.ndarray], Callable[[], Any]],
) -> None:
    res = np.array(x, dtype=F32, order="C").reshape(shape)  # one copy, X's own
    make(res, res)()
    np.copyto(y, res.reshape(y.shape))


def trial_infer(kernel: OpKernel, ctx: InferContext, hidden: Sequence[int] = ()) -> InferContext:
    """Run the numpy kernel's ``infer`` on a copy of ``ctx``: its checks, its plan, its types.

    Inputs in ``hidden`` lose their known values in the copy: for a caller that needs only the
    checks and the types, so that the numpy kernel does not prepare a constant it would discard
    (Gemm's contiguous copy of a transposed B, milliseconds per large B).
    """
    n = ctx.num_inputs
    trial = InferContext(
        [ctx.dtype(i) for i in range(n)],
        [ctx.shape(i) for i in range(n)],
        [None if i in hidden else ctx.known_value(i) for i in range(n)],
        ctx.num_outputs,
        exact=ctx.exact,
    )
    kernel.infer(trial)
    return trial


def probe(
    kernel: OpKernel, ctx: InferContext, hidden: Sequence[int] = ()
) -> tuple[np.dtype, tuple[int, ...]]:
    """The numpy kernel's output type (dtype, shape) for ``ctx``, after its checks."""
    return trial_infer(kernel, ctx, hidden).output_types()[0]


class NativeKernel(OpKernel):
    """A native kernel of one ISA wrapping the numpy kernel ``base`` of its path: a plan of
    type ``plan_type`` in ``ctx.prepared`` runs natively, any other is the numpy kernel's."""

    supports_exact = True  # exact mode runs the canonical-order native kernel (or numpy's)
    plan_type: ClassVar[type]

    def __init__(self, node: NodeInfo, numpy_factory: NumpyFactory, isa: str) -> None:
        super().__init__(node)
        self.base = numpy_factory(node)
        self.isa = isa

    def fallback(self, ctx: InferContext) -> None:
        self.base.infer(ctx)

    def runs_natively(self, prepared: Any) -> bool:
        """Whether a step planned as ``prepared`` runs this native kernel (``graphrt explain``
        and ``check`` ask, per mode) rather than the numpy kernel it wraps."""
        return isinstance(prepared, self.plan_type)

    def assembled_offsets(
        self, input_shapes: Sequence[tuple[int, ...]], output_shape: tuple[int, ...]
    ) -> list[int] | None:
        # a native kernel computes what its base computes: where the inputs lie is the base's
        return self.base.assembled_offsets(input_shapes, output_shape)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        raise NotImplementedError

    def bind(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        if isinstance(ctx.prepared, self.plan_type):
            return self.bind_native(ctx, inputs, outputs)
        return self.base.bind(ctx, inputs, outputs)

    def run(self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        if isinstance(ctx.prepared, self.plan_type):
            self.bind_native(ctx, inputs, outputs)()
        else:
            self.base.run(ctx, inputs, outputs)


class NativeProduct(NativeKernel):
    """Shared run/bind of MatMul and Gemm: the native product, or the numpy kernel's steps."""

    plan_type = Plan
    #: B may be a float16/bfloat16 weight typed float32 (docs/fp16.md): fast mode packs it in
    #: half-precision panels, exact mode widens it per run into plan scratch, and the numpy
    #: kernel (the fallback) widens it per call.
    half_weight_inputs = (1,)

    def bind_native(
        self, ctx: KernelContext, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> Callable[[], None]:
        """Every call of one run, on views made once per run state (a list of native calls)."""
        p = ctx.prepared
        a, b = self.operands(p, inputs)
        calls: list[Callable[[], Any]] = []
        if p.b_half is not None:  # exact: half -> float32 is exact, the bits are the rounded B's
            b = ctx.scratch[p.b_scratch]
            calls.append(functools.partial(np.copyto, b, p.b_half))
        out = outputs[0].reshape(p.out_shape)
        m, k, n = p.a_shape[-2], p.a_shape[-1], p.out_shape[-1]
        threads = ctx.threads
        packs: dict[int, Any] = {}  # a run-time B's matrices: this run state's packed copies

        def run_state_pack() -> Any:
            """A buffer of this run state for a matrix of a run-time B, repacked at each run
            (made here: concurrent runs of one plan never share it)."""
            return _native.pack_b(np.zeros((k, n), F32), self.isa)

        def packed(b_matrix: np.ndarray, index: int) -> Any:
            """Matrix ``index`` of B as the product reads it: the constant's packed copy, or a
            run-time B's matrix repacked into its run state buffer by an earlier call."""
            if not p.b_dynamic:
                return p.packed
            if index not in packs:
                packs[index] = run_state_pack()
                calls.append(functools.partial(packs[index].repack, b_matrix))
            return packs[index]

        if p.rows_flat:  # explicit extents: reshape(-1, 0) is ambiguous when K or N is 0
            rows = math.prod(p.a_shape[:-1])
            a2, out2 = a.reshape(rows, k), out.reshape(rows, n)
            b2 = None if b is None else b.reshape(k, n)
            bounds = [(i * ROW_BLOCK, min(rows, (i + 1) * ROW_BLOCK)) for i in range(p.blocks)]
            if p.blocks == 1 or not p.exact:  # fast: the native call splits the rows itself
                bounds = [(0, rows)]
            # a product of a few rows splits its columns (gemm's chunks of panels) from the
            # work at which ops-basic splits them (light_resnet50's 2048 -> 1000 head)
            few = (
                rows <= FAST_VECTOR_MAX_ROWS.get(self.isa, 0)
                and rows * n * k >= COL_SPLIT_THRESHOLD
                and n > COL_BLOCK
            )
            # and so does a fast product of up to ROW_BLOCK rows from PARALLEL_THRESHOLD on:
            # gemm's column chunks (an MLP at batch 16, 16 x 512 @ 512 x 512, had run on one)
            wide = not p.exact and rows * n * k >= PARALLEL_THRESHOLD
            split = threads if p.blocks > 1 or (few and not p.exact) or wide else 1
            parts = [self._call(p, a2, b2, out2, lo, hi, split, packed(b2, 0)) for lo, hi in bounds]
        else:
            a3 = a.reshape(math.prod(p.a_shape[:-2]), m, k)
            b3 = b.reshape(math.prod(p.b_shape[:-2]), k, n)
            out3 = out.reshape(len(p.pairs), m, n)
            if p.b_dynamic and len(p.pairs) > 1:  # the repacks and products: one native call
                mats = {ib: run_state_pack() for _, ib in p.pairs}
                products = [
                    self._call(p, a3[ia], None, out3[i], 0, m, packed=mats[ib])
                    for i, (ia, ib) in enumerate(p.pairs)
                ]
                bs = [b3[ib] for ib in mats]
                parts = [_native.GemmBatch(list(mats.values()), bs, products, threads)]
            else:
                parts = [
                    self._call(p, a3[ia], b3[ib], out3[i], 0, m, packed=packed(b3[ib], ib))
                    for i, (ia, ib) in enumerate(p.pairs)
                ]
        if len(parts) == 1:
            calls.append(parts[0])
        elif parts:
            calls.append(functools.partial(ctx.parallel_for, len(parts), _indexed(parts)))
        calls += self.epilogue(ctx, p, inputs, outputs[0])
        return calls[0] if len(calls) == 1 else functools.partial(call_all, calls)

    def operands(self, p: Plan, inputs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def epilogue(
        self, ctx: KernelContext, p: Plan, inputs: Sequence[Any], y: np.ndarray
    ) -> list[Callable[[], Any]]:
        """The calls that follow the product (Gemm's numpy epilogue, FusedMatMul's Gelu)."""
        return []

    def _call(
        self,
        p: Plan,
        a: np.ndarray,
        b: np.ndarray | None,
        out: np.ndarray,
        lo: int,
        hi: int,
        threads: int = 1,
        packed: Any = None,
    ) -> Callable[[], Any]:
        """One native call on rows [lo, hi); a fast product is a ``GemmCall`` (its arguments
        checked once, per run state: a call converts none) on ``packed`` B that splits its rows
        over ``threads`` of the plugin's own threads."""
        if not p.exact:
            return _native.GemmCall(
                a, packed, out, p.bias, p.bias_axis, p.alpha, p.activation, 0.0, 0.0, lo, hi,
                threads,
            )  # fmt: skip
        if b.shape[1] > 1 and b.strides[1] != 4:  # never a slab value; copied per run anyway
            return functools.partial(_exact_copying_b, a, b, out, self.isa, lo, hi)
        return functools.partial(_native.gemm_exact, a, b, out, self.isa, lo, hi)


def _exact_b(ctx: InferContext, plan: Plan, b: np.ndarray) -> Plan:
    """A constant B for the exact kernel: a contiguous float32 copy, or for a half-stored
    weight the half array and a scratch it is widened into per run (no float32 copy kept)."""
    if b.dtype == F32:
        return dataclasses.replace(plan, b_const=np.ascontiguousarray(b))
    return dataclasses.replace(plan, b_half=b, b_scratch=ctx.add_scratch(F32, b.shape))


def pack_weight(b: np.ndarray, isa: str) -> Any:
    """B packed for the fast native GEMM; a float16/bfloat16 B in half-precision panels
    (widened in the micro-kernel), so the plan holds no float32 copy of it."""
    if b.dtype == F32:
        return _native.pack_b(b, isa)
    kind = "float16" if b.dtype == np.float16 else "bfloat16"
    return _native.pack_b_half(b.view(np.uint16), isa, kind)


def _exact_copying_b(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, isa: str, lo: int, hi: int
) -> None:
    _native.gemm_exact(a, np.ascontiguousarray(b), out, isa, lo, hi)


def _indexed(parts: list[Callable[[], Any]]) -> Callable[[int], None]:
    def one(i: int) -> None:
        parts[i]()

    return one


def fast_native(isa: str, rows: int, b_bytes: int) -> bool:
    """Whether fast mode takes the native GEMM for a product with a constant B."""
    return FAST_NATIVE.get(isa, False) and (
        rows >= FAST_ANY_B_ROWS or b_bytes <= FAST_VECTOR_MAX_B_BYTES
    )


#: A MatMul with a run-time B (or W @ X: a constant A) packs B per run (PackedB.repack) and
#: runs the native GEMM where numpy's OpenBLAS runs kernels narrower than the avx512 path's:
#: OpenBLAS 0.3.31 takes its Haswell (AVX2) kernels on Zen 5, and there pack and product took
#: 0.51-0.64 of numpy's time at one thread (512x512 @ 512x512 1037 against 2044 us, 1000x512 @
#: 512x169 706 against 1357, 64x768 @ 768x768 388 against 603, 12 x (128x64 @ 64x128) 115
#: against 206, 8x256 @ 256x256 9.1 against 16.8).  Each product needs FAST_ANY_B_ROWS rows
#: and DYNAMIC_B_MIN_MACS multiply-adds: many tiny ones lost, 16 x (8x64 @ 64x64) 14.7 against
#: 12.8 us.  Where OpenBLAS has AVX-512 kernels (Zen 4, Intel) the product alone was 1.1-1.25x
#: ahead of it before the pack (above), so numpy keeps these there until someone measures it.
#: On the avx2 path (against OpenBLAS's Haswell kernels: both AVX2) pack and product tie with
#: numpy on one product (bench/gemm_micro.py --isa avx2: 0.89-1.04x), and a batch of them is
#: one GemmBatch on the plugin's threads instead of numpy pair by pair on the core's pool:
#: 12 x (128x64 @ 64x128) 255 -> 244 us at one thread, 252 -> 140 at two (Zen 5 running the
#: avx2 path, onnxruntime held to AVX2: 134-145).
DYNAMIC_B_PATHS = ("avx512", "avx2")
DYNAMIC_B_MIN_MACS = 1 << 16
#: OpenBLAS cores (threadpoolctl's "architecture") with AVX-512 kernels.
BLAS_AVX512_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


@functools.cache
def numpy_blas_lacks_avx512() -> bool:
    """Whether numpy's BLAS is an OpenBLAS whose kernels for this CPU are not AVX-512 ones
    (False for any other BLAS, or when threadpoolctl cannot tell)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return False
    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas" and "numpy" in str(lib.get("filepath", "")):
            core = str(lib.get("architecture") or "").lower()
            return bool(core) and core not in BLAS_AVX512_CORES
    return False


def dynamic_b_native(isa: str, rows: int, macs: int) -> bool:
    """Whether fast mode packs a run-time B per run for the native GEMM (``macs``: the
    multiply-adds of one product of ``rows`` rows: all of A's rows on one B, else one batch
    element's)."""
    return (
        isa in DYNAMIC_B_PATHS
        and rows >= FAST_ANY_B_ROWS
        and macs >= DYNAMIC_B_MIN_MACS
        and numpy_blas_lacks_avx512()
    )


def _blocks(rows: int, macs: int) -> int:
    if macs >= PARALLEL_THRESHOLD and rows > ROW_BLOCK:
        return -(-rows // ROW_BLOCK)
    return 1


class MatMul(NativeProduct):
    """numpy matmul semantics (1-D operands promoted and squeezed, batch dims broadcast)."""

    def infer(self, ctx: InferContext) -> None:
        dtype, out = probe(self.base, ctx)
        if dtype != F32 or ctx.dtype(1) != F32:
            return self.fallback(ctx)
        a, b = ctx.shape(0), ctx.shape(1)
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        full = (*batch, a2[-2], b2[-1])
        m, k, n = a2[-2], a2[-1], b2[-1]
        macs = math.prod(full) * max(k, 1)
        b_value = ctx.known_value(1)
        rows_flat = len(b2) == 2
        rows = math.prod(a2[:-1]) if rows_flat else m
        dynamic = not ctx.exact and b_value is None
        if dynamic and not dynamic_b_native(self.isa, rows, rows * k * n):
            return self.fallback(ctx)
        if (
            not ctx.exact
            and not dynamic
            and (not rows_flat or not fast_native(self.isa, rows, b_value.nbytes))
        ):
            return self.fallback(ctx)
        ctx.set_output(0, dtype, out)
        pairs = _batch_pairs(a2[:-2], b2[:-2], batch) if not rows_flat else ()
        plan = Plan(
            exact=ctx.exact,
            a_shape=a2,
            b_shape=b2,
            out_shape=full,
            pairs=pairs,
            rows_flat=rows_flat,
            blocks=_blocks(rows, macs) if rows_flat else 1,
        )
        if ctx.exact:
            if b_value is not None:
                plan = _exact_b(ctx, plan, b_value.reshape(b2))
        elif dynamic:
            plan = dataclasses.replace(plan, b_dynamic=True)
        else:
            plan = dataclasses.replace(plan, packed=pack_weight(b_value.reshape(k, n), self.isa))
        ctx.prepared = plan

    def operands(self, p: Plan, inputs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray | None]:
        a = inputs[0].reshape(p.a_shape)
        if p.packed is not None:
            return a, None
        b = p.b_const if p.b_const is not None else inputs[1].reshape(p.b_shape)
        return a, b


def _batch_pairs(
    a_batch: tuple[int, ...], b_batch: tuple[int, ...], batch: tuple[int, ...]
) -> tuple[tuple[int, int], ...]:
    """For each output batch element (C order): the flat batch index of A and of B."""
    ia = np.broadcast_to(np.arange(math.prod(a_batch)).reshape(a_batch), batch).ravel()
    ib = np.broadcast_to(np.arange(math.prod(b_batch)).reshape(b_batch), batch).ravel()
    return tuple(zip(ia.tolist(), ib.tolist()))


class Gemm(NativeProduct):
    """Y = alpha * A' @ B' + beta * C; exact mode keeps ops-basic's separate numpy epilogue."""

    def infer(self, ctx: InferContext) -> None:
        dtype, (m, n) = probe(self.base, ctx, hidden=(1,))  # its types, not its B
        present = [i for i in range(ctx.num_inputs) if ctx.has_input(i)]
        if any(ctx.dtype(i) != F32 for i in present):
            return self.fallback(ctx)
        ta, tb = self.node.attr("transA", 0), self.node.attr("transB", 0)
        k = ctx.shape(0)[0] if ta else ctx.shape(0)[1]
        macs = m * n * max(k, 1)
        b_value = ctx.known_value(1)
        if ctx.exact and b_value is None and tb:
            return self.fallback(ctx)  # the exact kernel reads rows of B'; B.T has none
        if not ctx.exact and (b_value is None or not fast_native(self.isa, m, b_value.nbytes)):
            return self.fallback(ctx)
        ctx.set_output(0, dtype, (m, n))
        alpha = F32.type(self.node.attr("alpha", 1.0))
        beta = F32.type(self.node.attr("beta", 1.0))
        c_value = ctx.known_value(2) if ctx.has_input(2) else None
        c_scaled = None
        if c_value is not None:
            c_scaled = c_value if beta == 1 else np.multiply(c_value, beta).astype(F32)
        plan = Plan(
            exact=ctx.exact,
            a_shape=(m, k),
            b_shape=(k, n),
            out_shape=(m, n),
            pairs=(),
            rows_flat=True,
            blocks=_blocks(m, macs),
            c_scaled=c_scaled,
        )
        b_mat = None if b_value is None else (b_value.T if tb else b_value)
        if ctx.exact:
            alpha_arr = np.array(alpha, F32) if alpha != 1 else None
            plan = dataclasses.replace(plan, alpha_arr=alpha_arr)
            if b_mat is not None:
                plan = _exact_b(ctx, plan, b_mat)
        else:
            bias, axis = _bias_vector(c_scaled, m, n)
            plan = dataclasses.replace(
                plan,
                packed=pack_weight(b_mat, self.isa),
                alpha=float(alpha),
                bias=bias,
                bias_axis=axis,
                c_in_epilogue=bias is not None,
            )
        ctx.prepared = plan

    def operands(self, p: Plan, inputs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray | None]:
        a = inputs[0].T if self.node.attr("transA", 0) else inputs[0]
        if p.packed is not None:
            return a, None
        return a, (p.b_const if p.b_const is not None else inputs[1])

    def epilogue(
        self, ctx: KernelContext, p: Plan, inputs: Sequence[Any], y: np.ndarray
    ) -> list[Callable[[], Any]]:
        calls: list[Callable[[], Any]] = []
        if p.alpha_arr is not None:
            calls.append(functools.partial(np.multiply, y, p.alpha_arr, out=y))
        has_c = len(inputs) > 2 and inputs[2] is not None
        if has_c and not p.c_in_epilogue:
            beta = F32.type(self.node.attr("beta", 1.0))
            if p.c_scaled is not None:
                calls.append(functools.partial(np.add, y, p.c_scaled, out=y))
            elif beta == 1:
                calls.append(functools.partial(np.add, y, inputs[2], out=y))
            else:  # a run-time C: beta*C per run, as ops-basic computes it
                calls.append(functools.partial(_add_scaled, y, inputs[2], beta))
        if p.exact and calls:
            calls.append(functools.partial(_native.canonicalize_nan, y))
        return calls


def _add_scaled(y: np.ndarray, c: np.ndarray, beta: np.floating) -> None:
    np.add(y, np.multiply(c, beta), out=y)


def _bias_vector(c: np.ndarray | None, m: int, n: int) -> tuple[np.ndarray | None, str]:
    """beta*C as the epilogue's per-column or per-row vector, when its shape allows."""
    if c is None:
        return None, "col"
    if c.ndim <= 1 or (c.ndim == 2 and c.shape[0] == 1):
        return np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (n,)), dtype=F32), "col"
    if c.shape == (m, 1):
        return np.ascontiguousarray(c.reshape(m), dtype=F32), "row"
    return None, "col"
