"""Importing a Hugging Face model directory: load time and peak memory (RSS) per rank of the
runtime's sharded import (models/huggingface/load.py: parts built on the meta device, each rank
allocating and reading only its shards) at world 1 and 2 (FSDP2, zero 3) vs
``transformers.AutoModelForCausalLM.from_pretrained`` on one rank. Both in float32, each in a fresh
process; the model is made here (Llama shape, random weights, bf16 safetensors), nothing downloaded.

Then the parity of the imported model with transformers' on ``--device`` (default: the GPU when
there is one): the logits of a fixed batch in float32, max |Δ| / max |reference|.

    python bench/hf_import.py                       # dim 1024, 8 layers, vocab 32000 (~320 MB)
    python bench/hf_import.py --dim 512 --layers 4  # quicker
    python bench/hf_import.py --json $OUT/hf_import.json   # what bench/gpu.sh's table reads

Prints one JSON object per measurement and a markdown table (docs/benchmarks.md is not written).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_common import RANKS_TIMEOUT_S, ROOT, machine  # noqa: E402

MIB = 2**20


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024  # kB
    return 0


def rss_now() -> int:
    return _status("VmRSS")


def rss_peak() -> int:
    """This process image's peak RSS. Not getrusage's ru_maxrss: Linux carries that over from the
    forking parent through exec, so a spawned rank would report this script's own peak."""
    return _status("VmHWM")


def make_model(out: Path, dim: int, layers: int, vocab: int) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=dim, num_hidden_layers=layers, num_attention_heads=dim // 64,
                         num_key_value_heads=max(dim // 128, 1), intermediate_size=dim * 11 // 4 // 64 * 64,
                         vocab_size=vocab, max_position_embeddings=2048)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out, max_shard_size="200MB")
    return out


def import_rank(cfg) -> dict:
    """A rank of the runtime's import (spawn.run_ranks): its load time and peak RSS."""
    import torch
    import torch.distributed as dist

    from phalanx_runtime.distributed.parallel_dims import ParallelDims
    from phalanx_runtime.distributed.process_group import init_distributed
    from phalanx_runtime.models.build import build_model_parts
    from phalanx_runtime.models.entrypoint import ModelContext

    member = init_distributed()
    pd = ParallelDims.from_spec(cfg.spec).build_mesh("cpu")
    ctx = ModelContext(config=cfg, mesh=pd, device=torch.device("cpu"), rank=member.rank,
                       world_size=member.world_size, local_rank=member.local_rank, seq_len=cfg.spec.data.seq_len, seed=0)
    base = rss_now()
    t0 = time.perf_counter()
    build_model_parts(ctx)
    row = {"load_s": time.perf_counter() - t0, "peak_rss_mib": rss_peak() / MIB, "base_rss_mib": base / MIB}
    rows: list = [None] * member.world_size
    dist.all_gather_object(rows, row)
    return {"ranks": rows}


FROM_PRETRAINED = """
import json, sys, time, torch
sys.path.insert(0, sys.argv[2])
from hf_import import MIB, rss_now, rss_peak
from transformers import AutoModelForCausalLM
base = rss_now()
t0 = time.perf_counter()
AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
print(json.dumps({"load_s": time.perf_counter() - t0, "peak_rss_mib": rss_peak() / MIB, "base_rss_mib": base / MIB}))
"""


