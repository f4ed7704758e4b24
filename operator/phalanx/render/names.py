"""Names and labels of a job's children, and their metadata (pure)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from phalanx import constants
from phalanx.api.slots import master_addr as master_addr  # re-exported with the children's names
from phalanx.api.slots import service_name as service_name
from phalanx.api.slots import worker_hostname
from phalanx.api.types import TrainingJob


def config_map_name(job: str) -> str:
    return f"{job}-config"


def network_policy_name(job: str) -> str:
    return f"{job}-gang"


def hostname(job: str, rank: int) -> str:
    return worker_hostname(job, rank)


def base_labels(job: TrainingJob, component: str) -> dict[str, str]:
    return {
        constants.LABEL_JOB_NAME: job.metadata.name,
        constants.LABEL_COMPONENT: component,
        constants.LABEL_MANAGED_BY: constants.MANAGED_BY,
    }


def metadata(job: TrainingJob, name: str, component: str, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": job.metadata.namespace,
        "labels": {**base_labels(job, component), **labels},
    }
    owners = job.owner_references()
    if owners:
        meta["ownerReferences"] = owners
    return meta


def spec_hash(spec_dict: dict[str, Any]) -> str:
    blob = json.dumps(spec_dict, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
