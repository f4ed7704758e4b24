"""Compute precision, decided once: ``training.precision: bf16`` runs bf16 on CUDA only (a CPU run
computes in fp32, as the API field says). FSDP2 (zero 2/3) applies it as a
``MixedPrecisionPolicy`` (bf16 parameters, fp32 reductions); other layouts as ``torch.autocast``."""

from __future__ import annotations

import contextlib

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy


def compute_precision(requested: str, device: torch.device) -> str:
    """``"bf16"`` or ``"fp32"``: what this device runs for the requested precision."""
    return "bf16" if requested == "bf16" and device.type == "cuda" else "fp32"


def fsdp_mixed_precision(precision: str) -> MixedPrecisionPolicy | None:
    if precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return None


def autocast(precision: str, *, fsdp: bool):
    """The forward's context: bf16 autocast unless FSDP's policy already casts."""
    if precision == "bf16" and not fsdp:
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()
