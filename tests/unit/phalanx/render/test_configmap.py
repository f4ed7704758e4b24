"""render.configmap: the ConfigMap with the resolved runtime config and the framework's files."""

from __future__ import annotations

import copy
import json

import pytest

from phalanx import constants
from phalanx.render.configmap import build_config_map, runtime_config
from phalanx.validate import parse_job
from tests.conftest import MINIMAL
from tests.unit.phalanx.render.test_job import _render


def test_config_map_holds_resolved_spec(job_obj):
    cm = _render(job_obj)[1]
    cfg = json.loads(cm["data"]["config.json"])
    assert cfg["metadata"] == {"name": "job", "namespace": "team"}
    assert cfg["spec"]["parallelism"]["zero"] == 0  # defaults filled in
    assert cfg["spec"]["training"]["globalBatchSize"] == 8


def test_runtime_config_is_the_validated_spec_with_its_defaults():
    job = parse_job(copy.deepcopy(MINIMAL))
    config = runtime_config(job)
    assert (config["apiVersion"], config["kind"]) == (constants.API_VERSION, constants.KIND)
    assert config["spec"] == job.spec.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert "uid" not in config["metadata"]  # the runtime is told the job's name, not its identity


@pytest.mark.parametrize("framework,files", [
    ({}, [constants.RUNTIME_CONFIG_KEY]),
    ({"framework": "deepspeed", "command": None}, [constants.DEEPSPEED_CONFIG_FILE, constants.RUNTIME_CONFIG_KEY]),
])
def test_config_map_holds_the_runtime_config_and_the_frameworks_files(framework, files):
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(framework)
    cm = build_config_map(parse_job(obj))
    assert sorted(cm["data"]) == sorted(files)
    assert cm["metadata"]["name"] == "job-config"
    assert cm["metadata"]["labels"][constants.LABEL_COMPONENT] == constants.COMPONENT_CONFIG
    text = cm["data"][constants.RUNTIME_CONFIG_KEY]
    assert json.loads(text) == runtime_config(parse_job(obj))
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True)  # stable text: no needless ConfigMap updates
