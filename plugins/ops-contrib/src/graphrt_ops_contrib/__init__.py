"""graphrt-ops-contrib: onnxruntime's com.microsoft quantization operators and QDQ fusion."""

__version__ = "0.1.0"
