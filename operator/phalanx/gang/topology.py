"""The topology tree: node labels + configured levels (coarse → fine, hostname last).

A domain is identified by its path from the root, a tuple of label values, one per level down to
its own: ``("b1",)`` is block b1, ``("b1", "s3")`` is subblock s3 inside b1. Paths (not bare
values) keep equal names under different parents apart. A node without a level's label sits in
the ``unknown`` domain of that level under its parent; such domains are never assumed to be
co-located (the planner does not use them to satisfy ``required``, the cost model treats them as
crossing the level). The finest level falls back to the node name: a host is its own domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from phalanx.api.config import TopologyConfig, TopologyLevel, TopologyPreset, levels_of
from phalanx.api.topology_levels import all_preset_levels
from phalanx.constants import TOPOLOGY_UNKNOWN_DOMAIN
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.topology_presets import Detection, detect

Path = tuple[str, ...]
UNKNOWN = TOPOLOGY_UNKNOWN_DOMAIN


def _sort_key(value: str) -> tuple[int, tuple]:
    """Natural order ('n2' < 'n10'), unknown last."""
    if value == UNKNOWN:
        return (1, ())
    parts: list = []
    num = ""
    txt = ""
    for ch in value:
        if ch.isdigit():
            if txt:
                parts.append((1, txt, 0))
                txt = ""
            num += ch
        else:
            if num:
                parts.append((0, "", int(num)))
                num = ""
            txt += ch
    if num:
        parts.append((0, "", int(num)))
    if txt:
        parts.append((1, txt, 0))
    return (0, tuple(parts))


@dataclass
class Topology:
    levels: list[TopologyLevel]
    paths: dict[str, Path]  # node name -> full path (one value per level)
    children: dict[Path, list[Path]] = field(default_factory=dict)  # domain -> child domains, DFS order
    members: dict[Path, list[str]] = field(default_factory=dict)  # finest domain -> node names

    @classmethod
    def build(
        cls, nodes: Iterable[NodeInfo], levels: Sequence[TopologyLevel] | TopologyConfig | None = None
    ) -> Topology:
        levels = levels_of(levels)
        if not levels:
            raise ValueError("topology needs at least one level")
        last = len(levels) - 1
        paths: dict[str, Path] = {}
        child_sets: dict[Path, set[Path]] = {}
        members: dict[Path, list[str]] = {}
        for node in nodes:
            domains = []
            for index, lvl in enumerate(levels):
                domain = node.labels.get(lvl.label)
                if not domain:
                    domain = node.name if index == last else UNKNOWN
                domains.append(domain)
            path = tuple(domains)
            paths[node.name] = path
            for depth in range(len(path)):
                child_sets.setdefault(path[:depth], set()).add(path[: depth + 1])
            members.setdefault(path, []).append(node.name)
        children = {
            parent: sorted(kids, key=lambda child: _sort_key(child[-1])) for parent, kids in child_sets.items()
        }
        for names in members.values():
            if len(names) > 1:
                names.sort(key=_sort_key)
        return cls(levels=levels, paths=paths, children=children, members=members)

    # ------------------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self.levels)

    @property
    def level_names(self) -> list[str]:
        return [lvl.name for lvl in self.levels]

    def level_index(self, name_or_label: str) -> int:
        """Index of a level given by name ('subblock') or label key. Raises KeyError."""
        for index, lvl in enumerate(self.levels):
            if name_or_label in (lvl.name, lvl.label):
                return index
        known = ", ".join(f"{lvl.name} ({lvl.label})" for lvl in self.levels)
        raise KeyError(f"unknown topology level {name_or_label!r}; known: {known}")

    @staticmethod
    def is_unknown(path: Path) -> bool:
        return bool(path) and path[-1] == UNKNOWN

    def domain_of(self, node: str, level: int) -> Path:
        return self.paths[node][: level + 1]

    def order(self, nodes: Iterable[str]) -> list[str]:
        """Depth-first order of the tree: consecutive nodes share the deepest possible domain."""
        return sorted(nodes, key=lambda node: tuple(_sort_key(domain) for domain in self.paths[node]) + (_sort_key(node),))

    def span(self, nodes: Iterable[str]) -> dict[str, int]:
        """Number of distinct domains used at each level. A level where one of the nodes has no
        label is left out: nodes without the label are not known to share a domain, so no count
        would be true (``unlabelled_levels`` names them)."""
        nodes = list(nodes)
        return {
            lvl.name: len({self.paths[node][: index + 1] for node in nodes}) for index, lvl in enumerate(self.levels)
            if not any(self.paths[node][index] == UNKNOWN for node in nodes)
        }

    def unlabelled_levels(self, nodes: Iterable[str]) -> dict[str, int]:
        """Per level, how many of ``nodes`` carry no label for it (levels where all do: absent)."""
        nodes = list(nodes)
        out = {lvl.name: sum(self.paths[node][index] == UNKNOWN for node in nodes) for index, lvl in enumerate(self.levels)}
        return {name: count for name, count in out.items() if count}

    def counts(self, nodes: Iterable[str]) -> dict[Path, int]:
        """How many of ``nodes`` each domain (and the root ``()``) holds."""
        out: dict[Path, int] = {}
        for node in nodes:
            path = self.paths[node]
            for depth in range(len(path) + 1):
                key = path[:depth]
                out[key] = out.get(key, 0) + 1
        return out

    def describe(self, path: Path) -> str:
        """'block=b1/subblock=s3' for a domain path."""
        return "/".join(f"{self.levels[index].name}={domain}" for index, domain in enumerate(path))


def topology_levels(
    levels: Sequence[TopologyLevel] | TopologyConfig | None = None, names: Sequence[str] | None = None
) -> list[TopologyLevel]:
    """``levels`` (a config: its levels without nodes), optionally narrowed/re-ordered by name or
    label key (``--levels``). A name found in no preset is taken as a bare label key with default
    link figures."""
    base = levels_of(levels)
    if not names:
        return base
    by_key: dict[str, TopologyLevel] = {}
    for lvl in [*all_preset_levels(), *base]:  # the given levels win a shared name
        by_key |= {lvl.name: lvl, lvl.label: lvl}
    out = []
    for given in names:
        name = given.strip()
        if not name:
            continue
        out.append(by_key.get(name) or TopologyLevel(name=name.rsplit("/", 1)[-1], label=name))
    return out


def current_levels(config: TopologyConfig) -> list[TopologyLevel]:
    """The levels where no nodes are at hand (rendering, validation): with a preset the nodes
    decide (auto, kueue), the last detection's in this process, else ``levels_of``."""
    found = last_detection()
    if config.preset in (TopologyPreset.AUTO, TopologyPreset.KUEUE) and found is not None:
        return list(found.levels)
    return levels_of(config)


