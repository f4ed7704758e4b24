"""Headless Service giving every pod a stable DNS name for rendezvous."""

from __future__ import annotations

from typing import Any

from phalanx import constants
from phalanx.api.types import TrainingJob
from phalanx.frameworks import plugin_for
from phalanx.render.names import metadata, service_name


def build_service(job: TrainingJob, master_port: int = constants.DEFAULT_MASTER_PORT) -> dict[str, Any]:
    name = job.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(job, service_name(name), constants.COMPONENT_SERVICE),
        "spec": {
            "clusterIP": "None",
            # Ranks must resolve each other before they are Ready (rendezvous happens first).
            "publishNotReadyAddresses": True,
            "selector": {constants.LABEL_JOB_NAME: name, constants.LABEL_COMPONENT: constants.COMPONENT_WORKER},
            "ports": [
                {"name": "rendezvous", "port": master_port, "targetPort": master_port, "protocol": "TCP"},
                {"name": "progress", "port": constants.PROGRESS_PORT, "targetPort": constants.PROGRESS_PORT, "protocol": "TCP"},
                {"name": "metrics", "port": constants.METRICS_PORT, "targetPort": constants.METRICS_PORT, "protocol": "TCP"},
            ] + plugin_for(job.spec).service_ports(job),
        },
    }
