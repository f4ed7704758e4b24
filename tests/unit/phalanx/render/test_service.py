"""render.service: the job's headless Service (stable DNS names for rendezvous)."""

from __future__ import annotations

import copy

import pytest

from phalanx import constants
from phalanx.render.service import build_service
from phalanx.validate import parse_job
from tests.conftest import MINIMAL
from tests.unit.phalanx.render.test_job import _render


def test_headless_service(job_obj):
    svc = _render(job_obj)[0]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {constants.LABEL_JOB_NAME: "job", constants.LABEL_COMPONENT: "worker"}
    assert svc["spec"]["ports"][0]["port"] == 29500


@pytest.mark.parametrize("master_port", [constants.DEFAULT_MASTER_PORT, 31000])
def test_service_publishes_rendezvous_progress_and_metrics(master_port):
    job = parse_job(copy.deepcopy(MINIMAL))
    svc = build_service(job, master_port)
    assert svc["metadata"]["name"] == "job"  # the pods' subdomain
    assert svc["metadata"]["labels"][constants.LABEL_COMPONENT] == constants.COMPONENT_SERVICE
    ports = {p["name"]: (p["port"], p["targetPort"], p["protocol"]) for p in svc["spec"]["ports"]}
    assert ports == {"rendezvous": (master_port, master_port, "TCP"),
                     "progress": (constants.PROGRESS_PORT, constants.PROGRESS_PORT, "TCP"),
                     "metrics": (constants.METRICS_PORT, constants.METRICS_PORT, "TCP")}


def test_a_framework_adds_its_ports_after_the_operators():
    obj = copy.deepcopy(MINIMAL)
    obj["spec"] = {"image": "x", "framework": "horovod", "command": ["horovodrun", "python", "train.py"], "nodes": 2, "procsPerNode": 2}
    names = [p["name"] for p in build_service(parse_job(obj))["spec"]["ports"]]
    assert names[:3] == ["rendezvous", "progress", "metrics"] and names[3:] == [constants.PORT_NAME_HOROVOD]
