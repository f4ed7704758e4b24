"""(e) Single-GPU run of the Phalanx runtime: bf16 (autocast), selective activation
checkpointing, fused AdamW; reports tokens/s, MFU (torchtitan formula, peak from the device
table), peak memory, and beside them a bf16 GEMM measured on the same GPU (what the chip reaches
on a plain matmul: the achievable side of the MFU's denominator). With ``--preset auto`` it picks
the largest preset whose estimated footprint fits the GPU (an H200: ``1b``; ``8b`` needs 16Ψ ≈
128 GB of fp32 model state alone); on out-of-memory it falls back to smaller presets / batches.
bench/gpu.sh runs it once per preset (125m, 1b).

    python bench/runtime_gpu.py --out $OUT/runtime_gpu.json [--budget-s 420] [--preset auto]
    python bench/runtime_gpu.py --cpu --preset debug --steps 3 --out /tmp/gpu.json   # CPU fallback

The JSON is written after every attempt, so a run cut short still leaves its best result.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("operator", "runtime", "common"):  # runnable from a bare checkout (no pip install)
    if str(ROOT / sub) not in sys.path:
        sys.path.insert(0, str(ROOT / sub))

CANDIDATES = ["8b", "1b", "125m", "small", "tiny", "debug"]


def estimate_bytes(shape, seq: int, batch: int) -> float:
    """fp32 params + grads + AdamW (16Ψ) + bf16 activations (selective AC, ~34·d bytes/token/layer
    kept) + fp32 logits and their grad."""
    psi = shape.num_params()
    tokens = seq * batch
    act = tokens * shape.n_layers * shape.dim * 34 * 2 * 0.5
    logits = tokens * shape.vocab_size * 4 * 3
    return 16 * psi + act + logits + 2 * 2**30


def plan(total_bytes: float, seq: int, preset: str | None) -> list[tuple[str, int]]:
    """(preset, micro batch) attempts, best first."""
    from phalanx_common.presets import PRESETS

    names = [preset] if preset and preset != "auto" else CANDIDATES
    out = []
    for name in names:
        shape = PRESETS[name]
        s = min(seq, shape.max_seq_len)
        for batch in (16, 8, 4, 2, 1):
            if estimate_bytes(shape, s, batch) < 0.85 * total_bytes or (preset and preset != "auto" and batch == 1):
                out.append((name, batch))
                if batch > 1:  # the same preset at half the batch, in case the estimate was optimistic
                    out.append((name, batch // 2))
                break
    return out[:6]


def gemm_flops(device, n: int, dtype, iters: int = 20, trials: int = 3) -> float:
    """Best FLOP/s of an n×n×n matmul over ``trials`` runs of ``iters`` (a busy GPU only slows one)."""
    import torch

    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b
    sync()
    best = 0.0
    for _ in range(trials):
        t = time.perf_counter()
        for _ in range(iters):
            a @ b
        sync()
        best = max(best, 2 * n**3 * iters / (time.perf_counter() - t))
    return best


def run_one(preset: str, batch: int, seq: int, steps: int, cpu: bool, ac: str = "selective") -> dict:
    import torch

    from phalanx_common.presets import PRESETS
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    shape = PRESETS[preset]
    seq = min(seq, shape.max_seq_len)
    doc = {"metadata": {"name": f"gpu-{preset}"},
           "spec": {"image": "bench", "resources": {"gpus": 0 if cpu else 1},
                    "model": {"preset": preset}, "data": {"source": "synthetic", "seqLen": seq},
                    "training": {"steps": steps, "globalBatchSize": batch, "microBatchSize": batch, "lr": 3e-4,
                                 "precision": "fp32" if cpu else "bf16",
                                 "activationCheckpointing": "none" if cpu else ac,
                                 "logEvery": max(1, steps // 10), "lrSchedule": {"warmupSteps": 2}}}}
    for k in ("WORLD_SIZE", "MASTER_ADDR"):  # single process: in-memory store
        os.environ.pop(k, None)
    if not cpu:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    res = train(RuntimeConfig.from_dict(doc))
    steady = res.step_times[2:] if len(res.step_times) > 3 else res.step_times
    return {"preset": preset, "params": shape.num_params(), "params_nonembed": shape.num_params(False),
            "seq_len": seq, "micro_batch": batch, "steps": steps, "tokens_per_step": res.tokens_per_step,
            "step_time_s_median": sorted(steady)[len(steady) // 2],
            "tokens_per_s": res.tokens_per_step * len(steady) / sum(steady),
            "mfu": res.mfu, "flops_per_token": shape.flops_per_token(seq),
            "peak_memory_gib": res.peak_memory_bytes / 2**30, "final_loss": res.final_loss,
            "activation_checkpointing": "none" if cpu else ac, "losses": res.losses, "wall_s": time.time() - t0}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "runtime_gpu.json"))
    ap.add_argument("--preset", default="auto")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop trying new attempts after this")
    ap.add_argument("--cpu", action="store_true", help="CPU fallback (fp32, tiny presets) to check the script")
    args = ap.parse_args()
    import logging

    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    t_start = time.time()
    cpu = args.cpu or not torch.cuda.is_available()
    report = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "torch": torch.__version__,
              "python": platform.python_version(), "cpu_fallback": cpu, "preset_asked": args.preset,
              "attempts": [], "best": None}
    if cpu:
        report["device"] = "cpu"
        preset = "debug" if args.preset == "auto" else args.preset
        attempts = [(preset, 2)]
        seq = min(args.seq, 64)
    else:
        props = torch.cuda.get_device_properties(0)
        report["device"] = props.name
        report["device_memory_gib"] = props.total_memory / 2**30
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        attempts = plan(props.total_memory, args.seq, args.preset)
        seq = args.seq
    report["plan"] = attempts
    from phalanx_runtime.components.metrics import device_peak_flops

    device = torch.device("cpu" if cpu else "cuda")
    report["peak_flops"], report["peak_source"] = device_peak_flops(device, "fp32" if cpu else "bf16")
    n, dtype = (256, torch.float32) if cpu else (8192, torch.bfloat16)
    report["gemm"] = {"n": n, "dtype": str(dtype).removeprefix("torch.")}
    report["gemm_flops"] = gemm_flops(device, n, dtype)
    if not cpu:
        torch.cuda.empty_cache()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def dump():
        out.write_text(json.dumps(report, indent=2))

    dump()
    ac = "selective"
    for preset, batch in attempts:
        if time.time() - t_start > args.budget_s:
            report["attempts"].append({"preset": preset, "micro_batch": batch, "skipped": "time budget"})
            break
        try:
            r = run_one(preset, batch, seq, args.steps, cpu, ac)
            report["attempts"].append({**r, "ok": True})
            report["best"] = r
            dump()
            print(json.dumps({k: r[k] for k in ("preset", "tokens_per_s", "mfu", "peak_memory_gib")}), flush=True)
            break  # attempts are ordered best first
        except torch.OutOfMemoryError as e:
            report["attempts"].append({"preset": preset, "micro_batch": batch, "error": f"OOM: {str(e)[:300]}"})
        except Exception as e:  # noqa: BLE001 — record and try the next attempt
            report["attempts"].append({"preset": preset, "micro_batch": batch,
                                       "error": f"{type(e).__name__}: {e}"[:500],
                                       "traceback": traceback.format_exc()[-2000:], "activation_checkpointing": ac})
            ac = "none"  # a non-OOM failure: retry the next attempts without selective AC
        finally:
            import gc

            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            gc.collect()
            if not cpu:
                torch.cuda.empty_cache()
        dump()
    report["total_s"] = time.time() - t_start
    dump()
    return 0 if report["best"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
