# Pinned versions of the kind route (sourced through hack/kind/lib.sh). Phalanx's own version is
# pyproject.toml's (lib.sh reads it); Kubernetes' is hack/cluster/go.mod's.
_versions_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$_versions_root/hack/cluster/go.mod")"
STOCK_NODE_IMAGE="kindest/node:$K8S_VERSION"   # the route for a Docker that can pull
# Tools follow kind's base image; images follow kubeadm's defaults for the Kubernetes
# version in hack/cluster/go.mod.
KIND_VERSION=v0.33.0
CONTAINERD_VERSION=v2.3.4
CRICTL_VERSION=v1.37.0          # kind uses v1.36.0, not served by the proxy
CNI_PLUGINS_VERSION=v1.9.1
COREDNS_VERSION=v1.14.3         # kubeadm defaults to v1.14.2, not served: set via imageTag
PAUSE_VERSION=3.10.2            # kubeadm's PauseVersion; containerd's sandbox image is set to it
ETCD_IMAGE_TAG=3.6.8-0          # kubeadm's DefaultEtcdVersion; the binary is hack/cluster's etcd v3.6.8
# Debian packages of the two debootstrapped bases (kind-base: kind's base-image list).
KIND_BASE_PACKAGES="systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,e2fsprogs,bash,ca-certificates,curl,jq,procps,runc"
PYTHON_BASE_PACKAGES="python3,python3-venv,ca-certificates,procps"
