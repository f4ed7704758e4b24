"""The DeepSpeed config, where ``phalanx local`` (phalanx_runtime.local) imports it from; the
framework's plugin, phalanx.frameworks.deepspeed, renders it."""

from phalanx.frameworks.deepspeed import batch_layout, deepspeed_config, uses_deepspeed

__all__ = ["batch_layout", "deepspeed_config", "uses_deepspeed"]
