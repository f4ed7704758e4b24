"""ConfigMap with the resolved runtime config (the runtime reads it from PHALANX_CONFIG) and the
files of the job's framework (``framework: deepspeed``: the DeepSpeed config, PHALANX_DEEPSPEED_CONFIG)."""

from __future__ import annotations

import json
from typing import Any

from phalanx import constants
from phalanx.api.types import TrainingJob
from phalanx.frameworks import plugin_for
from phalanx.render.names import config_map_name, metadata


def runtime_config(job: TrainingJob) -> dict[str, Any]:
    """What the runtime sees: the validated spec with every default filled in."""
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "metadata": {"name": job.metadata.name, "namespace": job.metadata.namespace},
        "spec": job.spec.model_dump(by_alias=True, mode="json", exclude_none=True),
    }


def build_config_map(job: TrainingJob) -> dict[str, Any]:
    data = {constants.RUNTIME_CONFIG_KEY: json.dumps(runtime_config(job), indent=2, sort_keys=True)}
    data |= plugin_for(job.spec).config_files(job.spec)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(job, config_map_name(job.metadata.name), constants.COMPONENT_CONFIG),
        "data": data,
    }
