"""The built-in Llama-style transformer: ``model.py`` (the model), ``pipeline.py`` (its split into
pipeline stages), ``parallelize.py`` (TP/SP → LoRA → activation checkpointing → FSDP/DDP), ``lora.py``
(low-rank adapters, base frozen)."""

from phalanx_runtime.models.transformer.model import Transformer, build_transformer
from phalanx_runtime.models.transformer.parallelize import parallelize_transformer
from phalanx_runtime.models.transformer.pipeline import pipeline_split

__all__ = ["Transformer", "build_transformer", "parallelize_transformer", "pipeline_split"]
