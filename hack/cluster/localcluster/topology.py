"""Topology file -> simulated GPU Node manifests (pure logic, no cluster access).

A topology file is YAML::

    name: fattree-64              # also the prefix of each nvidia.com/gpu.clique value
    namePrefix: gpu               # node names: <prefix>-b0-s1-r2-n3
    layout:                       # a tree, outermost level first; node count = product
      block: 2                    #   blocks (e.g. spine groups)
      subblock: 4                 #   subblocks per block (e.g. leaf groups)
      rack: 2                     #   racks per subblock
      node: 4                     #   nodes per rack
    cliqueLevel: rack             # NVLink domain: nodes sharing this level share a clique
    node:                         # every node's resources / extras
      gpu: 8
      gpuProduct: NVIDIA-H100-80GB-HBM3
      cpu: "192"
      memory: 2Ti
      pods: "110"
      ephemeralStorage: 7Ti
      labels: {}                  # extra labels
      taints: []                  # e.g. [{key: nvidia.com/gpu, effect: NoSchedule}]

Levels may be omitted (a missing level counts as 1). Each node gets:

* ``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch``, ``type: kwok``
* ``phalanx.dev/topology-block``    = ``b<i>``
* ``phalanx.dev/topology-subblock`` = ``b<i>-s<j>``        (unique cluster-wide)
* ``phalanx.dev/topology-rack``     = ``b<i>-s<j>-r<k>``   (unique cluster-wide)
* ``nvidia.com/gpu.clique``         = ``<name>.<clique index>`` (GPU Feature Discovery's
  ``<cluster>.<clique>`` shape)
* ``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``, ``nvidia.com/gpu.present``
* annotation ``kwok.x-k8s.io/node: fake`` (the node is played by kwok)
* ``status.capacity`` / ``status.allocatable`` with ``nvidia.com/gpu``, cpu, memory, pods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

LABEL_BLOCK = "phalanx.dev/topology-block"
LABEL_SUBBLOCK = "phalanx.dev/topology-subblock"
LABEL_RACK = "phalanx.dev/topology-rack"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_GPU_CLIQUE = "nvidia.com/gpu.clique"
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
LABEL_GPU_COUNT = "nvidia.com/gpu.count"
LABEL_GPU_PRESENT = "nvidia.com/gpu.present"
RESOURCE_GPU = "nvidia.com/gpu"

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
KWOK_NODE_SELECTOR = f"{KWOK_ANNOTATION}={KWOK_ANNOTATION_VALUE}"

LEVELS = ("block", "subblock", "rack", "node")
_ABBREV = {"block": "b", "subblock": "s", "rack": "r", "node": "n"}


class TopologyError(ValueError):
    pass


@dataclass(frozen=True)
class NodeSpec:
    gpu: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    cpu: str = "192"
    memory: str = "2Ti"
    pods: str = "110"
    ephemeral_storage: str = "7Ti"
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Topology:
    name: str
    layout: dict[str, int]
    name_prefix: str = "gpu"
    clique_level: str = "rack"
    node: NodeSpec = field(default_factory=NodeSpec)

    @property
    def node_count(self) -> int:
        return math.prod(self.layout[lvl] for lvl in LEVELS)

    @property
    def gpu_count(self) -> int:
        return self.node_count * self.node.gpu


def _str(v: Any, what: str) -> str:
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise TopologyError(f"{what} must be a string or number, got {v!r}")
    return str(v)


def parse_topology(doc: dict[str, Any]) -> Topology:
    """Validate a parsed topology document."""
    if not isinstance(doc, dict):
        raise TopologyError("topology must be a mapping")
    unknown = set(doc) - {"name", "namePrefix", "layout", "cliqueLevel", "node", "description"}
    if unknown:
        raise TopologyError(f"unknown topology keys: {sorted(unknown)}")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise TopologyError("topology needs a non-empty 'name'")
    raw_layout = doc.get("layout") or {}
    if not isinstance(raw_layout, dict):
        raise TopologyError("'layout' must be a mapping")
    bad = set(raw_layout) - set(LEVELS)
    if bad:
        raise TopologyError(f"unknown layout levels {sorted(bad)}; known: {list(LEVELS)}")
    layout: dict[str, int] = {}
    for lvl in LEVELS:
        n = raw_layout.get(lvl, 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TopologyError(f"layout.{lvl} must be a positive integer, got {n!r}")
        layout[lvl] = n
    clique_level = doc.get("cliqueLevel", "rack")
    if clique_level not in LEVELS:
        raise TopologyError(f"cliqueLevel must be one of {list(LEVELS)}, got {clique_level!r}")
    prefix = doc.get("namePrefix", "gpu")
    if not isinstance(prefix, str) or not prefix:
        raise TopologyError("'namePrefix' must be a non-empty string")

    raw_node = doc.get("node") or {}
    if not isinstance(raw_node, dict):
        raise TopologyError("'node' must be a mapping")
    known_node = {"gpu", "gpuProduct", "cpu", "memory", "pods", "ephemeralStorage", "labels", "taints"}
    bad = set(raw_node) - known_node
    if bad:
        raise TopologyError(f"unknown node keys: {sorted(bad)}")
    gpu = raw_node.get("gpu", 8)
    if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        raise TopologyError(f"node.gpu must be a non-negative integer, got {gpu!r}")
    labels = raw_node.get("labels") or {}
    if not isinstance(labels, dict):
        raise TopologyError("node.labels must be a mapping")
    taints = raw_node.get("taints") or []
    if not isinstance(taints, list) or not all(isinstance(t, dict) and "key" in t for t in taints):
        raise TopologyError("node.taints must be a list of {key, value?, effect}")
    defaults = NodeSpec()
    node = NodeSpec(
        gpu=gpu,
        gpu_product=_str(raw_node.get("gpuProduct", defaults.gpu_product), "node.gpuProduct"),
        cpu=_str(raw_node.get("cpu", defaults.cpu), "node.cpu"),
        memory=_str(raw_node.get("memory", defaults.memory), "node.memory"),
        pods=_str(raw_node.get("pods", defaults.pods), "node.pods"),
        ephemeral_storage=_str(
            raw_node.get("ephemeralStorage", defaults.ephemeral_storage), "node.ephemeralStorage"
        ),
        labels={str(k): _str(v, f"node.labels[{k}]") for k, v in labels.items()},
        taints=[dict(t) for t in taints],
    )
    return Topology(name=name, layout=layout, name_prefix=prefix, clique_level=clique_level, node=node)


def topologies_dir() -> Path | None:
    """``hack/cluster/topologies``, beside this package."""
    cand = Path(__file__).resolve().parent.parent / "topologies"
    return cand if cand.is_dir() else None


def load_topology(name_or_path: str | Path) -> Topology:
    """Load a topology by file path, or by name from ``hack/cluster/topologies``."""
    p = Path(name_or_path)
    if not p.is_file():
        d = topologies_dir()
        stem = p.name[:-5] if p.name.endswith(".yaml") else p.name
        cand = d / f"{stem}.yaml" if d else None
        if cand is None or not cand.is_file():
            raise TopologyError(f"topology {str(name_or_path)!r} not found (looked in {d})")
        p = cand
    with open(p) as f:
        return parse_topology(yaml.safe_load(f))


def node_manifests(topo: Topology) -> list[dict[str, Any]]:
    """Every Node object of the topology, in a stable order."""
    out: list[dict[str, Any]] = []
    lay = topo.layout
    clique_depth = LEVELS.index(topo.clique_level)
    resources = {
        "cpu": topo.node.cpu,
        "memory": topo.node.memory,
        "pods": topo.node.pods,
        "ephemeral-storage": topo.node.ephemeral_storage,
    }
    if topo.node.gpu:
        resources[RESOURCE_GPU] = str(topo.node.gpu)
    for b in range(lay["block"]):
        for s in range(lay["subblock"]):
            for r in range(lay["rack"]):
                for n in range(lay["node"]):
                    idx = (b, s, r, n)
                    block = f"b{b}"
                    subblock = f"{block}-s{s}"
                    rack = f"{subblock}-r{r}"
                    name = f"{topo.name_prefix}-{rack}-n{n}"
                    # Clique index: the node's position in the tree cut at cliqueLevel.
                    clique = 0
                    for depth, lvl in enumerate(LEVELS[: clique_depth + 1]):
                        clique = clique * lay[lvl] + idx[depth]
                    labels = {
                        "type": "kwok",
                        LABEL_HOSTNAME: name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        LABEL_BLOCK: block,
                        LABEL_SUBBLOCK: subblock,
                        LABEL_RACK: rack,
                    }
                    if topo.node.gpu:
                        labels.update(
                            {
                                LABEL_GPU_CLIQUE: f"{topo.name}.{clique}",
                                LABEL_GPU_PRODUCT: topo.node.gpu_product,
                                LABEL_GPU_COUNT: str(topo.node.gpu),
                                LABEL_GPU_PRESENT: "true",
                            }
                        )
                    labels.update(topo.node.labels)
                    spec: dict[str, Any] = {}
                    if topo.node.taints:
                        spec["taints"] = [dict(t) for t in topo.node.taints]
                    out.append(
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "metadata": {
                                "name": name,
                                "labels": labels,
                                "annotations": {
                                    KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                                    "node.alpha.kubernetes.io/ttl": "0",
                                },
                            },
                            "spec": spec,
                            "status": {
                                "capacity": dict(resources),
                                "allocatable": dict(resources),
                                # nodeInfo, conditions, addresses: kwok's node-initialize stage.
                            },
                        }
                    )
    return out
