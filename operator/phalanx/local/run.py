"""Run a TrainingJob as local processes, without Kubernetes: one process per pod of the gang — each
node-rank, and with ``spec.roles`` each role's replica (parameter servers, a chief, …) — with the
environment and command the operator gives that pod (``phalanx.local.env``: the pod's
``rendezvous_env``, ``spec.env`` and the role's env, with the rendezvous and TF_CONFIG on
127.0.0.1). Built-in jobs run the pod's entrypoint (``phalanx-runtime``: torchrun,
``procsPerNode`` workers); command jobs (``spec.command``) run the user's command and args (a
role's own, ``$(VAR)`` expanded as the kubelet does), so a script can be tried before it is
submitted. ``phalanx local JOB.yaml [--json]`` calls :func:`run_local`; with ``json=True`` the last
stdout line is a JSON summary. The runtime is started by command line (``python -m
phalanx_runtime.launch``, reading the config the ConfigMap would carry), never imported.

The run succeeds as the job does (``spec.success_roles``): once every process of those roles
exited 0, the others (e.g. parameter servers, which serve until stopped) get SIGTERM and are
killed after the grace period. Any process failing fails the run and stops the others.

``phalanx local`` owns its processes: SIGINT/SIGTERM asks every node to checkpoint and stop (one
SIGTERM each, as the kubelet sends a pod), a second signal or the end of the grace period kills
whatever of the run is left, and if ``phalanx local`` is killed outright its children get SIGTERM
from the kernel (PR_SET_PDEATHSIG) and stop the same way. See docs/runtime.md, "Stopping and
preemption".
"""

from __future__ import annotations

import json as _json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from phalanx.api.manifests import read_documents  # the one YAML reader (duplicate keys refused)
from phalanx.api.slots import worker
from phalanx.api.types import TrainingJob
from phalanx.constants import LOCAL_STOP_GRACE_SECONDS, ProgressKey
from phalanx.frameworks import plugin_for
from phalanx.lifecycle.progress import parse_progress
from phalanx.local.env import LocalJob, node_argv, slot_envs, slot_label, termination_log
from phalanx.render.configmap import runtime_config
from phalanx_common import contract, proc
from phalanx_common.layout import check_layout

EXIT_PREEMPTED = contract.EXIT_PREEMPTED  # re-exported for callers of run_local
EXIT_TIMEOUT = 124  # as timeout(1)
TMP_PREFIX = "phalanx-local-"
OWNER_FILE = "owner"  # "<pid> <start time>" of the phalanx local that made the temp dir


class LayoutError(ValueError):
    """The job cannot run; ``errors`` names each field and reason."""

    def __init__(self, errors: list[str]):
        super().__init__("invalid job:\n  - " + "\n  - ".join(errors))
        self.errors = errors


class Stopped(RuntimeError):
    """The run was stopped (SIGINT/SIGTERM, or a node stopped by one): the job is not finished;
    checkpoints were taken where the processes could reach a step boundary."""

    exit_code = EXIT_PREEMPTED


class RunTimeout(Stopped, TimeoutError):
    exit_code = EXIT_TIMEOUT


def load_job(path: str | os.PathLike) -> LocalJob:
    docs = [d for d in read_documents(str(path)) if d]
    docs = [d for d in docs if d.get("kind", "TrainingJob") == "TrainingJob"] or docs
    if not docs:
        raise ValueError(f"{path}: no TrainingJob document")
    job = TrainingJob.model_validate(docs[0])
    return LocalJob(spec=job.spec, name=job.metadata.name, namespace=job.metadata.namespace)


