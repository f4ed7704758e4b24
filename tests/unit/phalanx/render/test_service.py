"""render.service: the job's headless Service (stable DNS names for rendezvous)."""

from __future__ import annotations

from phalanx import constants
from tests.unit.phalanx.render.test_job import _render


def test_headless_service(job_obj):
    svc = _render(job_obj)[0]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {constants.LABEL_JOB_NAME: "job", constants.LABEL_COMPONENT: "worker"}
    assert svc["spec"]["ports"][0]["port"] == 29500