_last_built: tuple[tuple[NodeInfo, ...], list[TopologyLevel], Topology] | None = None
_last_detection: tuple[tuple[NodeInfo, ...], TopologyConfig, Detection] | None = None


def _same_nodes(kept: tuple[NodeInfo, ...], nodes: Sequence[NodeInfo]) -> bool:
    """The same node objects in the same order: by identity, not value (NodeInfo is frozen, and
    the operator's node index makes a changed node a new object)."""
    return len(kept) == len(nodes) and all(a is b for a, b in zip(kept, nodes, strict=True))


def detection_for(nodes: Sequence[NodeInfo], config: TopologyConfig) -> Detection:
    """``topology_presets.detect``, reused while the same node objects and config come back (as
    ``topology_for``); the last one is what ``last_detection`` reports."""
    global _last_detection
    last = _last_detection
    if last is not None and last[1] is config and _same_nodes(last[0], nodes):
        return last[2]
    found = detect(config, nodes)
    _last_detection = (tuple(nodes), config, found)
    return found


def last_detection() -> Detection | None:
    """The detection of the last plan in this process (None before any)."""
    return _last_detection[2] if _last_detection else None


def levels_for(nodes: Sequence[NodeInfo], topology: Sequence[TopologyLevel] | TopologyConfig | None) -> list[TopologyLevel]:
    """The levels a plan over ``nodes`` uses: a config's detected for these nodes (its preset),
    a list of levels as given."""
    if isinstance(topology, TopologyConfig):
        return list(detection_for(nodes, topology).levels)
    return levels_of(topology)


def topology_for(nodes: Sequence[NodeInfo], levels: Sequence[TopologyLevel] | TopologyConfig | None = None) -> Topology:
    """``Topology.build`` over the levels ``levels_for`` gives, reused while the same node objects
    and levels come back: the operator's node index keeps an unchanged node's NodeInfo, so a pass
    after no node event (nearly every pass) skips the rebuild (``_same_nodes``). Callers must not
    mutate the result (no planner does)."""
    global _last_built
    levels = levels_for(nodes, levels)
    last = _last_built
    if last is not None and last[1] == levels and _same_nodes(last[0], nodes):
        return last[2]
    topo = Topology.build(nodes, levels)
    _last_built = (tuple(nodes), levels, topo)
    return topo
