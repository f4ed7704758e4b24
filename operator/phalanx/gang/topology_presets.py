"""Topology presets: the node labels each cloud publishes for its network, and which of them a
cluster's nodes carry (``topology.preset: auto``).

- gke: ``cloud.google.com/gce-topology-block`` / ``-subblock`` (compact placement, A3 Mega / A4 /
  A4X; ``gce-topology-host`` is left out: an A3/A4 VM is a whole host, so it is the hostname);
- aws: EC2 instance topology, ``topology.k8s.aws/network-node-layer-1`` (farthest from the
  instance) … ``-3`` (nearest);
- phalanx: ``phalanx.dev/topology-block`` / ``-subblock``, labels an admin sets by hand;
- kueue: the levels of a Kueue ``Topology`` object (``spec.levels[].nodeLabel``);
- custom: the admin's own ``topology.levels``.

NVLink cliques (GPU Feature Discovery's ``nvidia.com/gpu.clique``, a GB200 NVL72 rack) are not a
preset of their own but a level inside any: where nodes carry the label, a ``clique`` level sits
just above hostname, so a gang that fits one clique stays in it, and two nodes of one clique talk
at the NVLink figure. Nodes with none of the labels are reported (``Detection.unlabelled``),
never given a shared domain they do not have.

Bandwidths are per node in Gb/s, the unit NICs are sold in. The cloud figures are the documented
per-node GPU network (A3 Mega 8 × 200 Gb/s GPUDirect-TCPXO, p5 3200 Gb/s EFA); the providers do not
publish per-level oversubscription, so the coarser levels' figures are estimates an admin
overrides with ``custom`` levels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx import constants
from phalanx.api.config import TopologyConfig, TopologyLevel, TopologyPreset
from phalanx.api.topology_levels import (
    CLIQUE_LEVEL,
    HOSTNAME_LABEL,
    preset_levels,
    preset_table,
    static_levels,
)
from phalanx.gang.inventory import NodeInfo

NVLINK = "nvlink"  # what a detection is called when cliques are its only levels
# Extended resources that make a node an accelerator node: only those are expected to carry the
# network's topology labels (a cluster's CPU pools carry none and are not reported).
ACCELERATOR_RESOURCES = frozenset({constants.RESOURCE_GPU, "amd.com/gpu", "google.com/tpu", "aws.amazon.com/neuron",
                                   "aws.amazon.com/neuroncore", "habana.ai/gaudi", "gpu.intel.com/i915"})


# Auto's candidates in order of preference when as many nodes carry two of them.
AUTO_ORDER = (TopologyPreset.GKE, TopologyPreset.AWS, TopologyPreset.PHALANX)


def kueue_levels(topology: Mapping[str, Any]) -> list[TopologyLevel]:
    """The levels of a Kueue Topology object: each ``spec.levels[].nodeLabel``, named and priced
    as a built-in preset names that label (else after the label's last segment), hostname last."""
    known = {lvl.label: lvl for levels in preset_table().values() for lvl in levels}
    out: list[TopologyLevel] = []
    for entry in ((topology.get("spec") or {}).get("levels") or [])[:16]:
        label = str((entry or {}).get("nodeLabel") or "") if isinstance(entry, Mapping) else ""
        if label and label not in (lvl.label for lvl in out):
            out.append(known.get(label) or TopologyLevel(name=label.rsplit("/", 1)[-1], label=label))
    if not out or out[-1].label != HOSTNAME_LABEL:
        out = [lvl for lvl in out if lvl.label != HOSTNAME_LABEL] + preset_levels(TopologyPreset.NONE)
    return out


@dataclass(frozen=True)
class Candidate:
    name: str  # gke, aws, phalanx, custom, kueue:<object name>
    levels: tuple[TopologyLevel, ...]


@dataclass(frozen=True)
class Detection:
    """Which levels a cluster's nodes are described by, and how many of them carry those labels."""

    preset: str  # gke, aws, phalanx, custom, kueue:<name>, none; "+nvlink" when cliques are inside
    levels: tuple[TopologyLevel, ...]
    considered: int  # accelerator nodes (every node when the cluster has none)
    unlabelled: tuple[str, ...]  # considered nodes lacking a level's label (hostname aside)

    @property
    def level_names(self) -> list[str]:
        return [lvl.name for lvl in self.levels]

    def describe(self) -> str:
        """'gke+nvlink (block, subblock, clique, hostname): 32 of 32 accelerator nodes labelled'."""
        names = ", ".join(self.level_names)
        if self.preset == TopologyPreset.NONE:
            return (f"none ({names}): no node carries topology labels; every node is its own domain "
                    f"({self.considered} nodes)")
        labelled = self.considered - len(self.unlabelled)
        return f"{self.preset} ({names}): {labelled} of {self.considered} accelerator nodes labelled"

    def warning(self) -> str | None:
        """What an admin should hear: nodes placement knows nothing of (None: every node labelled)."""
        if not self.unlabelled:
            return None
        shown = ", ".join(self.unlabelled[:5]) + (f" and {len(self.unlabelled) - 5} more" if len(self.unlabelled) > 5 else "")
        wanted = ", ".join(lvl.label for lvl in self.levels if lvl.label != HOSTNAME_LABEL) or "topology labels"
        return (f"{len(self.unlabelled)} of {self.considered} nodes carry no topology labels ({wanted}): {shown}; "
                "placement treats each as an unknown domain")


def _considered(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    accelerated = [n for n in nodes if any(n.allocatable.get(r, 0) > 0 for r in ACCELERATOR_RESOURCES)]
    return accelerated or list(nodes)


def _carries(node: NodeInfo, levels: Iterable[TopologyLevel]) -> bool:
    return all(node.labels.get(lvl.label) for lvl in levels if lvl.label != HOSTNAME_LABEL)


def candidates(config: TopologyConfig) -> list[Candidate]:
    """What ``auto`` chooses among (in order of preference): the admin's own levels, the Kueue
    Topology objects the config holds, then the built-in presets."""
    out = [Candidate(TopologyPreset.CUSTOM, tuple(config.levels))] if config.levels else []
    for obj in config.kueue_topologies:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if config.kueue_topology in (None, name):
            out.append(Candidate(f"{TopologyPreset.KUEUE}:{name}", tuple(kueue_levels(obj))))
    return out + [Candidate(p, tuple(preset_levels(p))) for p in AUTO_ORDER]


def _chosen(config: TopologyConfig, considered: Sequence[NodeInfo]) -> Candidate:
    preset = config.preset
    if preset not in (TopologyPreset.AUTO, TopologyPreset.KUEUE):  # a fixed preset: no node decides
        return Candidate(preset, tuple(static_levels(config)))
    pool = candidates(config)
    if preset == TopologyPreset.KUEUE:
        pool = [c for c in pool if c.name.startswith(f"{TopologyPreset.KUEUE}:")]
    scored = [(sum(_carries(n, c.levels) for n in considered), -i, c) for i, c in enumerate(pool)]
    best = max(scored, default=None, key=lambda s: s[:2])
    if best is None or best[0] == 0:
        return Candidate(TopologyPreset.NONE, tuple(preset_levels(TopologyPreset.NONE)))
    return best[2]


def with_cliques(levels: Sequence[TopologyLevel], config: TopologyConfig) -> list[TopologyLevel]:
    """``levels`` with an NVLink clique level just above hostname: crossing it costs what leaving
    the host cost before (the network); two hosts of one clique talk at the NVLink figure."""
    *outer, host = levels
    clique = TopologyLevel(name=CLIQUE_LEVEL, label=config.nvlink_label, bandwidth_gbps=host.bandwidth_gbps,
                           latency_us=host.latency_us, oversubscription=host.oversubscription)
    inner = host.model_copy(update={"bandwidth_gbps": config.nvlink_bandwidth_gbps,
                                    "latency_us": config.intra_node_latency_us, "oversubscription": 1.0})
    return [*outer, clique, inner]


def detect(config: TopologyConfig, nodes: Sequence[NodeInfo]) -> Detection:
    """The levels for ``nodes`` under ``config`` and the Kueue Topology objects it holds (pure:
    the operator and ``phalanx plan`` call it with the same nodes and reach the same verdict)."""
    considered = _considered(nodes)
    chosen = _chosen(config, considered)
    levels, name = list(chosen.levels), chosen.name
    cliques = (config.preset not in (TopologyPreset.CUSTOM, TopologyPreset.NONE)
               and all(lvl.label != config.nvlink_label for lvl in levels)
               and any(n.labels.get(config.nvlink_label) for n in considered))
    if cliques:
        levels = with_cliques(levels, config)
        name = NVLINK if name == TopologyPreset.NONE else f"{name}+{NVLINK}"
    named = [lvl for lvl in chosen.levels if lvl.label != HOSTNAME_LABEL]

    def unlabelled(node: NodeInfo) -> bool:
        if named:
            return not _carries(node, named)
        return not (cliques and node.labels.get(config.nvlink_label))

    missing = tuple(sorted(n.name for n in considered if unlabelled(n)))
    return Detection(preset=name, levels=tuple(levels), considered=len(considered), unlabelled=missing)


