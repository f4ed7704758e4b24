"""The start-up timeline of a real launch (launcher → torchrun → two workers): rank 0's progress
record, and so the final record in the termination message, has every phase from the launcher's to
the first step's, in order and never decreasing, and rank 0 logs it as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from phalanx import constants
from phalanx.lifecycle.progress import parse_progress

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SOURCES = [str(ROOT / package) for package in ("runtime", "common", "operator")]  # this checkout's, not an installed copy


def test_the_final_record_has_the_whole_startup_timeline(tmp_path):
    sys.path.insert(0, str(HERE))
    from runtime_parity_util import job

    sys.path.remove(str(HERE))
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(job(world=2, steps=2)))
    log = tmp_path / "termination-log"
    log.touch()  # the kubelet's
    env = {**os.environ, constants.ENV_TERMINATION_LOG: str(log), "PHALANX_CPU_PEAK_FLOPS": "1e11",
           "NNODES": "1", "NODE_RANK": "0", "NPROC_PER_NODE": "2",
           "PYTHONPATH": os.pathsep.join([*SOURCES, str(HERE), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-m", "phalanx_runtime.launch", "--config", str(cfg)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    record = json.loads(log.read_text())
    startup = record[constants.ProgressKey.STARTUP]
    assert list(startup) == [phase.value for phase in constants.StartupPhase], startup
    ends = list(startup.values())
    assert ends == sorted(ends) and 0 <= ends[0] and ends[-1] < 300, startup
    assert parse_progress(record)[constants.ProgressKey.STARTUP] == startup  # as the operator reads it
    assert p.stderr.count("start-up (seconds since the container started): launcher") == 1
