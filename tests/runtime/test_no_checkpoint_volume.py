"""A job without a checkpoint volume trains and writes nothing outside its pod's scratch dir.

The pod of a job without ``checkpoint.volume`` is rendered by the operator (render_children) and
its container started here as the kubelet would: the pod's env, the ConfigMap's config at its
mount path, its command (``phalanx-runtime``). The pod's paths are moved into a temporary
directory (the scratch emptyDir, /etc/phalanx, the termination log the kubelet provides); nothing
else is. Every Python process of the run (launcher, torchrun agent, workers) carries an audit hook
(a ``sitecustomize`` on PYTHONPATH) that records each open for writing, mkdir, rename and remove:
each must be inside the scratch dir or the termination log. The image's own files cannot be
written by the pod's uid, so a write anywhere else is the bug this guards against: the runtime
creating the checkpoint dir (``/checkpoints/<ns>/<job>``) on a read-only root filesystem.
(Writes that C++ code makes without Python's ``open`` — torch.save's zip writer — are not seen;
each needs a directory made first, and ``mkdir`` is.) Python's bytecode cache is off, as the
image's modules are compiled when it is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.render.job import render_children
from phalanx.render.names import master_addr
from phalanx.validate import parse_job
from phalanx_common.net import free_port

pytestmark = pytest.mark.runtime
STEPS = 4
AUDIT_LOG = "PHALANX_TEST_WRITE_LOG"
# Installed in every Python process of the run: one line per write-like operation, "event\tpath".
SITECUSTOMIZE = f"""\
import os, sys

_log = os.environ.get({AUDIT_LOG!r})
if _log:
    _fd = os.open(_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    _PATH_EVENTS = ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate",
                    "os.chmod", "os.utime", "shutil.rmtree")

    def _where(path, dir_fd):
        # a path relative to a directory fd (shutil.rmtree's unlinks) is inside that directory
        if isinstance(dir_fd, int) and dir_fd >= 0 and not os.path.isabs(path):
            return os.path.join(os.readlink(f"/proc/self/fd/{{dir_fd}}"), path)
        return os.path.abspath(path)

    def _hook(event, args):
        if event == "open" and args[2] & _WRITE or event in _PATH_EVENTS:
            path = args[0]
            if isinstance(path, (str, bytes, os.PathLike)):
                dir_fd = args[-1] if event in ("os.remove", "os.rmdir", "os.mkdir") else None
                where = _where(os.fsdecode(path), dir_fd)
                os.write(_fd, f"{{event}}\\t{{where}}\\t{{args[2] if event == 'open' else ''}}\\n".encode())

    sys.addaudithook(_hook)
"""
JOB = {
    "apiVersion": constants.API_VERSION, "kind": constants.KIND,
    "metadata": {"name": "nockpt", "namespace": "team", "uid": "00000000-0000-0000-0000-0000000000aa"},
    "spec": {"image": "phalanx/runtime:test", "nodes": 1, "procsPerNode": 2, "model": {"preset": "debug"},
             "data": {"source": "corpus", "seqLen": 32},
             "training": {"steps": STEPS, "globalBatchSize": 4, "logEvery": 1, "precision": "fp32"}},
}


def rendered_pod(job_obj: dict) -> tuple[dict, dict]:
    job = parse_job(job_obj)
    children = render_children(job, OperatorConfig(), attempt=0)
    pod = next(c for c in children if c["kind"] == "Pod")
    config_map = next(c for c in children if c["kind"] == "ConfigMap")
    return pod, config_map


def container_env(pod: dict, root: Path, port: int) -> dict[str, str]:
    """The container's env with the pod's paths under ``root`` and its rendezvous on this host."""
    rendered = pod["spec"]["containers"][0]["env"]
    addr = master_addr(JOB["metadata"]["name"])
    old_port = next(e["value"] for e in rendered if e["name"] == constants.ENV_MASTER_PORT)
    env = {}
    for e in rendered:
        value = e.get("value")
        if value is None:  # fieldRefs: the pod's and node's names
            value = pod["metadata"]["name"] if e["name"] == constants.ENV_POD_NAME else "node"
        value = value.replace(constants.SCRATCH_MOUNT_PATH, str(root / "scratch")).replace(constants.RUNTIME_CONFIG_DIR, str(root / "etc"))
        value = value.replace(addr, "127.0.0.1")
        env[e["name"]] = str(port) if value == old_port else value.replace(f":{old_port}", f":{port}")
    env.pop(constants.ENV_PROGRESS_PORT)  # HTTP servers, no files; fixed ports may be taken on this host
    env.pop(constants.ENV_METRICS_PORT)
    return env


def test_job_without_checkpoint_volume_trains_writing_only_its_scratch_dir(tmp_path):
    pod, config_map = rendered_pod(JOB)
    container = pod["spec"]["containers"][0]
    assert not any(v["name"] == constants.VOLUME_CHECKPOINT for v in pod["spec"]["volumes"])
    assert constants.ENV_CHECKPOINT_DIR not in {e["name"] for e in container["env"]}

    for d in ("scratch", "etc", "cwd", "hook"):
        (tmp_path / d).mkdir()
    (tmp_path / "etc" / constants.RUNTIME_CONFIG_FILE).write_text(config_map["data"][constants.RUNTIME_CONFIG_KEY])
    (tmp_path / "hook" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    termination_log, audit = tmp_path / "termination-log", tmp_path / "writes.log"
    termination_log.touch()  # the kubelet's, writable
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(tmp_path / "hook"), os.environ.get("PYTHONPATH")) if p),
           constants.ENV_TERMINATION_LOG: str(termination_log), AUDIT_LOG: str(audit),
           **container_env(pod, tmp_path, free_port())}
    assert container["command"] == ["phalanx-runtime"] and "args" not in container
    run = subprocess.run([sys.executable, "-m", "phalanx_runtime.launch"], cwd=tmp_path / "cwd", env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-12000:]
    assert f"step {STEPS}/{STEPS} loss" in run.stderr and "committed" not in run.stderr, run.stderr[-4000:]

    writes = [line.split("\t")[:2] for line in audit.read_text().splitlines()]
    allowed = (str(tmp_path / "scratch") + os.sep, str(termination_log), str(audit), os.devnull)
    scratch = str(tmp_path / "scratch")  # the directory itself too (an open of it that fails: EISDIR)
    outside = sorted({f"{event} {path}" for event, path in writes if not path.startswith(allowed) and path != scratch})
    assert outside == [], "written outside the pod's scratch dir:\n" + "\n".join(outside)
    assert any(path.startswith(allowed[0]) for _, path in writes), "the hook saw no write at all (not installed?)"
    assert list((tmp_path / "cwd").iterdir()) == []
    assert json.loads(termination_log.read_text() or "{}").get("phase", "Succeeded") == "Succeeded"


def test_a_checkpoint_dir_that_cannot_be_made_says_which_volume(tmp_path):
    from phalanx_runtime.components.checkpoint import _make_dir

    (tmp_path / "file").touch()
    with pytest.raises(NotADirectoryError) as err:
        _make_dir(tmp_path / "file" / "team" / "job")
    assert str(err.value).startswith(f"[Errno 20] cannot create the checkpoint dir {tmp_path}/file/team/job "
                                     "($PHALANX_CHECKPOINT_DIR): Not a directory (in a pod it is on spec.checkpoint.volume")
