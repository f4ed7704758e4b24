"""Checkpoints to object storage (checkpoint.storage) against the S3 server's own throughput, in one
run on one SeaweedFS (hack/seaweedfs/build.sh, started here): the server's put and get GB/s with
one stream per rank (what DCP opens), then a 2-rank job saving to the bucket four ways — straight
to the bucket (localTier.enabled: false) and through the pod-local tier, each sync and async —
with the training stall per checkpoint and the time until the step is committed in the bucket.

    python bench/checkpoint_objectstore.py            # dim 512 (~184 MiB per checkpoint)
    python bench/checkpoint_objectstore.py --no-doc   # print only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "hack" / "cluster")]

from bench.chaos_harness import ckpt_job, run  # noqa: E402
from bench.runtime_common import commit, machine, write_result  # noqa: E402

SECTION = "## Checkpoints and recovery"
MODES = (("direct", False), ("direct", True), ("tiered", False), ("tiered", True))  # (where, async)


def server_throughput(s3, work: Path, streams: int, size: int) -> dict[str, float]:
    """GB/s of ``streams`` concurrent puts, then gets, of ``size``-byte objects (s3fs, as the runtime)."""
    fs = s3.fs()
    src = work / "blob"
    src.write_bytes(os.urandom(size))

    def timed(fn) -> float:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(streams) as pool:
            list(pool.map(fn, range(streams)))
        return streams * size / (time.perf_counter() - t0) / 1e9

    put = timed(lambda i: fs.put_file(str(src), f"ckpt/raw/blob-{i}"))
    get = timed(lambda i: fs.get_file(f"ckpt/raw/blob-{i}", str(work / f"got-{i}")))
    return {"put": put, "get": get}


def saves(s3, work: Path, dim: int, steps: int, interval: int) -> dict:
    out = {}
    for where, is_async in MODES:
        name = f"{where}-{'async' if is_async else 'sync'}"
        doc = ckpt_job(world=2, steps=steps, interval=interval, keep_last=2, async_save=is_async,
                       overrides={"dim": dim, "nHeads": 8, "nKvHeads": 4, "ffnHidden": 4 * dim})
        if where == "direct":
            doc["spec"]["checkpoint"]["storage"] = {"uri": "s3://ckpt/bench", "localTier": {"enabled": False}}
        uri = f"s3://ckpt/bench/{name}"
        codes, res = run(doc, work / name, work, env={**s3.env(), "PHALANX_CHECKPOINT_URI": uri}, tag=name, timeout=1800)
        assert codes == [0, 0], f"{name} failed, logs in {work}"
        stall, save = res["checkpoint_stall_s"][:-1], res["checkpoint_save_s"][:-1]  # the last save is sync in all
        step = max(int(p.rsplit("-", 1)[1]) for p in s3.fs().ls(uri.removeprefix("s3://")) if "/step-" in p)
        nbytes = sum(s3.fs().du(f"{uri.removeprefix('s3://')}/step-{step}", total=False).values())
        out[name] = {"stall": statistics.median(stall), "save": statistics.median(save), "n": len(stall),
                     "bytes": nbytes, "step": statistics.median(res["step_times"][1:])}
    return out


def main(argv=None) -> int:
    from localcluster.seaweedfs import LocalS3

    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--steps", type=int, default=22)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="phalanx-objectstore-bench-"))
    t0 = time.time()
    with LocalS3(work / "seaweedfs") as s3:
        s3.make_bucket("ckpt")
        r = saves(s3, work, args.dim, args.steps, args.interval)
        size = r["direct-sync"]["bytes"] // 2  # one rank's share of a checkpoint
        raw = server_throughput(s3, work, 2, size)
    sync = r["direct-sync"]
    cmd = "python bench/checkpoint_objectstore.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"**{time.strftime('%Y-%m-%d')}**, commit {commit()} — {machine()}. Command: `{cmd.strip()}` "
             f"({time.time() - t0:.0f} s). SeaweedFS on 127.0.0.1 (one `weed server`), 2 ranks, dim {args.dim} "
             f"({sync['bytes'] / 2**20:.1f} MiB per checkpoint), median of {sync['n']} saves. The server's own: "
             f"**put {raw['put']:.2f} GB/s, get {raw['get']:.2f} GB/s** (2 streams of {size / 2**20:.0f} MiB).", "",
             "| mode | stall per checkpoint | until committed in the bucket | save GB/s (bytes / until committed) "
             "| of the server's put | stall / direct sync (goal ≤ 0.05) |",
             "|---|---|---|---|---|---|"]
    for name, m in r.items():
        gbs = m["bytes"] / m["save"] / 1e9
        lines.append(f"| {name} | {1e3 * m['stall']:.1f} ms | {1e3 * m['save']:.1f} ms | {gbs:.2f} | "
                     f"{gbs / raw['put']:.0%} | **{m['stall'] / sync['stall']:.3f}** |")
    lines.append("")
    print("\n".join(lines))
    if not args.no_doc:
        write_result("objectstore-save", SECTION, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
