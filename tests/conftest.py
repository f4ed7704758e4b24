from __future__ import annotations

import copy
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from phalanx_common import proc
from phalanx_runtime import lifetime
from tests.builds import build_if_required

# Operator/cluster fixtures (crd, operator, api, pool) for the integration suites.
pytest_plugins = ["tests.integration.harness"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def example_jobs() -> list[Path]:
    return [p for p in EXAMPLES if any(d and d.get("kind") == "TrainingJob" for d in yaml.safe_load_all(p.read_text()))]


MINIMAL = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "job", "namespace": "team", "uid": "uid-1", "generation": 1},
    "spec": {"image": "phalanx/runtime:test", "nodes": 2, "procsPerNode": 4, "model": {"preset": "debug"},
             "training": {"globalBatchSize": 8}},
}


@pytest.fixture
def job_obj() -> dict:
    return copy.deepcopy(MINIMAL)


# --- No process outlives the suite --------------------------------------------------------------
# pytest is a subreaper (PR_SET_CHILD_SUBREAPER): processes a test orphaned re-parent to pytest,
# not to init, so everything a test started and left behind is still our descendant at the end,
# after every fixture's teardown. The run then fails, naming each process and the test during which
# it appeared, and the processes are killed. Allowed: container daemons that hack/kind-e2e.sh
# starts on purpose, and whatever runs under them (kind's nodes).
LONG_LIVED_DAEMONS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "docker-proxy")
# Python's per-process helpers: they exit with pytest (their pipe to it closes).
PYTEST_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
EXIT_GRACE_SECONDS = 15.0  # for processes signalled by the last teardowns to finish exiting
_before_session: set[tuple[int, int | None]] = set()
_first_seen: dict[tuple[int, int | None], str] = {}


def _our_processes() -> set[tuple[int, int | None]]:
    """(pid, start time) of every live descendant: identifies a process across pid reuse."""
    return {(p, lifetime.start_time(p)) for p in lifetime.descendants(os.getpid()) if lifetime.alive(p)}


def _under_daemon(pid: int | None) -> bool:
    me = os.getpid()
    while pid and pid != me:
        if proc.comm(pid) in LONG_LIVED_DAEMONS:
            return True
        pid = proc.parent(pid)
    return False


def pytest_collection_modifyitems(items):
    """Tests marked ``built_last`` run after all others: they need what ``make test`` builds in the
    background while the first suites run (hack/test.sh), so no suite waits for it."""
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("built_last") is not None)


@pytest.fixture(scope="session")
def cluster_build():
    """What hack/cluster/build.sh leaves: the control-plane binaries (helm among them) and the
    pinned Kubernetes sources in Go's module cache (tests/builds.py)."""
    build_if_required()


def pytest_configure(config):
    if lifetime.LINUX:
        lifetime.set_subreaper(True)
        _before_session.update(_our_processes())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    yield
    for key in _our_processes():
        _first_seen.setdefault(key, item.nodeid)


def _left_behind() -> list[tuple[int, int | None]]:
    return sorted(k for k in _our_processes() - _before_session
                  if not _under_daemon(k[0]) and not any(h in lifetime.cmdline(k[0]) for h in PYTEST_HELPERS))


def _describe(pid: int) -> str:
    """The command line, and its name and state (a process that is exiting has no command line)."""
    return f"{lifetime.cmdline(pid)[:200] or '(no command line)'} [{proc.comm(pid)}, state {proc.state(pid)}]"


def pytest_sessionfinish(session, exitstatus):
    if not lifetime.LINUX:
        return
    left = _left_behind()
    deadline = time.monotonic() + EXIT_GRACE_SECONDS
    while left and time.monotonic() < deadline:  # a process a teardown just signalled may still be exiting
        time.sleep(0.2)
        left = _left_behind()
    if not left:
        return
    lines = [f"pid {pid}: {_describe(pid)} (alive after {_first_seen.get((pid, st), 'a fixture')})"
             for pid, st in left]
    lifetime.kill_pids([pid for pid, _ in left], signal.SIGKILL)
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write("\n")
        tr.write_sep("=", f"{len(left)} process(es) started by the tests outlived them (now killed)", red=True)
        for line in lines:
            tr.write_line(line)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