def _fd(stream):
    """A file descriptor children can inherit (None = ours) — pytest's capture has none."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# The run's processes


class StopSignals:
    """SIGINT/SIGTERM to ``phalanx local`` (main thread only): the first asks for a stop, a second
    one for an immediate kill."""

    def __init__(self):
        self.signum: int | None = None
        self.force = False
        self._prev: dict[int, object] = {}

    def _handler(self, signum, frame):  # noqa: ARG002
        if self.signum is None:
            self.signum = signum
            msg = (f"phalanx local: {signal.Signals(signum).name}: asking every node to checkpoint and stop "
                   "(again to kill now)\n")
        else:
            self.force = True
            msg = "phalanx local: second signal: killing the run now\n"
        os.write(2, msg.encode())  # no print(): the handler may interrupt a print in the main thread

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._prev[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc):
        for sig, prev in self._prev.items():
            signal.signal(sig, prev)


class LocalRun:
    """One process per pod of the gang (node-ranks, then role pods), each in its own process group
    (a terminal's Ctrl-C reaches only ``phalanx local``, which turns it into one SIGTERM per pod,
    as the kubelet would)."""

    def __init__(self, argvs: list[list[str]], envs: list[dict[str, str]], stdout, stderr):
        self.procs: list[subprocess.Popen] = []
        self.adopted: set[int] = set()
        self.t0 = time.monotonic()
        try:
            for argv, env in zip(argvs, envs, strict=True):
                self.procs.append(subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, process_group=0))
        except BaseException:
            self.kill()
            raise

    def codes(self) -> list[int | None]:
        return [p.poll() for p in self.procs]

    def adopt_orphans(self, before: set[int]) -> None:
        """Children of ours that we did not start: the run's orphans (their parent died and we
        are a subreaper)."""
        self.adopted |= set(proc.children(os.getpid())) - before - {p.pid for p in self.procs}

    def tree(self) -> set[int]:
        """Every live process of the run: the nodes, the orphans we adopted, their descendants."""
        roots = {p.pid for p in self.procs} | self.adopted
        out = set(roots)
        for r in roots:
            out.update(proc.descendants(r))
        return {p for p in out if proc.alive(p)}

    def terminate(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        proc.kill_pids(self.tree(), signal.SIGKILL)


def _first_failure(codes: list[int | None]) -> tuple[int, int] | None:
    return next(((i, c) for i, c in enumerate(codes) if c not in (None, 0, EXIT_PREEMPTED)), None)


def succeeded(codes: list[int | None], required: list[int]) -> bool:
    """Every process the job's success needs (``required``: indexes into ``codes``) exited 0."""
    return bool(required) and all(codes[i] == 0 for i in required)


def verdict(codes: list[int | None], required: list[int], *, stopping: bool = False,
            timed_out: bool = False) -> str | None:
    """Why the run ends now, or None while it goes on (pure; ``codes``: each process's exit code,
    None while it runs): "stopped" on a stop signal or a process stopped by one (143), "failed"
    when a process exited with any other non-zero code, "done" once every ``required`` process
    exited 0 (the others are then stopped; checked first, as the operator does), "timeout"."""
    if stopping:
        return "stopped"
    if succeeded(codes, required):  # as the operator: success is decided before failures
        return "done"
    if any(c not in (None, 0) for c in codes):
        return "failed" if _first_failure(codes) else "stopped"
    return "timeout" if timed_out else None


def _supervise(run: LocalRun, stop: StopSignals, *, grace: float, timeout: float | None,
               before: set[int], required: list[int] | None = None) -> tuple[str, tuple[int, int] | None]:
    """Wait until the run ends (:func:`verdict`; ``required`` defaults to every process); then
    SIGTERM whatever still runs and SIGKILL the run's process tree after the grace period. Returns
    why it ended ("done", "failed", "stopped", "timeout") and the first failure (process index,
    exit code) seen before any stop; nothing of the run is alive when it returns."""
    required = list(range(len(run.procs))) if required is None else required
    reason, failure, kill_at = None, None, None
    while any(c is None for c in run.codes()):
        codes = run.codes()
        if reason is None:
            failure = _first_failure(codes)
            reason = verdict(codes, required, stopping=stop.signum is not None,
                             timed_out=bool(timeout) and time.monotonic() - run.t0 > timeout)
            if reason is not None:
                run.terminate()
                kill_at = time.monotonic() + contract.escalation(3, grace)
        elif stop.force or time.monotonic() > kill_at:
            run.kill()
        run.adopt_orphans(before)
        time.sleep(0.1)
    run.adopt_orphans(before)
    proc.kill_pids(run.tree(), signal.SIGKILL)  # e.g. a command job's workers whose agent is gone
    proc.reap(run.adopted)
    codes = run.codes()
    if reason == "done" or all(c == 0 for c in codes):
        return "done", None  # succeeded (the rest stopped), or finished before a stop could take effect
    if reason is None:
        failure = _first_failure(codes)
        reason = verdict(codes, required) or "stopped"
    return reason, failure


# --------------------------------------------------------------------------------------------
# Temporary directories of runs that were killed outright


def _make_tmp_dir() -> str:
    _sweep_stale_tmp()
    d = tempfile.mkdtemp(prefix=TMP_PREFIX)
    Path(d, OWNER_FILE).write_text(f"{os.getpid()} {proc.start_time(os.getpid())}")
    return d


