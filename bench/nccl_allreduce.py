"""All-reduce bus bandwidth over every rank torchrun starts, as nccl-tests' all_reduce_perf
defines it: algbw = bytes / time, busbw = algbw × 2(n−1)/n (what each GPU's link carries in a
ring), so it compares with the link's own rate. One process per GPU, NCCL (gloo on CPU: the
dry run). Rank 0 writes the JSON.

    torchrun --standalone --nproc-per-node=8 bench/nccl_allreduce.py --out $OUT/allreduce.json
    torchrun --standalone --nproc-per-node=2 bench/nccl_allreduce.py --backend gloo --sizes-mib 1,4 --iters 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_results import GB, bus_bandwidth, nominal_link  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def measure(nbytes: int, dtype: torch.dtype, device: torch.device, warmup: int, iters: int) -> float:
    """Mean seconds of one all-reduce of ``nbytes`` on this rank, the slowest rank's."""
    x = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        dist.all_reduce(x)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    sync()
    mean = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)  # a collective is as fast as its slowest rank
    return float(mean.item())


def nccl_version() -> str:
    v = torch.cuda.nccl.version()  # a tuple (major, minor, patch[, suffix]); an int in older torch
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "allreduce.json"))
    ap.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"])
    ap.add_argument("--sizes-mib", default="8,64,256,1024")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))  # nccl-tests' default type
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    backend = args.backend if args.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, device_id=device if backend == "nccl" else None)
    world, rank = dist.get_world_size(), dist.get_rank()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    rows = []
    for mib in (float(s) for s in args.sizes_mib.split(",")):
        nbytes = int(mib * 2**20)
        t = measure(nbytes, DTYPES[args.dtype], device, args.warmup, args.iters)
        algbw = nbytes / t / GB
        rows.append({"bytes": nbytes, "time_s": t, "algbw_gbps": algbw, "busbw_gbps": bus_bandwidth(algbw, world)})
        if rank == 0:
            print(json.dumps(rows[-1]), flush=True)
    if rank == 0:
        link = nominal_link(name) if device.type == "cuda" else None
        best = max(rows, key=lambda r: r["busbw_gbps"])
        out = {"backend": backend, "world": world, "device": name, "dtype": args.dtype, "warmup": args.warmup,
               "iters": args.iters, "nccl": nccl_version() if backend == "nccl" else None,
               "rows": rows, "nominal_link_gbps": link[0] if link else None, "nominal_link": link[1] if link else None,
               "best_busbw_gbps": best["busbw_gbps"],
               "best_busbw_ratio": best["busbw_gbps"] / link[0] if link else None}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
