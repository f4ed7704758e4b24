"""The pods of a gang as slots: their order, names, labels and what each slot runs with."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.api.slots import (
    Slot,
    master_addr,
    role_counts,
    slot_command,
    slot_hostname,
    slot_labels,
    slot_of,
    slot_pod_name,
    slot_resources,
    slots,
    worker,
)
from phalanx.api.types import TrainingJobSpec
from tests.unit.test_roles import job


def test_slots_are_workers_then_roles_in_order():
    assert slots(job().spec) == [Slot("worker", 0), Slot("worker", 1), Slot("ps", 0), Slot("ps", 1), Slot("chief", 0)]


def spec(**fields) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"image": "img:1", "command": ["python", "train.py"], **fields})


def test_role_counts_follow_the_order_of_the_slots():
    with_roles = job().spec
    counts = role_counts(with_roles)
    assert counts == {"worker": 2, "ps": 2, "chief": 1}
    assert list(counts) == list(dict.fromkeys(s.role for s in slots(with_roles)))
    assert role_counts(spec(nodes=3)) == {"worker": 3}


@pytest.mark.parametrize(("slot", "hostname", "pod_name", "words"), [
    (worker(0), "job-node-0", "job-node-0-2", "node-rank 0"),
    (worker(7), "job-node-7", "job-node-7-2", "node-rank 7"),
    (Slot("ps", 1), "job-ps-1", "job-ps-1-2", "ps 1"),
    (Slot("chief", 0), "job-chief-0", "job-chief-0-2", "chief 0"),
])
def test_hostnames_pod_names_and_words_of_a_slot(slot, hostname, pod_name, words):
    assert slot_hostname("job", slot) == hostname
    assert slot_pod_name("job", slot, 2) == pod_name
    assert str(slot) == words


def test_rank_zero_is_reached_through_the_headless_service():
    assert master_addr("train") == "train-node-0.train"


@pytest.mark.parametrize(("roles", "slot", "labels"), [
    ([], worker(3), {constants.LABEL_NODE_RANK: "3"}),
    ([{"name": "ps"}], worker(3), {constants.LABEL_NODE_RANK: "3", constants.LABEL_ROLE: "worker", constants.LABEL_ROLE_INDEX: "3"}),
    ([{"name": "ps"}], Slot("ps", 0), {constants.LABEL_ROLE: "ps", constants.LABEL_ROLE_INDEX: "0"}),
])
def test_slot_labels_and_back(roles, slot, labels):
    assert slot_labels(spec(roles=roles), slot) == labels
    assert slot_of({"metadata": {"labels": labels}}) == slot


@pytest.mark.parametrize("pod", [
    {},
    {"metadata": {}},
    {"metadata": {"labels": None}},
    {"metadata": {"labels": {"app": "x"}}},
    {"metadata": {"labels": {constants.LABEL_NODE_RANK: "one"}}},
    {"metadata": {"labels": {constants.LABEL_ROLE: "ps"}}},  # no role-index
    {"metadata": {"labels": {constants.LABEL_ROLE: "ps", constants.LABEL_ROLE_INDEX: "x"}}},
])
def test_a_pod_without_readable_slot_labels_has_no_slot(pod):
    assert slot_of(pod) is None


def test_slots_sort_by_role_then_index():
    assert sorted([Slot("ps", 1), worker(1), Slot("ps", 0), worker(0)]) == [Slot("ps", 0), Slot("ps", 1), worker(0), worker(1)]
    assert worker(0).is_worker and not Slot("ps", 0).is_worker


def test_each_slot_gets_its_roles_resources_or_the_workers():
    s = spec(resources={"gpus": 8}, roles=[{"name": "ps", "resources": {"cpu": "4"}}])
    assert slot_resources(s, worker(0)).gpus == 8
    assert slot_resources(s, Slot("ps", 0)).cpu == "4" and slot_resources(s, Slot("ps", 0)).gpus == 0


@pytest.mark.parametrize(("fields", "slot", "expected"), [
    ({}, worker(0), (["python", "train.py"], None)),
    ({"args": ["--lr", "1"]}, worker(0), (["python", "train.py"], ["--lr", "1"])),
    # a role without a command of its own runs spec.command, with its own args if it has them
    ({"args": ["--lr", "1"], "roles": [{"name": "ps"}]}, Slot("ps", 0), (["python", "train.py"], ["--lr", "1"])),
    ({"args": ["--lr", "1"], "roles": [{"name": "ps", "args": ["--ps"]}]}, Slot("ps", 0), (["python", "train.py"], ["--ps"])),
    # a role's own command takes only its own args, never spec.args
    ({"args": ["--lr", "1"], "roles": [{"name": "ps", "command": ["ps.sh"]}]}, Slot("ps", 0), (["ps.sh"], None)),
    ({"roles": [{"name": "ps", "command": ["ps.sh"], "args": ["-v"]}]}, Slot("ps", 0), (["ps.sh"], ["-v"])),
])
def test_slot_command(fields, slot, expected):
    assert slot_command(spec(**fields), slot) == expected


def test_the_built_in_runtime_has_no_command():
    runtime = TrainingJobSpec.model_validate({"image": "img:1", "model": {"preset": "debug"}})
    assert slot_command(runtime, worker(0)) == (None, None)
