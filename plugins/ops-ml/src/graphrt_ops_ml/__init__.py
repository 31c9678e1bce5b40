"""graphrt-ops-ml: the ai.onnx.ml domain and the string operators."""

__version__ = "0.1.0"
