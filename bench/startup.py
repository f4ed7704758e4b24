"""Start-up of the demo job, phase by phase (the runtime's start-up timeline: docs/runtime.md,
"Start-up timeline"): when each phase ended, in seconds since the container (locally: the node's
launcher process) started, and how long it took. Prints a table; writes nothing.

    python bench/startup.py [--job examples/cpu-3d-demo.yaml] [--runs 1]        # phalanx local
    python bench/startup.py --kind [--job ...] [--checkpoints DIR]              # a kind cluster
    python bench/startup.py --kind --launcher-env PHALANX_WORKER_START=subprocess ...

Local: ``phalanx local`` runs the job cut to 2 steps; the phases come from rank 0's log line. Kind
(KUBECONFIG: the cluster's, e.g. hack/kind-e2e.sh up): applies the job afresh, times apply → the
first step in the status, and reads the phases from ``status.startup``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "common"))
from phalanx_common.contract import StartupPhase  # noqa: E402

LINE = re.compile(r"start-up \(seconds since the container started\): (.*)")
PHASE = re.compile(r"(\w+) ([\d.]+)s \(\+[\d.]+\)")
LOCAL_STEPS = 2


def parse_timeline(log: str) -> dict[str, float]:
    """The phases of rank 0's start-up log line (the last one in ``log``), or {} without one."""
    lines = LINE.findall(log)
    return {name: float(seconds) for name, seconds in PHASE.findall(lines[-1])} if lines else {}


def load_job(job: Path, env: list[str]) -> dict:
    """The job's manifest; with ``NAME=VALUE`` entries, its command wraps the runtime's entrypoint
    to set them (the runtime's own ``PHALANX_*`` knobs cannot go in spec.env: the operator's)."""
    doc = yaml.safe_load(job.read_text())
    if env:
        doc["spec"]["command"] = ["sh", "-c", " ".join(["exec", "env", *map(shlex.quote, env), "phalanx-runtime"])]
    return doc


def run_local(job: Path, env: list[str]) -> dict[str, float]:
    doc = load_job(job, env)
    doc["spec"]["training"]["steps"] = LOCAL_STEPS
    with tempfile.TemporaryDirectory() as d:
        short = Path(d, job.name)
        short.write_text(yaml.safe_dump(doc))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("operator", "runtime", "common"))}
        out = subprocess.run([sys.executable, "-m", "phalanx", "local", str(short)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=900)
    timeline = parse_timeline(out.stdout + out.stderr)
    if out.returncode != 0 or not timeline:
        sys.exit(f"phalanx local failed (exit {out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    return timeline


def _kubectl(*args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)} failed (exit {out.returncode}): {out.stderr.strip()}")
    return out.stdout


def run_kind(job: Path, env: list[str], namespace: str, checkpoints: Path | None, timeout: float = 900) -> dict[str, float]:
    """Apply ``job`` afresh (its ``checkpoints`` removed first); the seconds from apply to step 1 in
    the status (``applyToFirstStep``) and to every node ready (``podsRunning``), with the status's
    timeline."""
    doc = load_job(job, env)
    name = doc["metadata"]["name"]
    _kubectl("-n", namespace, "delete", "trainingjob", name, "--ignore-not-found", "--wait")
    subprocess.run(["kubectl", "-n", namespace, "wait", "--for=delete", "pod", "-l", f"phalanx.dev/job-name={name}",
                    "--timeout=180s"], capture_output=True)  # none left: an error, and nothing to wait for
    if checkpoints is not None:
        shutil.rmtree(checkpoints, ignore_errors=True)
    start = time.monotonic()
    _kubectl("-n", namespace, "apply", "-f", "-", stdin=yaml.safe_dump(doc))
    found: dict[str, float] = {"load": os.getloadavg()[0]}
    while time.monotonic() - start < timeout:
        status = json.loads(_kubectl("-n", namespace, "get", "trainingjob", name, "-o", "json")).get("status") or {}
        if "podsRunning" not in found and status.get("readyNodes") and status.get("readyNodes") == status.get("totalNodes"):
            found["podsRunning"] = round(time.monotonic() - start, 1)
        if "applyToFirstStep" not in found and (status.get("step") or 0) >= 1:
            found["applyToFirstStep"] = round(time.monotonic() - start, 1)
        if "firstStep" in (status.get("startup") or {}) and "applyToFirstStep" in found:
            return {**status["startup"], **found}
        time.sleep(0.5)
    sys.exit(f"no first step within {timeout:.0f}s: {found}")


def table(runs: list[dict[str, float]]) -> str:
    """The phases in StartupPhase order (a status map comes back sorted by name), then the rest."""
    names = [phase.value for phase in StartupPhase]
    phases = sorted(dict.fromkeys(k for run in runs for k in run), key=lambda k: names.index(k) if k in names else len(names))
    head = "| phase | " + " | ".join(f"run {i + 1} (end, +took)" for i in range(len(runs))) + " |"
    rows = [head, "|" + "---|" * (len(runs) + 1)]
    before = [0.0] * len(runs)
    for phase in phases:
        cells = []
        for i, run in enumerate(runs):
            if phase not in run:
                cells.append("")
                continue
            took = run[phase] - before[i] if phase not in ("load", "podsRunning", "applyToFirstStep") else None
            unit = "" if phase == "load" else " s"  # the 1-minute load average at the apply
            cells.append(f"{run[phase]:.2f}{unit}" + (f" (+{took:.2f})" if took is not None else ""))
            if took is not None:
                before[i] = run[phase]
        rows.append(f"| {phase} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", type=Path, default=ROOT / "examples" / "cpu-3d-demo.yaml")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--kind", action="store_true", help="apply to the cluster of $KUBECONFIG instead")
    ap.add_argument("--namespace", default=os.environ.get("PHALANX_NAMESPACE", "default"))
    ap.add_argument("--checkpoints", type=Path, help="kind: the job's checkpoint dir on this machine "
                    "($PHALANX_KIND_DIR/shared/<namespace>/<job>), removed before each apply (a fresh start)")
    ap.add_argument("--launcher-env", action="append", default=[], metavar="NAME=VALUE",
                    help="start the runtime with this in its environment (repeatable)")
    args = ap.parse_args()
    runs = [run_kind(args.job, args.launcher_env, args.namespace, args.checkpoints) if args.kind else run_local(args.job, args.launcher_env)
            for _ in range(args.runs)]
    print(table(runs))


if __name__ == "__main__":
    main()
