"""The start-up timeline: when each phase of a run's start ended (contract.StartupPhase), in seconds
since the container started. The launcher is the container's first process, so its process start
is the origin; it passes that (``$PHALANX_START_TIME``) and the ends of its own phases
(``$PHALANX_STARTUP_MARKS``) to the workers through torchrun's environment. Global rank 0 logs the
timeline once, after the first step, and keeps it in the progress record (``startup``), from which
the operator copies it into ``status.startup``. A worker started without a launcher (tests,
``spawn.run_ranks``) measures from its own process start.

Stdlib only: the launcher records its first marks before it imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import time

from phalanx_common.contract import ENV_START_TIME, ENV_STARTUP_MARKS, StartupPhase

log = logging.getLogger("phalanx_runtime")


def boot_time() -> float:
    """When the machine booted, in seconds since the epoch: now less the time since boot
    (CLOCK_BOOTTIME, the clock /proc/<pid>/stat counts a process's start in). Not /proc/stat's
    btime: whole seconds, so up to a second early, which every start measured from it would carry."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None:
        return time.time() - time.clock_gettime(boottime)
    with open("/proc/stat") as f:
        return next(float(line.split()[1]) for line in f if line.startswith("btime "))


def process_start_time(pid: int | str = "self") -> float | None:
    """The process's start as seconds since the epoch (field 22 of /proc/<pid>/stat, in clock ticks
    since boot, plus the boot time), or None where /proc says nothing (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        # the command name (field 2) may hold spaces and parentheses: count from its closing one
        ticks = float(stat.rsplit(")", 1)[1].split()[19])
        return boot_time() + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _env_float(env: dict[str, str], name: str) -> float | None:
    try:
        return float(env[name])
    except (KeyError, ValueError):
        return None


class StartupTimeline:
    """Phase ends since ``origin`` (seconds since the epoch). Marks keep the order of
    StartupPhase: a phase marked again keeps its first end."""

    def __init__(self, origin: float, marks: dict[str, float] | None = None):
        self.origin = origin
        self._ends: dict[str, float] = {}
        for phase, at in (marks or {}).items():
            if phase in StartupPhase.__members__.values():
                self._ends[str(phase)] = at

    @classmethod
    def for_launcher(cls) -> StartupTimeline:
        """The container's timeline, from this process's start (or an earlier start a wrapper passed)."""
        origin = _env_float(dict(os.environ), ENV_START_TIME) or process_start_time() or time.time()
        return cls(origin)

    @classmethod
    def for_worker(cls, env: dict[str, str] | None = None) -> StartupTimeline:
        """A worker's timeline: the launcher's origin and marks, and this process's start."""
        env = dict(os.environ if env is None else env)
        started = process_start_time()
        origin = _env_float(env, ENV_START_TIME) or started or time.time()
        try:
            marks = json.loads(env.get(ENV_STARTUP_MARKS) or "{}")
        except ValueError:
            marks = {}
        timeline = cls(origin, {k: float(v) for k, v in marks.items() if isinstance(v, int | float)}
                       if isinstance(marks, dict) else None)
        if started is not None and ENV_START_TIME in env:
            timeline.mark(StartupPhase.WORKER, at=started)
        return timeline

    def mark(self, phase: StartupPhase, at: float | None = None) -> None:
        self._ends.setdefault(str(phase), time.time() if at is None else at)

    def to_env(self) -> dict[str, str]:
        """The environment that carries this timeline into a worker process."""
        return {ENV_START_TIME: repr(self.origin), ENV_STARTUP_MARKS: json.dumps(self._ends)}

    def seconds(self) -> dict[str, float]:
        """``{phase: seconds since the origin}`` in StartupPhase order, never decreasing (a clock
        read in another process may be a little behind: it is raised to the phase before)."""
        out: dict[str, float] = {}
        floor = 0.0
        for phase in StartupPhase:
            if phase in self._ends:
                floor = max(floor, self._ends[phase] - self.origin)
                out[str(phase)] = round(floor, 2)
        return out

    def describe(self) -> str:
        """One line: each phase's end and, in parentheses, how long it took."""
        parts, before = [], 0.0
        for phase, end in self.seconds().items():
            parts.append(f"{phase} {end:.2f}s (+{end - before:.2f})")
            before = end
        return "start-up (seconds since the container started): " + ", ".join(parts)
