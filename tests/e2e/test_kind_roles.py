"""A heterogeneous gang on real pods: two workers and a parameter-server role
with its own command and resources. The server serves over HTTP on its stable DNS name
(``<job>-ps-0.$PHALANX_SUBDOMAIN``, through the headless Service and under the job's
NetworkPolicy); each worker fetches from it and exits 0. ``successPolicy: {roles: [worker]}``
ends the job then and the operator stops the server, which would serve forever."""

from __future__ import annotations

import pytest

from tests.e2e.test_kind_e2e import follow, logs
from tests.integration.harness import wait_for

PORT = 8470
SERVER = f"""\
import http.server, os
body = ("ps " + os.environ["PHALANX_ROLE_INDEX"] + " of " + os.environ["PHALANX_ROLES"]).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(body)
print("serving", flush=True)
http.server.HTTPServer(("", {PORT}), Handler).serve_forever()
"""
WORKER = f"""\
import os, time, urllib.request
url = "http://" + os.environ["PHALANX_JOB_NAME"] + "-ps-0." + os.environ["PHALANX_SUBDOMAIN"] + ":{PORT}/"
for attempt in range(120):
    try:
        got = urllib.request.urlopen(url, timeout=5).read().decode()
        break
    except OSError as exc:
        time.sleep(1)
else:
    raise SystemExit("no parameter server at " + url)
print("GOT", got, "as", os.environ["PHALANX_ROLE"], os.environ["NODE_RANK"], "of", os.environ["WORLD_SIZE"], flush=True)
time.sleep(10)  # stay Ready past a few 2 s status writes and polls, so readiness is observable
"""

pytestmark = pytest.mark.timeout(600)


def roles_job(name: str, image: str) -> dict:
    small = {"cpu": "100m", "memory": "128Mi"}
    return {
        "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {
            "image": image, "nodes": 2, "procsPerNode": 1, "resources": small,
            "command": ["python3", "-c", WORKER],
            "roles": [{"name": "ps", "replicas": 1, "resources": small, "command": ["python3", "-c", SERVER]}],
            "successPolicy": {"roles": ["worker"]},
            "failurePolicy": {"maxRestarts": 1, "backoffSeconds": 1},
        },
    }


def test_workers_reach_their_parameter_server_and_the_success_policy_stops_it(jobs, runtime_image):
    name = "e2e-roles"
    jobs.create(roles_job(name, runtime_image))
    seen = follow(jobs, name, lambda s: s.get("phase") == "Succeeded", 400)
    # per-role readiness is reported (sampled every 2 s: each worker stays Ready 10 s after its fetch,
    # but the two need not overlap, so "worker:2/2" at once is not required)
    ready = [s.get("rolesReady") for s in seen]
    assert any(r and r.startswith("worker:") and r.endswith(" ps:1/1") and not r.startswith("worker:0/") for r in ready), ready
    final = seen[-1]
    assert final["restarts"] == 0 and "every pod of worker completed" in final["message"], final
    text = logs(jobs, name)
    for rank in (0, 1):
        assert f"GOT ps 0 of worker=2,ps=1 as worker {rank} of 2" in text, text
    placement = final["placement"]
    assert len(placement["nodes"]) == 2 and len(placement["roles"]["ps"]) == 1
    # The server never exits by itself: the operator stopped it once the workers were done.
    wait_for(lambda: all(p.metadata.deletion_timestamp or p.status.phase != "Running"
                         for p in jobs.pods(name) if p.metadata.labels.get("phalanx.dev/role") == "ps"),
             120, "the parameter server stopped")
