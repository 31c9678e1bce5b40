"""Which operators the fuzz suite covers: every definition of graphrt's operator table.

The table (``graphrt.plugins.snapshot``) says which (domain, op type, opset range) the installed
plugins provide and which ones a native kernel path replaces; onnx's schemas say how to call
each one (inputs, outputs, type constraints, attributes).  graphrt's own domains have no onnx
schema: each borrows the schema of the operator it stands for (``SUBSTITUTES``).
"""

from __future__ import annotations

import dataclasses
import functools

import onnx
import onnx.defs

from graphrt.plugins import snapshot

#: graphrt's own operators and the ai.onnx schema (name, version) whose inputs they take, with
#: the attributes they add.  Anything else without a schema gets ``GENERIC``.
SUBSTITUTES: dict[tuple[str, str], tuple[str, int, dict[str, list]]] = {
    ("com.graphrt", "Gelu"): ("Gelu", 20, {}),
    ("com.graphrt", "FusedConv"): (
        "Conv",
        11,
        {"activation": ["", "Relu", "Clip", "Sigmoid", "Gelu", "Tanh"], "approximate": ["tanh"]},
    ),
    ("com.graphrt", "FusedGemm"): (
        "Gemm",
        13,
        {"activation": ["", "Relu", "Clip", "Sigmoid", "Gelu"], "approximate": ["none", "tanh"]},
    ),
    ("com.graphrt", "FusedMatMul"): (
        "Gemm",  # A, B and an optional bias C
        13,
        {"activation": ["", "Relu", "Clip", "Sigmoid", "Gelu"], "approximate": ["none", "tanh"]},
    ),
    ("com.graphrt", "FusedBatchNormalization"): (
        "BatchNormalization",
        15,
        {"activation": ["", "Relu", "Clip", "Sigmoid", "Gelu", "Tanh"]},
    ),
    ("com.graphrt", "LayerNormalization"): ("LayerNormalization", 17, {}),
    ("com.graphrt", "RMSNormalization"): ("RMSNormalization", 23, {}),
    ("com.graphrt", "Attention"): ("Attention", 23, {}),
    ("com.example", "Scale"): ("Relu", 14, {"factor": [0.0, 2.5, float("nan")]}),
    ("com.example", "Twice"): ("Relu", 14, {}),
}
#: The schema of an operator nobody describes: one to three float inputs, one output.
GENERIC = ("Sum", 13, {})

#: Native kernel paths besides numpy ("auto" resolves to the best of them).
NATIVE_PATHS = ("auto", "scalar")


@dataclasses.dataclass(frozen=True)
class OpInfo:
    """One operator definition to fuzz, with the opsets worth trying."""

    domain: str
    op_type: str
    opsets: tuple[int, ...]
    plugin: str
    native: bool  # a kernel path replaces the numpy kernel
    substitute: tuple[str, int, dict[str, list]] | None = None

    def __str__(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type

    @property
    def paths(self) -> tuple[str, ...]:
        """Kernel paths worth running: numpy always, the native ones where they differ."""
        return ("numpy", *NATIVE_PATHS) if self.native else ("numpy",)

    @property
    def control_flow(self) -> bool:
        return self.op_type in ("If", "Loop", "Scan", "SequenceMap")

    def schema(self, opset: int) -> onnx.defs.OpSchema:
        if self.substitute is not None:
            name, version, _ = self.substitute
            return onnx.defs.get_schema(name, version, "")
        return onnx.defs.get_schema(self.op_type, opset, self.domain)

    @property
    def extra_attributes(self) -> dict[str, list]:
        return self.substitute[2] if self.substitute is not None else {}


@functools.lru_cache(maxsize=1)
def _schema_versions() -> dict[tuple[str, str], list[int]]:
    versions: dict[tuple[str, str], list[int]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        versions.setdefault((s.domain, s.name), []).append(s.since_version)
    return {k: sorted(set(v)) for k, v in versions.items()}


def _latest(domain: str) -> int:
    return onnx.defs.onnx_opset_version() if domain in ("", "ai.onnx") else 1


@functools.lru_cache(maxsize=1)
def fuzz_operators() -> tuple[OpInfo, ...]:
    """Every operator definition of the installed plugins, in a stable order."""
    table = snapshot()
    native = {key for path in table.paths for key in path.kernels}
    out = []
    for (domain, op_type), defs in sorted(table.definitions.items()):
        for d in defs:
            substitute = None
            known = _schema_versions().get((domain, op_type))
            if known is None:
                substitute = SUBSTITUTES.get((domain, op_type), GENERIC)
                opsets = (max(d.since, 1),)
            else:
                hi = d.until if d.until is not None else _latest(domain)
                # each schema version inside the definition's range, and its first opset
                opsets = tuple(sorted({max(v, d.since) for v in known if v <= hi} - {0}))
                opsets = tuple(v for v in opsets if d.since <= v <= hi) or (d.since,)
            out.append(
                OpInfo(
                    domain=domain,
                    op_type=op_type,
                    opsets=opsets,
                    plugin=d.plugin,
                    native=(domain, op_type) in native,
                    substitute=substitute,
                )
            )
    return tuple(out)


def native_operators() -> tuple[OpInfo, ...]:
    return tuple(op for op in fuzz_operators() if op.native)