def from_pretrained_row(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", FROM_PRETRAINED, str(path), str(Path(__file__).parent)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


PARITY_BATCH, PARITY_SEQ = 2, 32


def parity(path: Path, device: str) -> dict:
    """Phalanx's import and transformers' model of the same directory on ``device``: load times
    and the logits of one fixed batch (float32), max |Δ| / max |reference|."""
    import torch
    from transformers import AutoModelForCausalLM

    from phalanx_runtime.models.huggingface.load import from_pretrained

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    t0 = time.perf_counter()
    ref_model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).eval()
    sync()
    t1 = time.perf_counter()
    ours_model = from_pretrained(path, device=device).eval()
    sync()
    t2 = time.perf_counter()
    vocab = ref_model.config.vocab_size
    x = torch.randint(0, vocab, (PARITY_BATCH, PARITY_SEQ), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        ref = ref_model(x).logits.float()
        ours = ours_model(x).float()
    rel = float((ours - ref).abs().max() / ref.abs().max())
    return {"device": device if device == "cpu" else torch.cuda.get_device_name(torch.device(device)), "dtype": "float32",
            "batch": PARITY_BATCH, "seq": PARITY_SEQ, "rel_diff": rel,
            "transformers_load_s": t1 - t0, "phalanx_load_s": t2 - t1}


def job(path: Path, world: int) -> dict:
    return {"metadata": {"name": "hf-import"},
            "spec": {"image": "x", "procsPerNode": world, "parallelism": {"zero": 3} if world > 1 else {},
                     "model": {"pretrained": {"path": str(path)}}, "data": {"seqLen": 32},
                     "training": {"globalBatchSize": world, "precision": "fp32"}}}


def table(rows: list[dict], size_mib: float, params: int) -> str:
    body = ("| loader | world | load time (s) | peak RSS per rank (MiB) | over the process baseline (MiB) |\n"
            "|---|---|---|---|---|\n")
    for r in rows:
        body += (f"| {r['loader']} | {r['world']} | {r['load_s']:.2f} | {r['peak_rss_mib']:.0f} | "
                 f"{r['peak_rss_mib'] - r['base_rss_mib']:.0f} |\n")
    return body + (f"\nLlama shape, {params:,} parameters, {size_mib:.0f} MiB of bf16 safetensors, loaded as float32 "
                   f"(a whole fp32 copy: {params * 4 / MIB:.0f} MiB). Per rank: the largest of the ranks.")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--device", default="auto", help="where the parity runs: auto (cuda when there is one), cpu, cuda")
    ap.add_argument("--json", type=Path, help="write the rows, the model and the parity here")
    args = ap.parse_args()
    import torch

    from phalanx_common.hf_config import read_hf_config, shape_from_hf_config
    from phalanx_runtime.spawn import run_ranks

    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = make_model(Path(tmp) / "llama", args.dim, args.layers, args.vocab)
        size = sum(f.stat().st_size for f in path.glob("*.safetensors")) / MIB
        params = shape_from_hf_config(read_hf_config(path)).num_params()
        rows = [{"loader": "transformers from_pretrained", "world": 1, **from_pretrained_row(path)}]
        print(json.dumps(rows[-1]), flush=True)
        for world in args.ranks:
            out = run_ranks(job(path, world), world, fn=import_rank, timeout=RANKS_TIMEOUT_S)
            worst = max(out["ranks"], key=lambda r: r["peak_rss_mib"])
            rows.append({"loader": "phalanx import (DCP, sharded)" + (" zero 3" if world > 1 else ""),
                         "world": world, **worst, "per_rank": out["ranks"]})
            print(json.dumps(rows[-1]), flush=True)
        device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
        try:
            check = parity(path, device)
        except Exception as e:  # noqa: BLE001 — a device the import cannot load onto: check on the CPU
            if device == "cpu":
                raise
            check = {**parity(path, "cpu"), "error": f"on {device}: {type(e).__name__}: {e}"[:300]}
        print(json.dumps(check), flush=True)
    print(table(rows, size, params))
    print(f"\nParity ({check['device']}, float32): logits max |Δ| / max |reference| = {check['rel_diff']:.2e}")
    if args.json:
        model = {"dim": args.dim, "layers": args.layers, "vocab": args.vocab, "params": params, "size_mib": size}
        args.json.write_text(json.dumps({"model": model, "rows": rows, "parity": check}, indent=2) + "\n")


if __name__ == "__main__":
    main()
