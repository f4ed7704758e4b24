"""The built-in topology presets' levels (gke, aws, phalanx, none) with their default link
figures, and the levels a config gives without looking at nodes. Data only: which preset a
cluster's nodes carry is decided in gang/topology_presets.py."""

from __future__ import annotations

import functools

from phalanx.api.config import TopologyConfig, TopologyLevel, TopologyPreset, default_levels

HOSTNAME_LABEL = "kubernetes.io/hostname"
CLIQUE_LEVEL = "clique"


def _level(name: str, label: str, gbps: float, latency: float, oversubscription: float = 1.0) -> TopologyLevel:
    return TopologyLevel(name=name, label=label, bandwidth_gbps=gbps, latency_us=latency,
                         oversubscription=oversubscription)


@functools.cache
def preset_table() -> dict[str, tuple[TopologyLevel, ...]]:
    return {
        TopologyPreset.GKE: (
            _level("block", "cloud.google.com/gce-topology-block", 1600, 10, 2),
            _level("subblock", "cloud.google.com/gce-topology-subblock", 1600, 5),
            _level("hostname", HOSTNAME_LABEL, 1600, 2),
        ),
        TopologyPreset.AWS: (
            _level("layer-1", "topology.k8s.aws/network-node-layer-1", 3200, 20, 4),
            _level("layer-2", "topology.k8s.aws/network-node-layer-2", 3200, 10, 2),
            _level("layer-3", "topology.k8s.aws/network-node-layer-3", 3200, 5),
            _level("hostname", HOSTNAME_LABEL, 3200, 2),
        ),
        TopologyPreset.PHALANX: tuple(default_levels()),
        TopologyPreset.NONE: (_level("hostname", HOSTNAME_LABEL, 400, 2),),
    }


def preset_levels(preset: str) -> list[TopologyLevel]:
    """A built-in preset's levels (gke, aws, phalanx, none)."""
    return list(preset_table()[preset])


def all_preset_levels() -> list[TopologyLevel]:
    """Every built-in preset's levels (a name's first preset wins in a lookup by name)."""
    return [lvl for levels in reversed(list(preset_table().values())) for lvl in levels]


def static_levels(config: TopologyConfig) -> list[TopologyLevel]:
    """The levels when no node is looked at (offline validation): custom's own, a fixed preset's,
    else (auto, kueue) the phalanx preset's."""
    if config.preset == TopologyPreset.CUSTOM:
        return list(config.levels or default_levels())
    if config.preset in (TopologyPreset.GKE, TopologyPreset.AWS, TopologyPreset.NONE):
        return preset_levels(config.preset)
    return default_levels()


def known_level_names(config: TopologyConfig) -> set[str]:
    """Every level name or label a job may name in ``scheduling.topology`` before the nodes are
    known: with auto or kueue, any preset's (the planner then says when the detected one lacks it)."""
    if config.preset in (TopologyPreset.AUTO, TopologyPreset.KUEUE):
        pools = [*preset_table().values(), config.levels,
                 [TopologyLevel(name=CLIQUE_LEVEL, label=config.nvlink_label)]]
    else:
        pools = [static_levels(config), [TopologyLevel(name=CLIQUE_LEVEL, label=config.nvlink_label)]]
    return {key for levels in pools for lvl in levels for key in (lvl.name, lvl.label)}
