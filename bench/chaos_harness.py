"""Real worker processes for the checkpoint tests and the chaos benchmark: N ranks of
``python -m phalanx_runtime.train`` (RANK/WORLD_SIZE/MASTER_* in the environment — the launcher's
direct path, gloo), each killable by pid. When one rank dies the rest are killed, as torchrun's
agent does, and a restart is a new set of processes that resumes from the checkpoint dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "runtime"))

from runtime_parity_util import job  # noqa: E402

from phalanx_runtime.lifetime import EXIT_PREEMPTED  # noqa: E402 - torch-free


def ckpt_job(*, world: int = 2, steps: int = 8, interval: int = 2, keep_last: int = 3, async_save: bool = True,
             zero: int = 0, export: bool = False, resume: bool = True, **kw) -> dict:
    doc = job({"zero": zero}, world=world, steps=steps, **kw)
    doc["spec"]["checkpoint"] = {"intervalSteps": interval, "keepLast": keep_last, "async": async_save,
                                 "resume": resume, "exportConsolidated": export}
    return doc


from phalanx_common.net import free_port  # noqa: E402


class Workers:
    """One run: ``world`` worker processes on a fresh rendezvous port."""

    def __init__(self, doc: dict, ckpt_dir: str | os.PathLike, work: str | os.PathLike, *, world: int | None = None,
                 env: dict | None = None, tag: str = "run"):
        self.world = world or doc["spec"]["nodes"] * doc["spec"]["procsPerNode"]
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        cfg = self.work / f"{tag}-config.json"
        cfg.write_text(json.dumps(doc))
        self.result_path = self.work / f"{tag}-result.json"
        self.result_path.unlink(missing_ok=True)
        port = free_port()
        self.procs: list[subprocess.Popen] = []
        self.logs = []
        for r in range(self.world):
            e = dict(os.environ)
            e.update({"RANK": str(r), "WORLD_SIZE": str(self.world), "LOCAL_RANK": str(r),
                      "LOCAL_WORLD_SIZE": str(self.world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                      "PHALANX_CHECKPOINT_DIR": str(ckpt_dir), "PHALANX_RESULT_FILE": str(self.result_path),
                      "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
            e.update(env or {})
            log = open(self.work / f"{tag}-rank{r}.log", "w")
            self.logs.append(log)
            self.procs.append(subprocess.Popen([sys.executable, "-m", "phalanx_runtime.train", "--config", str(cfg)],
                                               env=e, stdout=log, stderr=subprocess.STDOUT))
        self.t_start = time.time()

    def kill(self, rank: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs[rank]
        if p.poll() is None:
            os.kill(p.pid, sig)

    def signal_all(self, sig: int) -> None:
        for r in range(self.world):
            self.kill(r, sig)

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def wait(self, timeout: float = 300) -> list[int]:
        """Wait for every rank; once one fails, kill the others (the agent's behaviour). A rank
        that saved on SIGTERM and exited 143 is not a failure: the others are finishing too."""
        deadline = time.time() + timeout
        while self.alive():
            if any(p.poll() not in (None, 0, EXIT_PREEMPTED) for p in self.procs):
                for p in self.procs:
                    if p.poll() is None:
                        p.kill()
                break
            if time.time() > deadline:
                for p in self.procs:
                    if p.poll() is None:
                        p.kill()
                raise TimeoutError(f"workers still running after {timeout}s; logs in {self.work}")
            time.sleep(0.05)
        codes = [p.wait() for p in self.procs]
        for log in self.logs:
            log.close()
        return codes

    def result(self) -> dict:
        return json.loads(self.result_path.read_text())

    def log_text(self, rank: int = 0) -> str:
        return (self.work / Path(self.logs[rank].name).name).read_text()


def run(doc, ckpt_dir, work, *, world=None, env=None, tag="run", timeout=300) -> tuple[list[int], dict | None]:
    w = Workers(doc, ckpt_dir, work, world=world, env=env, tag=tag)
    codes = w.wait(timeout)
    res = w.result() if w.result_path.exists() else None
    return codes, res
