"""The fusion passes of graphrt-ops-basic, registered through its ``graphrt_graph_passes`` hook
exactly as a third party's passes would be (docs/graph-passes.md).

They live here rather than in the core because what they write are this plugin's operators
(``com.graphrt.FusedConv``, ``Gelu``...) or need (an inference Dropout becomes ops-basic's
Identity view): a session without ops-basic has neither the operators nor the passes.
"""

from __future__ import annotations

from graphrt.plugin import GraphPass


def fusion_passes() -> list[GraphPass]:
    from .attention import FuseAttention
    from .attention_heads import FuseAttentionHeads
    from .bn_relu import FuseBatchNormActivation
    from .conv_pool import FuseConvPool
    from .dropout import EliminateInferenceDropout
    from .gelu import FuseGelu
    from .layernorm import FuseLayerNorm
    from .products import FuseProductActivation
    from .rms_norm import FuseRMSNorm

    return [
        EliminateInferenceDropout(),
        FuseBatchNormActivation(),
        FuseLayerNorm(),
        FuseGelu(),
        FuseProductActivation(),
        FuseConvPool(),
        FuseAttention(),
        FuseAttentionHeads(),
        FuseRMSNorm(),
    ]
