"""torchtitan's own trainer (``torchtitan.train``: its llama3 debug model, data loader, AdamW, LR
schedule and step log) on CPU, started by torchrun like any torchtitan job:

    torchrun --nnodes=2 --nproc-per-node=1 ... torchtitan_cpu.py --module llama3 \\
        --config llama3_debugmodel --training.steps 4 --training.seq_len 256 \\
        --training.local_batch_size 2 \\
        --parallelism.data_parallel_replicate_degree 2 --parallelism.data_parallel_shard_degree 1

torchtitan 0.3.0 trains on an accelerator only; three stand-ins make its CPU path run, and this
launcher is nothing more than them:
- its device module is torch.cuda whenever no accelerator is found (``torchtitan.tools.utils``), so
  the trainer's ``set_device`` dies with "Found no NVIDIA driver": a CPU device module replaces it;
- a language model's attention must be FlexAttention (SDPA is refused for LMs) and FlexAttention
  has no backward on CPU, eager or compiled: plain causal SDPA replaces its forward (documents
  packed into one sequence then see each other: fine for a smoke run);
- the debug config reads ``./tests/assets/tokenizer`` and ``./tests/assets/c4_test`` from a
  torchtitan checkout (not in the wheel): a word-level tokenizer and a small text file are written
  there, in the working directory, when missing.
FSDP's reduce-scatter needs PREMUL_SUM, which gloo lacks: run data parallel by replication
(the flags above). Each rank logs torchtitan's own step lines,
``[titan] <time> - root - INFO - step:  1  loss:  8.04290  grad_norm: ...`` (ANSI-coloured).
"""

from __future__ import annotations

import json
import os
import random
import runpy
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

WORDS = ("the quick brown fox jumps over a lazy dog while many small machines train one model "
         "in lock step and share every gradient they compute").split()
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<unk>"]


def write_assets(root: Path) -> None:
    """A word-level tokenizer and 400 lines of text where the debug config looks for them."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer_dir, data_dir = root / "tests/assets/tokenizer", root / "tests/assets/c4_test"
    if not (tokenizer_dir / "tokenizer.json").exists():
        tokenizer_dir.mkdir(parents=True, exist_ok=True)
        vocab = {token: i for i, token in enumerate(SPECIAL + sorted(set(WORDS)))}
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer.save(str(tokenizer_dir / "tokenizer.json"))
        config = {"bos_token": SPECIAL[0], "eos_token": SPECIAL[1], "add_bos_token": True,
                  "add_eos_token": False}
        (tokenizer_dir / "tokenizer_config.json").write_text(json.dumps(config))
    if not (data_dir / "data.json").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        rng = random.Random(0)
        lines = (json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(200))}) for _ in range(400))
        (data_dir / "data.json").write_text("\n".join(lines) + "\n")


class CpuDeviceModule(types.SimpleNamespace):
    """What torchtitan asks of its device module, answered for the CPU; the rest is torch.cpu's."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)


def cpu_device_module() -> CpuDeviceModule:
    properties = types.SimpleNamespace(name="cpu", total_memory=os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    nothing = lambda *args, **kwargs: None  # noqa: E731
    return CpuDeviceModule(
        get_device_name=lambda *args: "cpu", current_device=lambda: 0, device_count=lambda: 1,
        is_available=lambda: True, get_device_properties=lambda *args: properties, memory_stats=lambda *args: {},
        set_device=nothing, reset_peak_memory_stats=nothing, empty_cache=nothing, synchronize=nothing,
        manual_seed=nothing, manual_seed_all=nothing)


def causal_sdpa(self, q_BLNH, k_BLNH, v_BLNH, *, scale=None, enable_gqa=False, **ignored):
    """FlexAttention.forward's signature (its parallel wrapper names q/k/v), plain causal SDPA."""
    out = F.scaled_dot_product_attention(q_BLNH.transpose(1, 2), k_BLNH.transpose(1, 2),
                                         v_BLNH.transpose(1, 2), scale=scale, is_causal=True,
                                         enable_gqa=enable_gqa)
    return out.transpose(1, 2)


def main() -> None:
    write_assets(Path.cwd())
    import torchtitan.tools.utils as titan_utils

    # before anything else of torchtitan is imported: its modules copy these names at import
    titan_utils.device_type, titan_utils.device_module = "cpu", cpu_device_module()
    from torchtitan.models.common import attention

    attention.FlexAttention.forward = causal_sdpa
    sys.argv = ["torchtitan.train", *sys.argv[1:]]
    runpy.run_module("torchtitan.train", run_name="__main__")


if __name__ == "__main__":
    main()
