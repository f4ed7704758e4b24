"""Node objects shaped as the clouds and NVIDIA's GPU Operator ship their GPU nodes: their
documented labels, taints and allocatable, names as the provider makes them (in no topology
order). Pure and deterministic; ``kwok=True`` adds the annotation that lets kwok run them.

Sources:
- GKE: GPU node pools are tainted ``nvidia.com/gpu=present:NoSchedule`` and labelled
  ``cloud.google.com/gke-accelerator`` (cloud.google.com/kubernetes-engine/docs/how-to/gpus);
  compact placement publishes ``cloud.google.com/gce-topology-block / -subblock / -host``
  (cloud.google.com/kubernetes-engine/docs/how-to/gpu-topology; Kueue's TAS docs use them as
  levels). a3-highgpu-8g: 208 vCPU, 1872 GB, 8 × H100 80GB.
- EKS: EC2 instance topology labels ``topology.k8s.aws/network-node-layer-1..3`` (layer-1 the
  farthest from the instance; docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology.html,
  set by the EKS node agent); GPU node groups are commonly tainted ``nvidia.com/gpu:NoSchedule``
  (EKS best practices, Karpenter GPU NodePools). p5.48xlarge: 192 vCPU, 2 TiB, 8 × H100,
  32 EFA interfaces (``vpc.amazonaws.com/efa``).
- AKS: GPU pools are tainted ``sku=gpu:NoSchedule`` (learn.microsoft.com/azure/aks/gpu-cluster);
  AKS publishes no network topology labels. Standard_ND96isr_H100_v5: 96 vCPU, 1900 GiB, 8 × H100.
- GPU Operator with GPU Feature Discovery: ``nvidia.com/gpu.product / .count / .memory /
  .present`` and, on NVLink-switched systems (GB200 NVL72), ``nvidia.com/gpu.clique`` =
  ``<cluster UUID>.<clique id>``; a GB200 compute tray has 4 GPUs, a rack 18 trays. The GPU
  Operator sets no taint by default; clusters that keep CPU pods off GPU nodes add
  ``nvidia.com/gpu=present:NoSchedule``, as here.
"""

from __future__ import annotations

import hashlib
from typing import Any

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
HOSTNAME = "kubernetes.io/hostname"


def _hex(seed: str, n: int) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()[:n]


def _node(name: str, labels: dict[str, str], taints: list[dict[str, str]], allocatable: dict[str, str],
          capacity: dict[str, str], kwok: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {HOSTNAME: name, "kubernetes.io/os": "linux",
                                                     "kubernetes.io/arch": labels.pop("_arch", "amd64"), **labels}}
    if kwok:
        meta["annotations"] = dict(KWOK_ANNOTATION)
    return {
        "apiVersion": "v1", "kind": "Node", "metadata": meta,
        "spec": {"taints": taints},
        "status": {
            "capacity": capacity, "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            # a v1.36 kubelet declares the features it runs (KEP-5328); in-place restarts need this one
            "declaredFeatures": ["RestartAllContainersOnContainerExits"],
            "nodeInfo": {"kubeletVersion": "v1.36.3", "kubeProxyVersion": "", "architecture": meta["labels"]["kubernetes.io/arch"],
                         "operatingSystem": "linux", "osImage": "Ubuntu 24.04 LTS", "kernelVersion": "6.8.0",
                         "containerRuntimeVersion": "containerd://2.1.4", "bootID": _hex(f"boot-{name}", 32),
                         "machineID": _hex(f"machine-{name}", 32), "systemUUID": _hex(f"uuid-{name}", 32)},
        },
    }


GPU_TAINT_PRESENT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def gke_a3_nodes(blocks: int = 2, subblocks_per_block: int = 2, hosts_per_subblock: int = 4,
                 prefix: str = "gke-train-a3-pool", kwok: bool = False) -> list[dict[str, Any]]:
    """GKE a3-highgpu-8g nodes in ``blocks`` × ``subblocks_per_block`` × ``hosts_per_subblock``
    (compact placement), tainted nvidia.com/gpu=present:NoSchedule."""
    out = []
    group = _hex(prefix, 8)
    for b in range(blocks):
        for s in range(subblocks_per_block):
            for h in range(hosts_per_subblock):
                seed = f"{prefix}-{b}-{s}-{h}"
                name = f"{prefix}-{group}-{_hex(seed, 4)}"
                labels = {
                    "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                    "cloud.google.com/gke-nodepool": "a3-pool", "cloud.google.com/machine-family": "a3",
                    "cloud.google.com/gke-gpu": "true",
                    "node.kubernetes.io/instance-type": "a3-highgpu-8g",
                    "topology.kubernetes.io/region": "us-central1", "topology.kubernetes.io/zone": "us-central1-a",
                    "cloud.google.com/gce-topology-block": _hex(f"block-{b}", 32),
                    "cloud.google.com/gce-topology-subblock": _hex(f"sub-{b}-{s}", 32),
                    "cloud.google.com/gce-topology-host": _hex(f"host-{seed}", 32),
                }
                out.append(_node(name, labels, [dict(GPU_TAINT_PRESENT)],
                                 {"cpu": "205890m", "memory": "1820045Mi", "nvidia.com/gpu": "8", "pods": "110",
                                  "ephemeral-storage": "400Gi"},
                                 {"cpu": "208", "memory": "1872Gi", "nvidia.com/gpu": "8", "pods": "110",
                                  "ephemeral-storage": "450Gi"}, kwok))
    return out