def _sweep_stale_tmp() -> None:
    """Remove the temp dirs (config, default checkpoints) of earlier runs whose ``phalanx local``
    is gone without cleaning up (SIGKILL)."""
    for d in Path(tempfile.gettempdir()).glob(TMP_PREFIX + "*"):
        try:
            pid, started = Path(d, OWNER_FILE).read_text().split()
        except (OSError, ValueError):
            continue
        if str(proc.start_time(int(pid))) != started:
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# run_local


def _check(cfg: LocalJob) -> None:
    """Built-in jobs: the runtime's layout rules, before anything starts. Command jobs: none (the
    script is the user's; nodes × procsPerNode is the world size by construction)."""
    if cfg.spec.command:
        return
    if cfg.spec.model is None:
        raise LayoutError(["model: set model.preset, model.pretrained or model.entrypoint (built-in runtime) or command (your own)"])
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        cuda = False
    errors = check_layout(cfg.spec, cuda_available=cuda)
    if errors:
        raise LayoutError(errors)


def run_local(job_yaml_path: str | os.PathLike | LocalJob, json: bool = False, *, timeout: float | None = None,
              progress_port: int | None = None, env: dict[str, str] | None = None,
              checkpoint_dir: str | os.PathLike | None = None) -> dict:
    """Run the job to completion on this machine; returns the summary dict (and prints it as the
    last stdout line when ``json``). Raises :class:`LayoutError` before starting anything if a
    built-in job's layout is impossible here, RuntimeError if a node fails, :class:`Stopped` after
    SIGINT/SIGTERM, :class:`RunTimeout` after ``timeout`` seconds (both stop the job as a
    preemption does: checkpoint at the next step boundary, kill after the grace period).

    ``env`` is added to every node's environment (``PHALANX_STOP_GRACE_SECONDS`` there or in ours
    sets the grace period; default 30 s). Checkpoints go to ``checkpoint_dir`` (a rerun with the
    same directory resumes) or to ``<job tmp dir>/checkpoints``, removed at the end."""
    cfg = job_yaml_path if isinstance(job_yaml_path, LocalJob) else load_job(job_yaml_path)
    _check(cfg)
    grace = contract.stop_grace({**os.environ, **(env or {})}, default=LOCAL_STOP_GRACE_SECONDS)
    out_stream = _fd(sys.stderr) if json else _fd(sys.stdout)
    d = _make_tmp_dir()
    was_subreaper = proc.set_subreaper(True)
    try:
        Path(d, "config.json").write_text(_json.dumps(runtime_config(cfg.job())))  # as the ConfigMap's
        _write_framework_files(cfg, d)
        gang = slot_envs(cfg, d, env=env, checkpoint_dir=checkpoint_dir, progress_port=progress_port, grace=grace)
        for slot, _ in gang:  # as the kubelet creates each container's terminationMessagePath
            Path(termination_log(d, slot)).touch()
        envs = [e for _, e in gang]
        argvs = [node_argv(cfg, e, os.path.join(d, "config.json"), slot) for slot, e in gang]
        before = set(proc.children(os.getpid()))
        with StopSignals() as stop:
            run = LocalRun(argvs, envs, out_stream, _fd(sys.stderr))
            try:
                reason, failure = _supervise(run, stop, grace=grace, timeout=timeout, before=before,
                                             required=required_processes(cfg, [s for s, _ in gang]))
            except BaseException:  # never leave the run behind
                run.kill()
                raise
        seconds = time.monotonic() - run.t0
        _raise_for(reason, failure, run.codes(), timeout, [s for s, _ in gang])
        summary = _summary(cfg, d, run.codes(), seconds, [s for s, _ in gang])
    finally:
        proc.set_subreaper(was_subreaper)
        shutil.rmtree(d, ignore_errors=True)
    _print_summary(cfg, summary, json)
    return summary


def required_processes(cfg: LocalJob, gang: list) -> list[int]:
    """Indexes (into the gang's slots) of the processes whose exit 0 is the job's success:
    every pod of ``spec.success_roles`` (default every role; tensorflow with a chief: the chief)."""
    roles = set(cfg.spec.success_roles)
    return [i for i, slot in enumerate(gang) if slot.role in roles]


def _write_framework_files(cfg: LocalJob, d: str) -> None:
    """The framework's files the ConfigMap carries next to the runtime config (framework deepspeed:
    the DeepSpeed config, where $PHALANX_DEEPSPEED_CONFIG points)."""
    for name, text in plugin_for(cfg.spec).config_files(cfg.spec).items():
        Path(d, name).write_text(text)


