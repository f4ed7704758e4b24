"""Run a TrainingJob's runtime as local processes, without Kubernetes: one ``phalanx-runtime``
launcher per node (each starting ``procsPerNode`` workers through torchrun, c10d rendezvous on
127.0.0.1), exactly the pod path minus the pods. ``phalanx local JOB.yaml [--json]`` calls
:func:`run_local`; with ``json=True`` the last stdout line is
``{"final_loss": …, "steps": …, "tokens_per_s": …, "world_size": …}``.
"""

from __future__ import annotations

import json as _json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phalanx.constants import (
    ENV_CHECKPOINT_DIR,
    ENV_CONFIG_PATH,
    ENV_JOB_NAME,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_NAMESPACE,
    ENV_NNODES,
    ENV_NODE_RANK,
    ENV_NPROC_PER_NODE,
    ENV_PROGRESS_PORT,
)
from phalanx_runtime.config import RuntimeConfig, check_layout


class LayoutError(ValueError):
    """The job cannot run; ``errors`` names each field and reason."""

    def __init__(self, errors: list[str]):
        super().__init__("invalid job:\n  - " + "\n  - ".join(errors))
        self.errors = errors


def load_job(path: str | os.PathLike) -> RuntimeConfig:
    import yaml

    from phalanx.api.types import TrainingJob

    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    docs = [d for d in docs if d.get("kind", "TrainingJob") == "TrainingJob"] or docs
    if not docs:
        raise ValueError(f"{path}: no TrainingJob document")
    job = TrainingJob.model_validate(docs[0])
    return RuntimeConfig(spec=job.spec, name=job.metadata.name, namespace=job.metadata.namespace,
                         api_version=job.api_version)


def _fd(stream):
    """A file descriptor children can inherit (None = ours) — pytest's capture has none."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _free_port() -> int:
    from phalanx_runtime.spawn import free_port

    return free_port()


def run_local(job_yaml_path: str | os.PathLike, json: bool = False, *, timeout: float | None = None,
              progress_port: int | None = None, env: dict[str, str] | None = None,
              checkpoint_dir: str | os.PathLike | None = None) -> dict:
    """Run the job to completion on this machine; returns the summary dict (and prints it as the
    last stdout line when ``json``). Raises :class:`LayoutError` before starting anything if the
    layout is impossible here, RuntimeError if a worker fails.

    Checkpoints (``spec.checkpoint``) go to ``checkpoint_dir`` (``--checkpoint-dir``; a rerun with
    the same directory resumes) or, by default, to ``<job tmp dir>/checkpoints``, removed at the end."""
    cfg = load_job(job_yaml_path) if not isinstance(job_yaml_path, RuntimeConfig) else job_yaml_path
    spec = cfg.spec
    if spec.model is None:
        raise LayoutError(["model: local mode runs the built-in runtime; set model.preset or model.entrypoint"])
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        cuda = False
    errors = check_layout(spec, cuda_available=cuda)
    if errors:
        raise LayoutError(errors)

    world = spec.nodes * spec.procs_per_node
    out_stream = _fd(sys.stderr) if json else _fd(sys.stdout)
    with tempfile.TemporaryDirectory(prefix="phalanx-local-") as d:
        cfg_path = os.path.join(d, "config.json")
        result_path = os.path.join(d, "result.json")
        Path(cfg_path).write_text(_json.dumps(cfg.to_dict()))
        master_port = _free_port()
        base = dict(os.environ)
        base.update(env or {})
        base.update({ENV_CONFIG_PATH: cfg_path, ENV_JOB_NAME: cfg.name, ENV_NAMESPACE: cfg.namespace,
                     ENV_NNODES: str(spec.nodes), ENV_NPROC_PER_NODE: str(spec.procs_per_node),
                     ENV_MASTER_ADDR: "127.0.0.1", ENV_MASTER_PORT: str(master_port),
                     "PHALANX_RESULT_FILE": result_path, "PYTHONUNBUFFERED": "1",
                     ENV_CHECKPOINT_DIR: os.path.abspath(checkpoint_dir) if checkpoint_dir
                     else os.path.join(d, "checkpoints"),
                     "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // world))})
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS", "PET_NNODES", "PET_NODE_RANK"):
            base.pop(k, None)
        procs = []
        t0 = time.time()
        for node in range(spec.nodes):
            e = dict(base)
            e[ENV_NODE_RANK] = str(node)
            if node == 0 and progress_port:
                e[ENV_PROGRESS_PORT] = str(progress_port)
            procs.append(subprocess.Popen([sys.executable, "-m", "phalanx_runtime.launch", "--config", cfg_path],
                                          env=e, stdout=out_stream, stderr=_fd(sys.stderr)))
        failed = None
        try:
            while any(p.poll() is None for p in procs):
                for i, p in enumerate(procs):
                    if p.poll() not in (None, 0):
                        failed = (i, p.returncode)
                if failed or (timeout and time.time() - t0 > timeout):
                    break
                time.sleep(0.2)
            else:
                for i, p in enumerate(procs):
                    if p.returncode != 0:
                        failed = (i, p.returncode)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
        if failed:
            raise RuntimeError(f"node {failed[0]} exited with code {failed[1]}")
        if timeout and time.time() - t0 > timeout and not os.path.exists(result_path):
            raise TimeoutError(f"local run exceeded {timeout}s")
        full = _json.loads(Path(result_path).read_text())
    summary = {"final_loss": full["final_loss"], "steps": full["steps"], "tokens_per_s": full["tokens_per_s"],
               "world_size": full["world_size"]}
    if json:
        sys.stdout.flush()
        print(_json.dumps(summary), flush=True)
    else:
        print(f"job {cfg.name}: {summary['steps']} steps on {world} ranks, final loss {summary['final_loss']:.4f}, "
              f"{summary['tokens_per_s']:.0f} tokens/s", flush=True)
    return {**summary, "losses": full.get("losses", []), "grad_norms": full.get("grad_norms", []),
            "step_times": full.get("step_times", []), "mfu": full.get("mfu")}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.local")
    ap.add_argument("job")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--checkpoint-dir", default=None,
                    help="keep checkpoints here (a rerun resumes); default: the run's temporary directory")
    args = ap.parse_args(argv)
    try:
        run_local(args.job, json=args.json, checkpoint_dir=args.checkpoint_dir)
    except LayoutError as e:
        print(str(e), file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"failed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