def eks_p5_nodes(layer1: int = 1, layer2_per_l1: int = 2, layer3_per_l2: int = 2, hosts_per_l3: int = 4,
                 kwok: bool = False) -> list[dict[str, Any]]:
    """EKS p5.48xlarge nodes under ``layer1`` × ``layer2_per_l1`` × ``layer3_per_l2`` network
    nodes, ``hosts_per_l3`` each, tainted nvidia.com/gpu:NoSchedule."""
    out = []
    for a in range(layer1):
        for b in range(layer2_per_l1):
            for c in range(layer3_per_l2):
                for h in range(hosts_per_l3):
                    seed = f"p5-{a}-{b}-{c}-{h}"
                    octets = [int(_hex(seed, 2), 16), int(_hex(seed + "x", 2), 16)]
                    name = f"ip-10-0-{octets[0]}-{octets[1]}.ec2.internal"
                    labels = {
                        "node.kubernetes.io/instance-type": "p5.48xlarge",
                        "eks.amazonaws.com/nodegroup": "p5-training", "eks.amazonaws.com/capacityType": "ON_DEMAND",
                        "k8s.amazonaws.com/accelerator": "nvidia-h100",
                        "topology.kubernetes.io/region": "us-east-2", "topology.kubernetes.io/zone": "us-east-2b",
                        "topology.k8s.aws/network-node-layer-1": f"nn-{_hex(f'l1-{a}', 17)}",
                        "topology.k8s.aws/network-node-layer-2": f"nn-{_hex(f'l2-{a}-{b}', 17)}",
                        "topology.k8s.aws/network-node-layer-3": f"nn-{_hex(f'l3-{a}-{b}-{c}', 17)}",
                    }
                    out.append(_node(name, labels, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                                     {"cpu": "191450m", "memory": "2002000Mi", "nvidia.com/gpu": "8",
                                      "vpc.amazonaws.com/efa": "32", "pods": "110"},
                                     {"cpu": "192", "memory": "2048Gi", "nvidia.com/gpu": "8",
                                      "vpc.amazonaws.com/efa": "32", "pods": "110"}, kwok))
    return out


def aks_nd_nodes(count: int = 4, pool: str = "gpunp", kwok: bool = False) -> list[dict[str, Any]]:
    """AKS Standard_ND96isr_H100_v5 nodes of one VMSS pool, tainted sku=gpu:NoSchedule, no
    topology labels."""
    vmss = str(int(_hex(pool, 8), 16))[:8]
    out = []
    for i in range(count):
        name = f"aks-{pool}-{vmss}-vmss{i:06x}"
        labels = {"kubernetes.azure.com/agentpool": pool, "agentpool": pool,
                  "kubernetes.azure.com/accelerator": "nvidia",
                  "node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5",
                  "topology.kubernetes.io/region": "eastus", "topology.kubernetes.io/zone": "0"}
        out.append(_node(name, labels, [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
                         {"cpu": "95690m", "memory": "1850000Mi", "nvidia.com/gpu": "8", "pods": "110"},
                         {"cpu": "96", "memory": "1900Gi", "nvidia.com/gpu": "8", "pods": "110"}, kwok))
    return out


def gb200_nodes(racks: int = 2, trays_per_rack: int = 18, cluster_uuid: str = "b7e2f0a4-5c1d-4e8f-9a3b-2d6c1e0f8a71",
                kwok: bool = False) -> list[dict[str, Any]]:
    """On-prem GB200 NVL72 compute trays (4 GPUs each) under the GPU Operator: one NVLink clique
    per rack (GFD's nvidia.com/gpu.clique), no other topology label, tainted
    nvidia.com/gpu=present:NoSchedule."""
    out = []
    for r in range(racks):
        for t in range(trays_per_rack):
            name = f"gb200-{_hex(f'tray-{r}-{t}', 6)}"
            labels = {
                "_arch": "arm64",
                "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GB200",
                "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "189471",
                "nvidia.com/gpu.clique": f"{cluster_uuid}.{32766 - r}",
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "nvidia.com/gpu.deploy.driver": "true",
            }
            out.append(_node(name, labels, [dict(GPU_TAINT_PRESENT)],
                             {"cpu": "142", "memory": "850Gi", "nvidia.com/gpu": "4", "pods": "110"},
                             {"cpu": "144", "memory": "880Gi", "nvidia.com/gpu": "4", "pods": "110"}, kwok))
    return out


def kueue_topology(name: str, levels: list[str]) -> dict[str, Any]:
    """A Kueue Topology object (kueue.x-k8s.io/v1beta1) with ``levels`` as its node labels."""
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in levels]}}


def node_list(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """``kubectl get nodes -o yaml``'s shape."""
    return {"apiVersion": "v1", "kind": "List", "items": nodes, "metadata": {"resourceVersion": ""}}
