"""Processes on Linux, torch-free: the parent-death signal, the subreaper, the process tree from
``/proc``. Shared by the runtime (phalanx_runtime.lifetime: nothing it starts outlives its
starter), ``phalanx local`` (phalanx.local.run) and the local control plane (localcluster)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterable
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
LINUX = sys.platform.startswith("linux")


def _prctl(option: int, arg) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(option, arg, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


def die_with_parent(sig: int = signal.SIGKILL, parent_pid: int | None = None) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies. ``parent_pid``: the
    parent we expect; if it is already gone (it died before the prctl), act on ``sig`` now."""
    if not LINUX or _prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(int(sig))) != 0:
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    return True


def set_subreaper(on: bool) -> bool:
    """Make orphaned descendants re-parent to this process (not to init), so that they stay
    findable and killable; returns the previous setting."""
    if not LINUX:
        return False
    prev = ctypes.c_int(0)
    _prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(prev))
    _prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(int(on)))
    return bool(prev.value)


# --------------------------------------------------------------------------------------------
# The process tree, from /proc


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # fields from 3 (state) on; comm may hold spaces


def alive(pid: int) -> bool:
    """Running or sleeping; a zombie (exited, not yet reaped) counts as gone."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def state(pid: int) -> str | None:
    """The one-letter state (R, S, D, Z, ...), None when gone."""
    st = _stat(pid)
    return st[0] if st else None


def parent(pid: int) -> int | None:
    st = _stat(pid)
    return int(st[1]) if st else None


def comm(pid: int) -> str | None:
    """The process's name (kept after exec and while exiting, unlike its command line)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """Clock ticks after boot: with the pid, identifies a process across pid reuse."""
    st = _stat(pid)
    return int(st[19]) if st else None


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


def descendants(pid: int) -> list[int]:
    out, todo = [], children(pid)
    while todo:
        p = todo.pop()
        if p not in out:
            out.append(p)
            todo += children(p)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap(pids: Iterable[int]) -> None:
    """Collect exited children that no ``Popen`` owns (orphans adopted as a subreaper)."""
    for p in pids:
        try:
            os.waitpid(p, os.WNOHANG)
        except ChildProcessError:
            pass
