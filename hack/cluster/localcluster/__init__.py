"""A real local Kubernetes control plane for integration tests.

etcd + kube-apiserver + kube-controller-manager + kube-scheduler built from source
(``hack/cluster/build.sh``), with kwok playing simulated GPU nodes described by a
topology file (``hack/cluster/topologies/*.yaml``). See docs/local-cluster.md.

Importing this package pulls in neither kopf nor the kubernetes client; ``nodes``
imports the client lazily.
"""

from .binaries import REQUIRED, default_bin_dir, missing_binaries
from .cluster import ClusterError, LocalCluster
from .nodes import (
    SIM_EXIT_CODE_ANNOTATION,
    SIM_EXIT_DELAY_ANNOTATION,
    api_client,
    create_nodes,
    finish_pod,
    wait_nodes_ready,
)
from .topology import (
    KWOK_ANNOTATION,
    KWOK_NODE_SELECTOR,
    LABEL_BLOCK,
    LABEL_GPU_CLIQUE,
    LABEL_RACK,
    LABEL_SUBBLOCK,
    Topology,
    TopologyError,
    load_topology,
    node_manifests,
    parse_topology,
)

__all__ = [
    "REQUIRED",
    "KWOK_ANNOTATION",
    "KWOK_NODE_SELECTOR",
    "LABEL_BLOCK",
    "LABEL_GPU_CLIQUE",
    "LABEL_RACK",
    "LABEL_SUBBLOCK",
    "SIM_EXIT_CODE_ANNOTATION",
    "SIM_EXIT_DELAY_ANNOTATION",
    "ClusterError",
    "LocalCluster",
    "Topology",
    "TopologyError",
    "api_client",
    "create_nodes",
    "default_bin_dir",
    "finish_pod",
    "load_topology",
    "missing_binaries",
    "node_manifests",
    "parse_topology",
    "wait_nodes_ready",
]
