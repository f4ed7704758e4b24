"""Kube.create: an object that exists already counts as created only when it is the job's own
(its owner reference); anyone else's is a refusal naming it, never adopted."""

import asyncio
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from phalanx.kube import Kube
from phalanx.lifecycle.refusals import Refusal

JOB_UID = "uid-of-the-job"


class _Response:
    def __init__(self, body):
        self.data = json.dumps(body).encode()

    def release_conn(self):
        pass


class _Core:
    def __init__(self, existing_owner):
        self.existing_owner = existing_owner

    def create_namespaced_config_map(self, namespace, body, _preload_content, **_):
        raise ApiException(status=409, reason="AlreadyExists")

    def read_namespaced_config_map(self, name, namespace, _preload_content):
        refs = [] if self.existing_owner is None else [{"uid": self.existing_owner, "controller": True}]
        return _Response({"metadata": {"name": name, "namespace": namespace, "ownerReferences": refs}})


def _config_map():
    return {"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "job-config", "namespace": "team",
                         "ownerReferences": [{"uid": JOB_UID, "controller": True, "kind": "TrainingJob"}]}}


def _create(existing_owner):
    async def main():
        kube = Kube(client.ApiClient())
        kube.core = _Core(existing_owner)
        return await kube._create_all([_config_map()])

    return asyncio.run(main())


def test_the_jobs_own_object_counts_as_created():
    assert _create(JOB_UID) == []


@pytest.mark.parametrize("owner", [None, "uid-of-someone-else"])
def test_an_object_the_job_did_not_create_is_a_refusal_naming_it(owner):
    (refusal,) = _create(owner)
    assert isinstance(refusal, Refusal) and refusal.code == 409 and not refusal.permanent
    assert "ConfigMap team/job-config exists and was not created by this job" in refusal.message
    assert "never adopts" in refusal.message