def _raise_for(reason: str, failure: tuple[int, int] | None, codes: list[int | None], timeout: float | None,
               gang: list) -> None:
    if reason == "timeout":
        raise RunTimeout(f"local run exceeded {timeout}s; stopped (node exit codes {codes})")
    if reason == "stopped":
        raise Stopped(f"stopped; node exit codes {codes} (143: stopped after SIGTERM)")
    if reason == "failed":
        raise RuntimeError(f"{slot_label(gang[failure[0]])} exited with code {failure[1]}")


def role_exit_codes(gang: list, codes: list[int | None]) -> dict[str, list[int | None]]:
    """Exit codes per role (workers first), in index order (pure)."""
    out: dict[str, list[int | None]] = {}
    for slot, code in zip(gang, codes, strict=True):
        out.setdefault(slot.role, []).append(code)
    return out


# What a command job's summary takes from rank 0's final progress record (its termination log).
REPORTED_KEYS = (ProgressKey.STEP, ProgressKey.LOSS, ProgressKey.TOTAL_STEPS, ProgressKey.METRICS,
                 ProgressKey.LAST_CHECKPOINT, ProgressKey.RESUMED_STEP)


def reported_progress(path: str | os.PathLike) -> dict:
    """Rank 0's last progress (REPORTED_KEYS) from its termination-log file, parsed as the operator
    parses it (the script's output); {} when there is none, or it is a failure report."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return {}
    report = parse_progress(raw) or {}
    return {str(key): report[key] for key in REPORTED_KEYS if key in report}


def _summary(cfg: LocalJob, d: str, codes: list[int | None], seconds: float, gang: list) -> dict:
    world = cfg.spec.nodes * cfg.spec.procs_per_node
    if cfg.spec.command:
        s = {"mode": "command", "world_size": world, "nodes": cfg.spec.nodes, "exit_codes": codes,
             "seconds": round(seconds, 3)}
        if cfg.spec.roles:  # the success roles exited 0; the others may have been stopped after it
            s["roles"] = role_exit_codes(gang, codes)
            s["success_roles"] = list(cfg.spec.success_roles)
        # a script that reports (spec.progress, or phalanx_common.report on its own) wrote one
        return s | reported_progress(termination_log(d, worker(0)))
    full = _json.loads(Path(d, "result.json").read_text())
    return {"final_loss": full["final_loss"], "steps": full["steps"], "tokens_per_s": full["tokens_per_s"],
            "world_size": full["world_size"], "losses": full.get("losses", []),
            "grad_norms": full.get("grad_norms", []), "step_times": full.get("step_times", []),
            "mfu": full.get("mfu")}


def _print_summary(cfg: LocalJob, s: dict, json: bool) -> None:
    sys.stdout.flush()
    if json:
        keys = (("mode", "world_size", "nodes", "exit_codes", "seconds", "roles", "success_roles", *REPORTED_KEYS)
                if cfg.spec.command else ("final_loss", "steps", "tokens_per_s", "world_size"))
        print(_json.dumps({k: s[k] for k in keys if k in s}), flush=True)
    elif cfg.spec.command:
        roles = "".join(f", {r} {codes}" for r, codes in s.get("roles", {}).items() if r != "worker")
        print(f"job {cfg.name}: command finished on {s['nodes']} nodes ({s['world_size']} ranks{roles}) in "
              f"{s['seconds']:.1f}s{_reported_words(s)}", flush=True)
    else:
        print(f"job {cfg.name}: {s['steps']} steps on {s['world_size']} ranks, final loss {s['final_loss']:.4f}, "
              f"{s['tokens_per_s']:.0f} tokens/s", flush=True)


def _reported_words(s: dict) -> str:
    """", step 40/80, loss 1.2345" from what rank 0 reported; "" when it reported nothing."""
    words = []
    if ProgressKey.STEP in s:
        total = s.get(ProgressKey.TOTAL_STEPS)
        words.append(f"step {s[ProgressKey.STEP]}" + (f"/{total}" if total else ""))
    if ProgressKey.LOSS in s:
        words.append(f"loss {s[ProgressKey.LOSS]:.4f}")
    return "".join(f", {w}" for w in words)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m phalanx.local.run")
    ap.add_argument("job")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--timeout", type=float, default=None, help="stop the run after this many seconds")
    ap.add_argument("--checkpoint-dir", default=None,
                    help="keep checkpoints here (a rerun resumes); default: the run's temporary directory")
    args = ap.parse_args(argv)
    try:
        run_local(args.job, json=args.json, timeout=args.timeout, checkpoint_dir=args.checkpoint_dir)
    except LayoutError as e:
        print(str(e), file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"failed: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
