"""Node objects shaped as the clouds and NVIDIA's GPU Operator ship their GPU nodes.

Each builder returns Node dicts exactly as the API server returns them (camelCase, ``apiVersion:
v1``, ``kind: Node``) carrying the labels, taints and allocatable the provider documents (plus a
few that real nodes of the provider carry though no page found here lists them: the AKS
``kubernetes.azure.com/*`` extras, ``eks.amazonaws.com/nodegroup-image``), named as the provider
names its nodes, so that ``sorted(names)`` says nothing about the topology.
Pure and deterministic (every name and opaque id is a hash of the layout), no cluster access.
``kwok=True`` adds the annotation kwok fakes a node for (hack/cluster/localcluster/topology.py
``KWOK_ANNOTATION``) and leaves out the metadata the API server sets (uid, resourceVersion,
creationTimestamp), so the integration tests can create them on a kwok cluster.

Lists come back in name order, as ``kubectl get nodes`` lists them; ``node_list`` wraps them as
``kubectl get nodes -o yaml`` does.

What is documented and where (a comment at each builder gives the detail):

- GKE: docs.cloud.google.com/kubernetes-engine/docs/how-to/gpus (``cloud.google.com/gke-accelerator``,
  the ``nvidia.com/gpu=present:NoSchedule`` taint), docs.cloud.google.com/ai-hypercomputer/docs/
  workloads/schedule-gke-workloads-tas (``cloud.google.com/gce-topology-block/-subblock/-host``, the
  Kueue Topology levels), cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes
  (allocatable).
- EKS: docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html and kubernetes/
  cloud-provider-aws pkg/providers/v1/instances_v2.go (``topology.k8s.aws/network-node-layer-N``),
  docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology-prerequisites.html (p5.48xlarge:
  3 layers), aws/karpenter-provider-aws website/content/en/docs/reference/instance-types.md
  (p5.48xlarge allocatable) and .../concepts/nodepools.md (the GPU taint).
- AKS: learn.microsoft.com/azure/aks/use-node-taints (``sku=gpu:NoSchedule``),
  learn.microsoft.com/azure/aks/node-resource-reservations (allocatable), MicrosoftDocs/azure-docs
  articles/virtual-machines/sizes/gpu-accelerated/includes/nd-h100-v5-series-*.md (the VM).
- GPU Operator / GPU Feature Discovery: NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md
  (``nvidia.com/gpu.*`` labels, ``gpu.clique`` = ``<ClusterUUID>.<CliqueID>``), NVIDIA/gpu-operator
  controllers/nodelabeling_controller.go (``nvidia.com/gpu.present``; no taint anywhere).
- Kueue v0.17: kubernetes-sigs/kueue@v0.17.8 apis/kueue/v1beta2/topology_types.go and
  site/content/en/docs/concepts/topology.md (Topology is ``kueue.x-k8s.io/v1beta2``; v1beta1 is
  still served but deprecated: config/components/crd/bases/kueue.x-k8s.io_topologies.yaml).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from localcluster.topology import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from phalanx.constants import FEATURE_RESTART_ALL_CONTAINERS

KUBELET_VERSION = "v1.36.3"
# What a v1.36 kubelet declares in status.declaredFeatures by default: container restart rules'
# RestartAllContainers action is beta, on by default, in 1.36 (KEP-5532,
# kubernetes.dev/resources/keps/5532: alpha v1.35, beta v1.36); the scheduler places a pod that
# uses it only on a node declaring it.
DECLARED_FEATURES = (FEATURE_RESTART_ALL_CONTAINERS,)
CREATED = "2026-01-05T08:00:00Z"  # every timestamp: fixed, so the output is deterministic
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GIB_KI = 1024 * 1024  # KiB in a GiB
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp")  # metadata the API server fills in

# Kueue Topology levels, coarsest first (hostname last, as Kueue requires).
# GKE's own list: the TAS guide's "gke-default" Topology (schedule-gke-workloads-tas, above).
GKE_KUEUE_LEVELS = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
                    "cloud.google.com/gce-topology-host", HOSTNAME)
# Neither Kueue's docs nor the EKS guide found here give an AWS Topology object: this is the EC2
# layers in the order the EKS guide describes them (layer-1 broadest, layer-3 "the most
# selective" on 3-layer types such as p5.48xlarge), hostname last.
AWS_KUEUE_LEVELS = ("topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
                    "topology.k8s.aws/network-node-layer-3", HOSTNAME)
# No published list either: GFD's clique label (one NVLink domain), hostname last.
NVLINK_KUEUE_LEVELS = ("nvidia.com/gpu.clique", HOSTNAME)


# ---------------------------------------------------------------------------------------------
# Deterministic ids


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()


def _hex(n: int, *parts: object) -> str:
    return _digest(*parts).hex()[:n]


def _base36(n: int, *parts: object) -> str:
    value = int.from_bytes(_digest(*parts), "big")
    out = ""
    for _ in range(n):
        value, rem = divmod(value, 36)
        out += "0123456789abcdefghijklmnopqrstuvwxyz"[rem]
    return out


def _uuid(*parts: object) -> str:
    return str(uuid.UUID(bytes=_digest(*parts)[:16], version=4))


def _unique(make, taken: set[str]) -> str:
    """``make(attempt)`` for the first attempt whose value is not taken (hash collisions)."""
    attempt = 0
    while (value := make(attempt)) in taken:
        attempt += 1
    taken.add(value)
    return value


# ---------------------------------------------------------------------------------------------
# The Node object


def _node(name: str, labels: Mapping[str, str], *, taints: Sequence[Mapping[str, str]],
          capacity: Mapping[str, str], allocatable: Mapping[str, str], addresses: Sequence[tuple[str, str]],
          os_image: str, kernel: str, runtime: str, arch: str = "amd64", provider_id: str | None = None,
          kwok: bool = False, extra_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": _uuid("uid", name),
        "resourceVersion": str(int.from_bytes(_digest("rv", name)[:3], "big")),
        "creationTimestamp": CREATED,
        # What the kubelet itself sets, then the provider's labels.
        "labels": {"beta.kubernetes.io/arch": arch, "beta.kubernetes.io/os": "linux",
                   "kubernetes.io/arch": arch, "kubernetes.io/os": "linux", HOSTNAME: name,
                   **labels, **(extra_labels or {})},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                        "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
    }
    if kwok:
        # For creating on a kwok cluster: the annotation its stages select fake nodes by, and none
        # of the fields the API server sets itself (it refuses a resourceVersion on create).
        meta["annotations"][KWOK_ANNOTATION] = KWOK_ANNOTATION_VALUE
        for server_set in SERVER_SET:
            del meta[server_set]
    spec: dict[str, Any] = {}
    if provider_id:
        spec["providerID"] = provider_id
    if taints:
        spec["taints"] = [dict(t) for t in taints]

    def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {"type": kind, "status": status, "lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED,
                "reason": reason, "message": message}

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(allocatable),
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": kind, "address": address} for kind, address in addresses],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "declaredFeatures": list(DECLARED_FEATURES),
            "nodeInfo": {
                "machineID": _hex(32, "machine", name),
                "systemUUID": _uuid("system", name),
                "bootID": _uuid("boot", name),
                "kernelVersion": kernel,
                "osImage": os_image,
                "containerRuntimeVersion": runtime,
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch,
            },
        },
    }


def _by_name(nodes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """In name order, as the API server lists them."""
    return sorted(nodes, key=lambda n: n["metadata"]["name"])


def _ki(kib: int) -> str:
    return f"{kib}Ki"


# ---------------------------------------------------------------------------------------------
# GKE A3


# a3-highgpu-8g and a3-megagpu-8g: 208 vCPUs, 1,872 GB of memory, 8 x H100 80GB
# (cloud.google.com/compute/docs/accelerator-optimized-machines, "The A3 machine series").
# Accelerator types nvidia-h100-80gb (A3 High) and nvidia-h100-mega-80gb (A3 Mega)
# (docs.cloud.google.com/kubernetes-engine/docs/how-to/gpus).
GKE_A3_MACHINES = {"a3-highgpu-8g": "nvidia-h100-80gb", "a3-megagpu-8g": "nvidia-h100-mega-80gb"}
A3_VCPUS = 208
A3_MEMORY_GIB = 1872


def gke_reserved_cpu_millis(cores: int) -> int:
    """GKE's kube-reserved CPU: 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25%
    of the rest (cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes
    #memory_and_cpu_reservations)."""
    millis = cores * 1000
    bands = ((1000, 0.06), (1000, 0.01), (2000, 0.005), (float("inf"), 0.0025))
    reserved, left = 0.0, millis
    for width, share in bands:
        part = min(left, width)
        reserved += part * share
        left -= part
    return round(reserved)


def gke_reserved_memory_kib(memory_kib: int) -> int:
    """GKE's memory reservation: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8,
    6% of the next 112, 2% above 128 GiB, plus 100 MiB for the eviction threshold (same page)."""
    bands = ((4 * GIB_KI, 0.25), (4 * GIB_KI, 0.20), (8 * GIB_KI, 0.10), (112 * GIB_KI, 0.06),
             (float("inf"), 0.02))
    reserved, left = 0.0, memory_kib
    for width, share in bands:
        part = min(left, width)
        reserved += part * share
        left -= part
    return round(reserved) + 100 * 1024


def gke_a3_nodes(blocks: int = 2, subblocks_per_block: int = 2, hosts_per_subblock: int = 4,
                 prefix: str = "gke-a3-pool", *, machine: str = "a3-megagpu-8g", nodepool: str = "a3-pool",
                 zone: str = "us-central1-a", project: str = "train-project", kwok: bool = False,
                 extra_labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """GKE A3 nodes (8 x H100 each) of one compact-placement node pool: ``blocks`` reserved
    blocks, ``subblocks_per_block`` sub-blocks in each, ``hosts_per_subblock`` VMs in each (an A3
    VM is a whole host, so every node has its own ``gce-topology-host``).

    Names as GKE makes them, ``<prefix>-<8 hex of the zone's instance group>-<4 random>`` with
    ``prefix`` the truncated ``gke-<cluster>-<pool>``; block/sub-block/host values are opaque
    hashes. Tainted ``nvidia.com/gpu=present:NoSchedule`` (GKE adds it itself when the cluster
    has a non-GPU pool; the docs say to set it by hand otherwise)."""
    if machine not in GKE_A3_MACHINES:
        raise ValueError(f"machine {machine!r}: one of {sorted(GKE_A3_MACHINES)}")
    region = zone.rsplit("-", 1)[0]
    group = _hex(8, "instance-group", prefix, zone)
    memory_kib = A3_MEMORY_GIB * GIB_KI
    capacity = {
        "cpu": str(A3_VCPUS),
        # The plan-node-sizes page's own example: a 100 GB boot disk reports this capacity and
        # allocatable ephemeral storage.
        "ephemeral-storage": "98831908Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": _ki(memory_kib),
        GPU: "8",
        "pods": "110",
    }
    allocatable = {
        **capacity,
        "cpu": f"{A3_VCPUS * 1000 - gke_reserved_cpu_millis(A3_VCPUS)}m",
        "ephemeral-storage": "47060071478",
        "memory": _ki(memory_kib - gke_reserved_memory_kib(memory_kib)),
    }
    taken: set[str] = set()
    out = []
    for b in range(blocks):
        for s in range(subblocks_per_block):
            for h in range(hosts_per_subblock):
                where = (prefix, zone, b, s, h)
                name = _unique(lambda i, where=where: f"{prefix}-{group}-{_base36(4, 'vm', *where, i)}", taken)
                labels = {
                    "cloud.google.com/gke-accelerator": GKE_A3_MACHINES[machine],
                    "cloud.google.com/gke-nodepool": nodepool,
                    "cloud.google.com/machine-family": "a3",
                    "node.kubernetes.io/instance-type": machine,
                    "topology.kubernetes.io/region": region,
                    "topology.kubernetes.io/zone": zone,
                    # "organization-specific ID of the reserved block / sub-block", "ID of the host".
                    "cloud.google.com/gce-topology-block": _hex(32, "block", prefix, zone, b),
                    "cloud.google.com/gce-topology-subblock": _hex(32, "subblock", prefix, zone, b, s),
                    "cloud.google.com/gce-topology-host": _hex(32, "host", *where),
                }
                octets = _digest("ip", name)
                out.append(_node(
                    name, labels, taints=[{"key": GPU, "value": "present", "effect": "NoSchedule"}],
                    capacity=capacity, allocatable=allocatable,
                    addresses=[("InternalIP", f"10.128.{octets[0]}.{octets[1] % 254 + 1}"), ("Hostname", name)],
                    os_image="Container-Optimized OS from Google", kernel="6.6.87+",
                    runtime="containerd://2.1.4", provider_id=f"gce://{project}/{zone}/{name}",
                    kwok=kwok, extra_labels=extra_labels))
    return _by_name(out)


# ---------------------------------------------------------------------------------------------
# EKS p5.48xlarge


# Karpenter's reference table for p5.48xlarge (aws/karpenter-provider-aws
# website/content/en/docs/reference/instance-types.md): instance-cpu 192, instance-memory 2097152
# MiB, instance-gpu-count 8 (h100, 81920 MiB), instance-network-bandwidth 3200000 Mbps, and
# resources cpu 191450m, memory 1938410Mi, ephemeral-storage 17Gi, nvidia.com/gpu 8, pods 100,
# vpc.amazonaws.com/efa 32. Those are Karpenter's own allocatable estimates (its VM memory
# overhead and kube-reserved); a managed node group's kubelet computes its own.
P5_CAPACITY = {"cpu": "192", "ephemeral-storage": "20Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
               "memory": "2097152Mi", GPU: "8", "pods": "100", "vpc.amazonaws.com/efa": "32"}
P5_ALLOCATABLE = {**P5_CAPACITY, "cpu": "191450m", "ephemeral-storage": "17Gi", "memory": "1938410Mi"}
# Karpenter's well-known labels for the type (same table).
P5_KARPENTER_LABELS = {
    "karpenter.k8s.aws/instance-category": "p", "karpenter.k8s.aws/instance-family": "p5",
    "karpenter.k8s.aws/instance-generation": "5", "karpenter.k8s.aws/instance-size": "48xlarge",
    "karpenter.k8s.aws/instance-cpu": "192", "karpenter.k8s.aws/instance-cpu-manufacturer": "amd",
    "karpenter.k8s.aws/instance-memory": "2097152", "karpenter.k8s.aws/instance-gpu-count": "8",
    "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia", "karpenter.k8s.aws/instance-gpu-memory": "81920",
    "karpenter.k8s.aws/instance-gpu-name": "h100", "karpenter.k8s.aws/instance-hypervisor": "nitro",
    "karpenter.k8s.aws/instance-local-nvme": "30400", "karpenter.k8s.aws/instance-network-bandwidth": "3200000",
}


def eks_p5_nodes(layer1: int = 1, layer2_per_l1: int = 2, layer3_per_l2: int = 2, hosts_per_l3: int = 4, *,
                 provisioner: str = "nodegroup", nodegroup: str = "p5-training", region: str = "us-east-1",
                 zone: str = "us-east-1a", zone_id: str = "use1-az4", taint_value: str | None = "true",
                 kwok: bool = False, extra_labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """EKS p5.48xlarge nodes (8 x H100, 32 EFA devices each) under EC2 instance topology:
    ``layer1`` layer-1 network nodes, ``layer2_per_l1`` layer-2 nodes under each, ``layer3_per_l2``
    layer-3 nodes under each, ``hosts_per_l3`` instances on each layer-3 node (p5.48xlarge
    reports 3 layers; layer-1 is the farthest from the instance, as cloud-provider-aws numbers
    DescribeInstanceTopology's top-down NetworkNodes).

    ``provisioner``: ``nodegroup`` (an EKS managed node group: ``eks.amazonaws.com/nodegroup``,
    ``eks.amazonaws.com/capacityType``) or ``karpenter`` (``karpenter.sh/nodepool`` and Karpenter's
    instance labels). Names as EC2 gives them, ``ip-10-0-x-y.ec2.internal`` (us-east-1) or
    ``ip-...<region>.compute.internal``. Tainted ``nvidia.com/gpu=<taint_value>:NoSchedule``:
    neither EKS nor the NVIDIA device plugin taints GPU nodes; Karpenter's docs' GPU NodePool
    sets value ``"true"`` (``taint_value=None``: no value)."""
    if provisioner not in ("nodegroup", "karpenter"):
        raise ValueError(f"provisioner {provisioner!r}: nodegroup or karpenter")
    domain = "ec2.internal" if region == "us-east-1" else f"{region}.compute.internal"
    taint = {"key": GPU, "effect": "NoSchedule", **({"value": taint_value} if taint_value else {})}
    taken: set[str] = set()
    out = []
    for a in range(layer1):
        for b in range(layer2_per_l1):
            for c in range(layer3_per_l2):
                for h in range(hosts_per_l3):
                    where = (nodegroup, zone, a, b, c, h)

                    def ip(attempt: int, where=where) -> str:
                        raw = _digest("ip", *where, attempt)
                        return f"10.0.{raw[0]}.{raw[1] % 254 + 1}"

                    address = _unique(ip, taken)
                    name = f"ip-{address.replace('.', '-')}.{domain}"
                    labels = {
                        "node.kubernetes.io/instance-type": "p5.48xlarge",
                        "topology.kubernetes.io/region": region,
                        "topology.kubernetes.io/zone": zone,
                        # cloud-provider-aws (pkg/providers/v1/well_known_labels.go, instances_v2.go).
                        "topology.k8s.aws/zone-id": zone_id,
                        "topology.k8s.aws/network-node-layer-1": f"nn-{_hex(17, 'l1', zone, a)}",
                        "topology.k8s.aws/network-node-layer-2": f"nn-{_hex(17, 'l2', zone, a, b)}",
                        "topology.k8s.aws/network-node-layer-3": f"nn-{_hex(17, 'l3', zone, a, b, c)}",
                    }
                    if provisioner == "nodegroup":
                        labels |= {"eks.amazonaws.com/nodegroup": nodegroup,
                                   "eks.amazonaws.com/capacityType": "ON_DEMAND",
                                   "eks.amazonaws.com/nodegroup-image": f"ami-{_hex(17, 'ami', nodegroup)}"}
                    else:
                        labels |= {"karpenter.sh/nodepool": nodegroup, "karpenter.sh/capacity-type": "on-demand",
                                   "karpenter.sh/initialized": "true", "karpenter.sh/registered": "true",
                                   "karpenter.k8s.aws/ec2nodeclass": nodegroup, **P5_KARPENTER_LABELS}
                    instance = f"i-{_hex(17, 'instance', name)}"
                    out.append(_node(
                        name, labels, taints=[taint], capacity=P5_CAPACITY, allocatable=P5_ALLOCATABLE,
                        addresses=[("InternalIP", address), ("InternalDNS", name), ("Hostname", name)],
                        os_image="Amazon Linux 2023.9.20260105", kernel="6.12.58-82.121.amzn2023.x86_64",
                        runtime="containerd://2.1.4", provider_id=f"aws:///{zone}/{instance}",
                        kwok=kwok, extra_labels=extra_labels))
    return _by_name(out)


# ---------------------------------------------------------------------------------------------
# AKS ND H100 v5


# Standard_ND96isr_H100_v5: 96 vCPUs, 1900 GiB, 8 x H100 80 GiB, 8 NICs; "each GPU ... its own
# dedicated, topology-agnostic 400 Gb/s NVIDIA Quantum-2 CX7 InfiniBand connection", 3.2 Tb/s per
# VM, "automatically configured between VMs occupying the same virtual machine scale set"
# (MicrosoftDocs/azure-docs .../includes/nd-h100-v5-series-specs.md and -summary.md). An AKS
# node pool is one scale set, so the pool is the InfiniBand domain; AKS publishes no topology
# label below it.
ND_H100_VCPUS = 96
ND_H100_MEMORY_GIB = 1900


def aks_reserved_cpu_millis(cores: int) -> int:
    """AKS kube-reserved CPU (learn.microsoft.com/azure/aks/node-resource-reservations): 60, 100,
    140, 180, 260, 420, 740 millicores for 1, 2, 4, 8, 16, 32, 64 cores. The table stops at 64;
    above it this goes on at the table's 10 m per core (an extrapolation, 1060m for 96)."""
    table = {1: 60, 2: 100, 4: 140, 8: 180, 16: 260, 32: 420, 64: 740}
    if cores in table:
        return table[cores]
    below = max((c for c in table if c < cores), default=1)
    return table[below] + 10 * (cores - below)


def aks_reserved_memory_kib(memory_kib: int, max_pods: int) -> int:
    """AKS 1.29+: min(20 MB x max pods + 50 MB, 25% of memory) kube-reserved, plus the
    ``memory.available<100Mi`` eviction threshold (same page; MB taken as MiB)."""
    return min((20 * max_pods + 50) * 1024, memory_kib // 4) + 100 * 1024


def aks_nd_nodes(count: int = 4, pool: str = "gpunp", *, cluster: str = "train", resource_group: str = "ml-rg",
                 region: str = "eastus", max_pods: int = 250, kwok: bool = False,
                 extra_labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """``count`` AKS Standard_ND96isr_H100_v5 nodes (8 x H100 each) of one node pool (one VMSS):
    ``aks-<pool>-<8 digits>-vmss<6 base-36 instance id>``, tainted ``sku=gpu:NoSchedule`` (the
    taint AKS's docs put on GPU pools; AKS adds none itself), and no topology labels: AKS
    publishes none (the zone label is ``"0"``, a non-zonal pool). ``max_pods`` 250 is Azure CNI
    Overlay's default; kubenet's is 110."""
    vmss = str(int.from_bytes(_digest("vmss", cluster, pool)[:8], "big"))[-8:]
    memory_kib = ND_H100_MEMORY_GIB * GIB_KI
    os_disk_kib = 129886128  # a 128 GiB managed OS disk's filesystem
    capacity = {"cpu": str(ND_H100_VCPUS), "ephemeral-storage": _ki(os_disk_kib), "hugepages-1Gi": "0",
                "hugepages-2Mi": "0", "memory": _ki(memory_kib), GPU: "8", "pods": str(max_pods)}
    allocatable = {
        **capacity,
        "cpu": f"{ND_H100_VCPUS * 1000 - aks_reserved_cpu_millis(ND_H100_VCPUS)}m",
        "ephemeral-storage": str(os_disk_kib * 1024 * 9 // 10),  # nodefs.available<10% eviction
        "memory": _ki(memory_kib - aks_reserved_memory_kib(memory_kib, max_pods)),
    }
    node_rg = f"MC_{resource_group}_{cluster}_{region}"
    out = []
    for i in range(count):
        instance = _base36_id(i)
        name = f"aks-{pool}-{vmss}-vmss{instance}"
        labels = {
            "agentpool": pool,
            "accelerator": "nvidia",
            "kubernetes.azure.com/accelerator": "nvidia",
            "kubernetes.azure.com/agentpool": pool,
            "kubernetes.azure.com/cluster": node_rg,
            "kubernetes.azure.com/mode": "user",
            "kubernetes.azure.com/role": "agent",
            "kubernetes.azure.com/nodepool-type": "VirtualMachineScaleSets",
            "kubernetes.azure.com/os-sku": "Ubuntu",
            "kubernetes.azure.com/node-image-version": "AKSUbuntu-2404gen2gpucontainerd-202601.05.0",
            "node.kubernetes.io/instance-type": "Standard_ND96isr_H100_v5",
            "topology.kubernetes.io/region": region,
            "topology.kubernetes.io/zone": "0",
        }
        provider = (f"azure:///subscriptions/{_uuid('subscription', resource_group)}/resourceGroups/{node_rg.lower()}"
                    f"/providers/Microsoft.Compute/virtualMachineScaleSets/aks-{pool}-{vmss}-vmss"
                    f"/virtualMachines/{i}")
        out.append(_node(
            name, labels, taints=[{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
            capacity=capacity, allocatable=allocatable,
            addresses=[("InternalIP", f"10.224.0.{4 + i % 250}"), ("Hostname", name)],
            os_image="Ubuntu 24.04.3 LTS", kernel="6.8.0-1041-azure", runtime="containerd://2.1.4",
            provider_id=provider, kwok=kwok, extra_labels=extra_labels))
    return _by_name(out)


def _base36_id(index: int) -> str:
    """A VMSS instance id as AKS node names spell it: base 36, six digits (``00000a``)."""
    digits = ""
    while True:
        index, rem = divmod(index, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rem] + digits
        if not index:
            return digits.rjust(6, "0")


# ---------------------------------------------------------------------------------------------
# On-prem GB200 NVL72 under the GPU Operator


# A GB200 NVL72 rack: 18 compute trays, each 2 Grace CPUs (72 Arm cores each) and 4 Blackwell
# GPUs, all 72 GPUs one NVLink domain at 1.8 TB/s per GPU (nvidia.com/en-us/data-center/gb200-nvl72;
# read here through setloop.io/blog/gb200-nvl72-architecture and aiwiki.ai, not NVIDIA's page).
# GFD labels (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md): gpu.product is the
# NVML name with spaces dashed, gpu.memory NVML's total in MiB (nvidia-smi prints 189471 MiB for a
# GB200), gpu.clique "GPUFabric ClusterUUID + CliqueID" (example 7b968a6d-...-e1e51be99c31.1): the
# ClusterUUID names the NVLink domain (the rack), the CliqueID the NVLink partition in it.
# nvidia.com/gpu.present is the GPU Operator's own (controllers/nodelabeling_controller.go, from
# NFD's feature.node.kubernetes.io/pci-10de.present). The GPU Operator taints nothing (its
# values.yaml only tolerates nvidia.com/gpu for its operands); clusters that keep CPU pods off GPU
# nodes add nvidia.com/gpu:NoSchedule themselves, which is the default here.
GB200_GPUS_PER_TRAY = 4
GB200_CORES_PER_TRAY = 144
GB200_MEMORY_KIB = 960 * 10**9 // 1024  # 2 x 480 GB LPDDR5X, as sold; the kernel sees somewhat less


def gb200_nodes(racks: int = 2, trays_per_rack: int = 18, *, cliques_per_rack: int = 1, taint_value: str | None = None,
                cluster: str = "dc1", kwok: bool = False,
                extra_labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """On-prem GB200 NVL72 compute trays (4 GPUs each, arm64) labelled by the GPU Operator's GPU
    Feature Discovery: ``racks`` racks of ``trays_per_rack`` trays, each rack one NVLink domain
    (one ``ClusterUUID``) split into ``cliques_per_rack`` NVLink partitions (``CliqueID`` 1, 2, …,
    consecutive trays). No other topology label (the clique is the only one GFD publishes).

    Names ``gb200-<serial>`` (arbitrary, as an on-prem admin's). Allocatable as a plain kubelet
    computes it (no kube-reserved; the 100Mi memory and 10% nodefs eviction thresholds). Tainted
    ``nvidia.com/gpu[=<taint_value>]:NoSchedule``: the GPU Operator adds no taint, this is the one
    commonly configured."""
    if trays_per_rack % cliques_per_rack:
        raise ValueError(f"{trays_per_rack} trays do not split into {cliques_per_rack} cliques")
    per_clique = trays_per_rack // cliques_per_rack
    disk_kib = 1_875_000_000  # a 1.92 TB NVMe boot drive's filesystem, roughly
    capacity = {"cpu": str(GB200_CORES_PER_TRAY), "ephemeral-storage": _ki(disk_kib), "memory": _ki(GB200_MEMORY_KIB),
                GPU: str(GB200_GPUS_PER_TRAY), "pods": "110"}
    allocatable = {**capacity, "ephemeral-storage": str(disk_kib * 1024 * 9 // 10),
                   "memory": _ki(GB200_MEMORY_KIB - 100 * 1024)}
    taint = {"key": GPU, "effect": "NoSchedule", **({"value": taint_value} if taint_value else {})}
    taken: set[str] = set()
    out = []
    for r in range(racks):
        cluster_uuid = _uuid("nvlink-domain", cluster, r)
        for t in range(trays_per_rack):
            name = _unique(lambda i, r=r, t=t: f"gb200-{_base36(8, 'serial', cluster, r, t, i)}", taken)
            labels = {
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
                "feature.node.kubernetes.io/kernel-version.major": "6",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.deploy.driver": "true",
                "nvidia.com/gpu.deploy.container-toolkit": "true",
                "nvidia.com/gpu.deploy.device-plugin": "true",
                "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
                "nvidia.com/gpu.deploy.dcgm-exporter": "true",
                "nvidia.com/gpu.product": "NVIDIA-GB200",
                "nvidia.com/gpu.count": str(GB200_GPUS_PER_TRAY),
                "nvidia.com/gpu.replicas": str(GB200_GPUS_PER_TRAY),
                "nvidia.com/gpu.memory": "189471",
                "nvidia.com/gpu.family": "blackwell",
                "nvidia.com/gpu.compute.major": "10",
                "nvidia.com/gpu.compute.minor": "0",
                "nvidia.com/gpu.mode": "compute",
                "nvidia.com/gpu.clique": f"{cluster_uuid}.{t // per_clique + 1}",
                "nvidia.com/cuda.driver-version.full": "580.95.05",
                "nvidia.com/cuda.runtime-version.full": "13.0",
            }
            octet = _digest("ip", name)[0]
            out.append(_node(
                name, labels, taints=[taint], capacity=capacity, allocatable=allocatable,
                addresses=[("InternalIP", f"10.{20 + r % 200}.{octet}.{t + 10}"), ("Hostname", name)],
                os_image="Ubuntu 24.04.3 LTS", kernel="6.8.0-1036-nvidia-64k", runtime="containerd://2.1.4",
                arch="arm64", kwok=kwok, extra_labels=extra_labels))
    return _by_name(out)


# ---------------------------------------------------------------------------------------------
# Kueue and kubectl shapes


def kueue_topology(name: str, levels: Sequence[str], api_version: str = "kueue.x-k8s.io/v1beta2") -> dict[str, Any]:
    """A Kueue ``Topology`` (cluster-scoped): ``spec.levels[].nodeLabel``, coarsest first.

    Kueue v0.17 serves it as ``kueue.x-k8s.io/v1beta2`` (the storage version) and, deprecated,
    ``v1beta1``; 1 to 16 unique levels, ``kubernetes.io/hostname`` only as the last
    (apis/kueue/v1beta2/topology_types.go). See ``GKE_KUEUE_LEVELS`` / ``AWS_KUEUE_LEVELS``."""
    levels = list(levels)
    if not 1 <= len(levels) <= 16 or len(set(levels)) != len(levels):
        raise ValueError(f"levels {levels}: 1 to 16 unique node labels")
    if HOSTNAME in levels[:-1]:
        raise ValueError(f"{HOSTNAME} can only be the lowest level")
    return {"apiVersion": api_version, "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": label} for label in levels]}}


def node_list(nodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What ``kubectl get nodes -o yaml`` prints: a v1 List of the nodes, in name order."""
    return {"apiVersion": "v1", "kind": "List", "items": _by_name(dict(n) for n in nodes),
            "metadata": {"resourceVersion": ""}}
