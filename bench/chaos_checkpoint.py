"""Chaos benchmark for checkpoints: SIGKILL a random worker of a local multi-process run at random
moments (some while a checkpoint is being written), restart it (a new set of processes resuming
from the checkpoint directory, as the operator's gang restart would), and count

* corrupt committed checkpoints (a ``step-*`` that fails validation) and lost ones (the newest
  committed step before a kill not loadable after it) — goal 0;
* time from the kill to training again (first step logged by the restarted run);
* whether each completed job's losses after its last resume equal an uninterrupted run's;

then the training stall per checkpoint, async vs sync (goal: async ≤ 10 % of sync).

    python bench/chaos_checkpoint.py                 # 50 kills
    python bench/chaos_checkpoint.py --kills 10      # quicker
    python bench/chaos_checkpoint.py --no-doc        # print only
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chaos_harness import Workers, ckpt_job, run  # noqa: E402
from bench.runtime_common import commit, machine, write_result  # noqa: E402

SECTION = "## Checkpoints and recovery"
STEP_LINE = re.compile(r"step (\d+)/(\d+) loss ([0-9.]+)")


def _validate():
    from phalanx_runtime.components.checkpoint import (
        committed_steps,
        latest_valid,
        validate_checkpoint,
    )

    return committed_steps, latest_valid, validate_checkpoint


def first_step_seen(log: Path) -> bool:
    try:
        return STEP_LINE.search(log.read_text()) is not None
    except OSError:
        return False


def chaos(kills: int, *, world: int, steps: int, interval: int, write_delay: float, seed: int, work: Path) -> dict:
    committed_steps, latest_valid, validate_checkpoint = _validate()
    rng = random.Random(seed)
    doc = ckpt_job(world=world, steps=steps, interval=interval, keep_last=3)
    env = {"PHALANX_CHECKPOINT_TEST_WRITE_DELAY": str(write_delay)}
    codes, ref = run(doc, work / "ref-ckpt", work, env=env, tag="reference", timeout=900)
    assert codes == [0] * world, f"reference run failed, logs in {work}"
    ref_losses = ref["losses"]

    job, ckpt_dir = 0, work / "ckpt-0"
    recover_s, corrupt, lost, mid_write, done_jobs, mismatched = [], 0, 0, 0, 0, 0
    kill_t = None
    n = 0
    while n < kills:
        tag = f"job{job}-run{n}"
        w = Workers(doc, ckpt_dir, work, env=env, tag=tag)
        log = work / f"{tag}-rank0.log"
        while not first_step_seen(log) and w.alive():
            time.sleep(0.01)
        if kill_t is not None:
            recover_s.append(time.time() - kill_t)
            kill_t = None
        during_write = rng.random() < 0.5
        victim = rng.randrange(world)
        deadline = time.time() + (60 if during_write else rng.uniform(0.2, 3.0))
        while time.time() < deadline and w.alive():
            if during_write and any(ckpt_dir.glob(".tmp-step-*/*.distcp")):
                break
            time.sleep(0.005)
        if not w.alive():  # the job finished before the kill: check it, start the next job
            codes = w.wait()
            assert codes == [0] * world, f"{tag} failed: {codes}, logs in {work}"
            res = w.result()
            s = res["start_step"]
            if res["losses"] != ref_losses[s:]:
                mismatched += 1
            done_jobs += 1
            job += 1
            ckpt_dir = work / f"ckpt-{job}"
            continue
        before = committed_steps(ckpt_dir)
        newest_before = before[0] if before else 0
        in_write = any(ckpt_dir.glob(".tmp-step-*"))
        kill_t = time.time()
        w.kill(victim, signal.SIGKILL)
        w.wait(120)
        n += 1
        mid_write += in_write
        for step in committed_steps(ckpt_dir):
            if validate_checkpoint(ckpt_dir / f"step-{step}") is not None:
                corrupt += 1
        found = latest_valid(ckpt_dir)
        if (found[0] if found else 0) < newest_before:
            lost += 1
        print(f"kill {n}/{kills}: rank {victim} {'during a write' if in_write else 'mid-step'}, "
              f"newest committed {found[0] if found else None}", flush=True)
    # Let the last job finish and check its trajectory.
    if kill_t is not None:
        tag = f"job{job}-final"
        w = Workers(doc, ckpt_dir, work, env=env, tag=tag)
        log = work / f"{tag}-rank0.log"
        while not first_step_seen(log) and w.alive():
            time.sleep(0.01)
        recover_s.append(time.time() - kill_t)
        codes = w.wait(900)
        assert codes == [0] * world, f"{tag} failed: {codes}, logs in {work}"
        res = w.result()
        if res["losses"] != ref_losses[res["start_step"]:]:
            mismatched += 1
        done_jobs += 1
    return {"kills": kills, "mid_write": mid_write, "corrupt": corrupt, "lost": lost, "jobs": done_jobs,
            "mismatched": mismatched, "recover_mean": statistics.mean(recover_s),
            "recover_p50": statistics.median(recover_s), "recover_max": max(recover_s), "world": world,
            "steps": steps, "interval": interval, "write_delay": write_delay}


def stall(*, world: int, dim: int, steps: int, interval: int, work: Path) -> dict:
    out = {}
    for mode in ("sync", "async"):
        doc = ckpt_job(world=world, steps=steps, interval=interval, keep_last=2, async_save=mode == "async",
                       overrides={"dim": dim, "nHeads": 8, "nKvHeads": 4, "ffnHidden": 4 * dim})
        d = work / f"stall-{mode}"
        codes, res = run(doc, d, work, tag=f"stall-{mode}", timeout=900)
        assert codes == [0] * world, f"stall run {mode} failed, logs in {work}"
        # The last save (step == steps) is synchronous in both modes (nothing left to overlap).
        st = res["checkpoint_stall_s"][:-1]
        out[mode] = {"stall": statistics.median(st), "save": statistics.median(res["checkpoint_save_s"][:-1]),
                     "n": len(st), "step": statistics.median(res["step_times"][1:])}
        shard_bytes = sum(f.stat().st_size for f in d.glob("step-*/*.distcp")) // 2
        out["bytes"] = shard_bytes
    out["ratio"] = out["async"]["stall"] / out["sync"]["stall"]
    out.update(world=world, dim=dim, steps=steps, interval=interval)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--interval", type=int, default=5)
    ap.add_argument("--write-delay", type=float, default=0.1,
                    help="seconds each rank pauses after writing its shards (slow storage: a window for kills)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stall-dim", type=int, default=512)
    ap.add_argument("--no-stall", action="store_true")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="phalanx-chaos-"))
    t0 = time.time()
    c = chaos(args.kills, world=args.world, steps=args.steps, interval=args.interval, write_delay=args.write_delay,
              seed=args.seed, work=work) if args.kills else None
    s = None if args.no_stall else stall(world=args.world, dim=args.stall_dim, steps=22, interval=2, work=work)
    cmd = "python bench/chaos_checkpoint.py " + " ".join(argv if argv is not None else sys.argv[1:])
    head = [f"**{time.strftime('%Y-%m-%d')}**, commit {commit()} — {machine()}. "
            f"Command: `{cmd.strip()}` ({time.time() - t0:.0f} s)", ""]
    results = {}
    if c:
        results["chaos-kills"] = head + [
            f"Chaos: {c['kills']} SIGKILLs of a random rank ({c['mid_write']} while a checkpoint was being written), "
            f"{c['world']} ranks, tiny transformer, {c['steps']} steps, checkpoint every {c['interval']} steps "
            f"(async, keepLast 3), each rank's write slowed by {c['write_delay']} s.",
            "",
            "| kills | during a write | corrupt committed checkpoints | lost committed checkpoints | "
            "kill → training again (mean / median / max) | jobs completed, losses after resume ≠ uninterrupted |",
            "|---|---|---|---|---|---|",
            f"| {c['kills']} | {c['mid_write']} | **{c['corrupt']}** | **{c['lost']}** | "
            f"**{c['recover_mean']:.2f} s** / {c['recover_p50']:.2f} s / {c['recover_max']:.2f} s | "
            f"{c['jobs']}, {c['mismatched']} |",
            "",
        ]
    if s:
        results["chaos-stall"] = head + [
            f"Save stall per checkpoint (training blocked), {s['world']} ranks, dim {s['dim']} "
            f"({s['bytes'] / 2**20:.1f} MiB of shards per checkpoint), median of {s['async']['n']} saves:",
            "",
            "| mode | stall per checkpoint | save until committed | step time | async / sync stall (goal ≤ 0.10) |",
            "|---|---|---|---|---|",
            f"| sync | {1e3 * s['sync']['stall']:.1f} ms | {1e3 * s['sync']['save']:.1f} ms | "
            f"{1e3 * s['sync']['step']:.1f} ms | |",
            f"| async | {1e3 * s['async']['stall']:.1f} ms | {1e3 * s['async']['save']:.1f} ms | "
            f"{1e3 * s['async']['step']:.1f} ms | **{s['ratio']:.3f}** |",
            "",
        ]
    for name, lines in results.items():
        print("\n".join(lines))
        if not args.no_doc:  # each kind of result replaces its own previous one
            write_result(name, SECTION, "\n".join(lines))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
