"""Which topology the cluster's nodes carry (``topology.preset``, gang/topology_presets.py), found
at start-up and again after node changes: logged when it changes, a warning naming the
accelerator nodes without topology labels, and the ``phalanx_topology_*`` gauges. The planner
detects the same way from the same nodes (``gang.topology.topology_for``); this only reports.

Kueue Topology objects (auto's candidates, the kueue preset's levels) are read once at start-up."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from phalanx.api.config import TopologyConfig, TopologyPreset
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.topology import detection_for
from phalanx.gang.topology_presets import Detection
from phalanx.metrics import TOPOLOGY_PRESET, TOPOLOGY_UNLABELLED_NODES

log = logging.getLogger("phalanx.operator")

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_TOPOLOGIES = "topologies"
BATCH_SECONDS = 1.0  # node events come in bursts (a node pool scaling): one detection per burst


async def read_kueue_topologies(kube: Any, config: TopologyConfig) -> TopologyConfig:
    """``config`` with the cluster's Kueue Topology objects (none where Kueue is not installed or
    they cannot be listed: auto then chooses among the built-in presets)."""
    if config.preset not in (TopologyPreset.AUTO, TopologyPreset.KUEUE):
        return config
    try:
        served = await kube.served_resources(KUEUE_GROUP)
        versions = [v for v, plurals in served.items() if KUEUE_TOPOLOGIES in plurals]
        if not versions:
            return config
        found = await kube.list_cluster_custom(KUEUE_GROUP, max(versions, key=api_version_rank), KUEUE_TOPOLOGIES)
    except Exception as exc:  # noqa: BLE001 - Kueue absent or RBAC refused: the built-in presets decide
        log.info("Kueue Topology objects not read (%s); topology presets from node labels only", exc)
        return config
    log.info("Kueue Topology objects: %s", ", ".join((t.get("metadata") or {}).get("name", "?") for t in found) or "none")
    return config.with_kueue_topologies(found)


def api_version_rank(version: str) -> tuple[int, int, int]:
    """Kubernetes' version priority: GA above beta above alpha, then the higher number (v1 > v1beta2)."""
    match = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not match:
        return (-1, 0, 0)
    major, stage, minor = match.groups()
    return ({"alpha": 0, "beta": 1, None: 2}[stage], int(major), int(minor or 0))


def _key(found: Detection) -> tuple:
    return found.preset, found.level_names, found.unlabelled


class TopologyWatch:
    """Reports the detected topology once per burst of node changes."""

    def __init__(self) -> None:
        self._due: asyncio.Event | None = None
        self.reported: Detection | None = None

    def changed(self) -> None:
        if self._due is not None:
            self._due.set()

    def report(self, found: Detection) -> bool:
        """Log and export ``found`` when it differs from the last report; whether it did."""
        if self.reported is not None and _key(self.reported) == _key(found):
            return False
        log.info("topology: %s", found.describe())
        warning = found.warning()
        if warning:
            log.warning("topology: %s", warning)
        TOPOLOGY_PRESET.clear()
        TOPOLOGY_PRESET.labels(found.preset, ",".join(found.level_names)).set(1)
        TOPOLOGY_UNLABELLED_NODES.set(len(found.unlabelled))
        self.reported = found
        return True

    async def run(self, executor: concurrent.futures.Executor, config: TopologyConfig,
                  nodes: Callable[[], Sequence[NodeInfo]]) -> None:
        """Forever: after start-up and each burst of node changes, detect on the decide thread
        (off the event loop: it reads every node) and report."""
        loop = asyncio.get_running_loop()
        self._due = asyncio.Event()
        self._due.set()
        while True:
            await self._due.wait()
            await asyncio.sleep(BATCH_SECONDS)
            self._due.clear()
            current = list(nodes())
            if not current:  # the node index not filled yet: its events come
                continue
            try:
                found = await loop.run_in_executor(executor, detection_for, current, config)
                self.report(found)
            except Exception:  # noqa: BLE001 - a report must not stop the watch
                log.exception("topology detection failed")
