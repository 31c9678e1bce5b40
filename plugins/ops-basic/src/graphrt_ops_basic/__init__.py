"""graphrt-ops-basic: the standard ai.onnx operators as numpy kernels.

Registered through the ``graphrt.plugins`` entry point like any third-party plugin.
"""

from __future__ import annotations

__version__ = "0.1.0"
