"""`phalanx local` with spec.roles (heterogeneous gangs), with plain Python processes: one process per
pod of the gang — workers and each role's replicas — with the role's args and env; the run
succeeds when every pod of the success roles exited 0 (the rest, e.g. servers that never exit, are
stopped then), and any pod's failure fails the run and stops the others."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.runtime.test_local_command import phalanx_local

pytestmark = pytest.mark.runtime

# Each process records its role, index and argv, then does what $ACTION_<ROLE> says:
# "exit:<code>" at once, "await:<role>:<code>" once every pod of <role> has recorded itself (so the
# run cannot end before they started), or "serve" (sleep until stopped).
SCRIPT = """\
import json, os, sys, time
role, index = os.environ["PHALANX_ROLE"], os.environ["PHALANX_ROLE_INDEX"]
record = os.path.join(os.environ["OUT_DIR"], f"{role}-{index}.json")
with open(record + ".tmp", "w") as f:
    json.dump({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith(("PHALANX_", "NODE_RANK", "ONLY_"))}}, f)
os.replace(record + ".tmp", record)  # whole or absent: the run may stop this pod right after
action = os.environ["ACTION_" + role.upper()]
if action == "serve":
    time.sleep(600)
if action.startswith("await:"):
    _, other, code = action.split(":")
    action = "exit:" + code
    n = int(dict(kv.split("=") for kv in os.environ["PHALANX_ROLES"].split(","))[other])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(os.environ["OUT_DIR"], f"{other}-{i}.json")) for i in range(n)):
        time.sleep(0.05)
sys.exit(int(action.split(":")[1]))
"""


def roles_job(tmp_path: Path, actions: dict[str, str], **spec) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "pod.py"
    script.write_text(SCRIPT)
    env = [{"name": "OUT_DIR", "value": str(out)}] + [{"name": f"ACTION_{r.upper()}", "value": a} for r, a in actions.items()]
    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "gang"},
           "spec": {"image": "x", "nodes": 2, "command": [sys.executable, str(script)], "args": ["--work"],
                    "env": env, **spec}}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path, out


def test_success_roles_done_stops_the_servers(tmp_path):
    job, out = roles_job(tmp_path, {"worker": "await:ps:0", "ps": "serve"},
                         roles=[{"name": "ps", "replicas": 2, "args": ["--serve"],
                                 "env": [{"name": "ONLY_PS", "value": "$(PHALANX_ROLE)-$(PHALANX_ROLE_INDEX)"}]}],
                         successPolicy={"roles": ["worker"]})
    t0 = time.monotonic()
    p = phalanx_local(job, "--json", timeout=60)
    seconds = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["roles"] == {"worker": [0, 0], "ps": [-15, -15]} and summary["success_roles"] == ["worker"]
    assert summary["exit_codes"] == [0, 0, -15, -15]
    pods = {f.stem: json.loads(f.read_text()) for f in out.glob("*.json")}
    assert set(pods) == {"worker-0", "worker-1", "ps-0", "ps-1"}
    assert pods["worker-1"]["argv"] == ["--work"] and pods["worker-1"]["env"]["NODE_RANK"] == "1"
    assert pods["ps-1"]["argv"] == ["--serve"] and pods["ps-1"]["env"]["ONLY_PS"] == "ps-1"
    assert "NODE_RANK" not in pods["ps-0"]["env"] and "ONLY_PS" not in pods["worker-0"]["env"]
    assert pods["ps-0"]["env"]["PHALANX_ROLES"] == "worker=2,ps=2"
    assert pods["ps-0"]["env"]["PHALANX_POD_NAME"] == "gang-ps-0-0"
    assert seconds < 30, seconds  # the servers were stopped at once, not after their 600 s
    print(f"\nroles job, workers done → 2 servers stopped: {seconds:.1f}s")


def test_default_success_waits_for_every_role(tmp_path):
    job, _ = roles_job(tmp_path, {"worker": "exit:0", "aux": "exit:0"}, roles=[{"name": "aux"}])
    p = phalanx_local(job, "--json", timeout=60)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1])["roles"] == {"worker": [0, 0], "aux": [0]}


def test_a_failing_role_pod_fails_the_run(tmp_path):
    job, _ = roles_job(tmp_path, {"worker": "serve", "ps": "exit:3"}, roles=[{"name": "ps", "replicas": 2}],
                       successPolicy={"roles": ["worker"]})
    t0 = time.monotonic()
    p = phalanx_local(job, "--json", timeout=60)
    assert p.returncode == 1, p.stderr[-3000:]
    assert re.search(r"\bps [01] exited with code 3", p.stderr), p.stderr[-3000:]
    assert time.monotonic() - t0 < 30
