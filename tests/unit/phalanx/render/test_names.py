"""render.names: names and labels of a job's children, their metadata, the spec hash."""

from __future__ import annotations

import copy

import pytest

from phalanx import constants
from phalanx.render import names
from phalanx.validate import parse_job
from tests.conftest import MINIMAL


def job(uid="uid-1"):
    obj = copy.deepcopy(MINIMAL)
    obj["metadata"]["uid"] = uid
    return parse_job(obj)


@pytest.mark.parametrize("name_of,expected", [
    (lambda: names.config_map_name("job"), "job-config"),
    (lambda: names.network_policy_name("job"), "job-gang"),
    (lambda: names.hostname("job", 3), "job-node-3"),
    (lambda: names.service_name("job"), "job"),  # pods resolve as <hostname>.<service>
    (lambda: names.master_addr("job"), "job-node-0.job"),  # rank 0 through the headless Service
])
def test_child_names(name_of, expected):
    assert name_of() == expected


def test_metadata_labels_the_child_and_names_its_owner():
    meta = names.metadata(job(), "job-node-0-0", constants.COMPONENT_WORKER, extra="x")
    assert meta["name"] == "job-node-0-0" and meta["namespace"] == "team"
    assert meta["labels"] == {constants.LABEL_JOB_NAME: "job", constants.LABEL_COMPONENT: "worker",
                              constants.LABEL_MANAGED_BY: constants.MANAGED_BY, "extra": "x"}
    assert meta["ownerReferences"] == [{"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": "job",
                                        "uid": "uid-1", "controller": True, "blockOwnerDeletion": True}]


def test_a_job_without_a_uid_owns_nothing_yet():
    """An ownerReference without a uid is invalid: none until the job has one (phalanx render)."""
    assert "ownerReferences" not in names.metadata(job(uid=None), "job", constants.COMPONENT_SERVICE)


def test_each_child_gets_its_own_labels():
    first = names.metadata(job(), "a", constants.COMPONENT_WORKER, extra="x")
    second = names.metadata(job(), "b", constants.COMPONENT_CONFIG)
    assert "extra" not in second["labels"] and first["labels"] is not second["labels"]


@pytest.mark.parametrize("left,right,same", [
    ({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, True),  # key order does not count
    ({"a": 1}, {"a": 2}, False),
    ({"a": [1, 2]}, {"a": [2, 1]}, False),  # list order does
    ({"a": None}, {}, False),
])
def test_spec_hash(left, right, same):
    digest = names.spec_hash(left)
    assert len(digest) == 16 and all(ch in "0123456789abcdef" for ch in digest)
    assert (digest == names.spec_hash(right)) is same
