"""The runtime's view of a TrainingJob: the spec plus job identity, read from the JSON the operator
mounts at ``$PHALANX_CONFIG`` (torch-free). Which layouts can run is ``phalanx.api.layout``
(shared with the operator's validator); the mesh built from it is ``distributed/parallel_dims.py``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx.api.layout import Layout, layout_of, model_shape
from phalanx.api.presets import ModelShape
from phalanx.api.types import TrainingJobSpec
from phalanx.constants import ENV_CONFIG_PATH, RUNTIME_CONFIG_DIR, RUNTIME_CONFIG_FILE


@dataclass
class RuntimeConfig:
    """What the workers need: the spec plus job identity."""

    spec: TrainingJobSpec
    name: str = "job"
    namespace: str = "default"
    api_version: str = "phalanx.dev/v1alpha1"

    @property
    def layout(self) -> Layout:
        return layout_of(self.spec)

    @property
    def shape(self) -> ModelShape | None:
        return model_shape(self.spec)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RuntimeConfig:
        meta = doc.get("metadata") or {}
        spec = TrainingJobSpec.model_validate(doc["spec"])
        return cls(spec=spec, name=meta.get("name", "job"), namespace=meta.get("namespace", "default"),
                   api_version=doc.get("apiVersion", "phalanx.dev/v1alpha1"))

    def to_dict(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self.spec.model_dump(by_alias=True, mode="json", exclude_none=True)}


def default_config_path() -> str:
    return os.environ.get(ENV_CONFIG_PATH, f"{RUNTIME_CONFIG_DIR}/{RUNTIME_CONFIG_FILE}")


def load_config(path: str | os.PathLike | None = None) -> RuntimeConfig:
    path = Path(path or default_config_path())
    return RuntimeConfig.from_dict(json.loads(path.read_text()))
