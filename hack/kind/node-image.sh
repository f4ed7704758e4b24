#!/usr/bin/env bash
# Build a kind node image with no container registry (what `kind build node-image`
# does, offline):
#   base      Debian rootfs by debootstrap + kind's base-image files (from the kind module)
#   binaries  containerd/ctr/shim, crictl, CNI plugins (hack/kind/tools.sh);
#             kubelet, kubeadm, kubectl (hack/cluster/build.sh)
#   images    every image kubeadm and kind need, built locally with the tags they
#             expect and preloaded into the node's containerd:
#             kube-apiserver/controller-manager/scheduler/proxy, etcd, CoreDNS, pause,
#             and the node tools image that runs the pod network (node/cni.sh)
#
#   hack/kind/node-image.sh      # prints the node image tag (cached: a rerun takes seconds)
#
# Cache: phalanx.local/kind-node:<k8s version>-<key>, the key hashing its inputs' own cache names
# (hack/cluster/build.sh's dir, hack/kind/tools.sh's dir, the kind-base tag), the pins it uses,
# the files of hack/kind/node/ and this script's code (not its comments).
set -euo pipefail
LOG_PREFIX="[node-image]"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/lib.sh"

K8S_BIN="$("$ROOT/hack/cluster/build.sh")"
TOOLS="$("$HERE/tools.sh")"
BASE="$("$HERE/rootfs.sh" kind-base "$KIND_BASE_PACKAGES")"
KEY="$( (echo "$K8S_BIN $TOOLS $BASE"; echo "$K8S_VERSION $KIND_VERSION $COREDNS_VERSION $PAUSE_VERSION $ETCD_IMAGE_TAG"
         cat "$HERE"/node/*; code_of "${BASH_SOURCE[0]}") | key_of 12)"
NODE_IMAGE="phalanx.local/kind-node:$K8S_VERSION-$KEY"
NODE_TOOLS_IMAGE="phalanx.local/kind-node-tools:$K8S_VERSION-$KEY"

build_lock "node-image"
if docker image inspect "$NODE_IMAGE" >/dev/null 2>&1; then
  log "have $NODE_IMAGE"; echo "$NODE_IMAGE"; exit 0
fi
start=$SECONDS
KIND_SRC="$(go_mod_dir "sigs.k8s.io/kind@$KIND_VERSION")"
work="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-node.XXXXXX")"
build_id=""
cleanup() { [[ -n "$build_id" ]] && docker rm -f "$build_id" >/dev/null 2>&1; rm -rf "$work"; }
trap cleanup EXIT

# A one-binary image (no shell, like the upstream distroless ones) from a tar stream.
binary_image() { # tag src dest
  local dir="$work/img-$RANDOM"
  mkdir -p "$dir/$(dirname "$3")" "$dir/tmp" "$dir/etc"
  install -m 0755 "$2" "$dir/$3"
  echo "root:x:0:0:root:/:/sbin/nologin" >"$dir/etc/passwd"
  local old
  old="$(docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true)"
  tar -C "$dir" --owner=0 --group=0 -c . |
    docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' --change "ENTRYPOINT [\"$3\"]" - "$1" >/dev/null
  [[ -n "$old" ]] && docker rmi "$old" >/dev/null 2>&1 || true   # the one it replaces
}

# The classic builder: FROM a local image never contacts a registry (BuildKit may not be installed).
legacy_build() { DOCKER_BUILDKIT=0 docker build -q "$@" 2>&1 >/dev/null | grep -v -e DEPRECATED -e BuildKit -e environment-variable -e '^$' >&2 || true; }

log "component images"
IMAGES=()
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  binary_image "registry.k8s.io/$c:$K8S_VERSION" "$K8S_BIN/$c" "/usr/local/bin/$c"
  IMAGES+=("registry.k8s.io/$c:$K8S_VERSION")
done
binary_image "registry.k8s.io/etcd:$ETCD_IMAGE_TAG" "$K8S_BIN/etcd" /usr/local/bin/etcd
binary_image "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "$TOOLS/coredns" /coredns
K8S_SRC="$(cd "$HERE/../cluster" && GOFLAGS=-mod=mod go list -m -json k8s.io/kubernetes | jq -r .Dir)"
gcc -Os -Wall -static -DVERSION="v$PAUSE_VERSION" -o "$work/pause" "$K8S_SRC/build/pause/linux/pause.c"
binary_image "registry.k8s.io/pause:$PAUSE_VERSION" "$work/pause" /pause
IMAGES+=("registry.k8s.io/etcd:$ETCD_IMAGE_TAG" "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "registry.k8s.io/pause:$PAUSE_VERSION")

# kube-proxy needs iptables/conntrack; the pod network needs ip, curl, jq: one Debian-based image.
mkdir -p "$work/tools"
cp "$K8S_BIN/kube-proxy" "$HERE/node/cni.sh" "$work/tools/"
cat >"$work/tools/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY kube-proxy /usr/local/bin/kube-proxy
COPY cni.sh /usr/local/bin/phalanx-kind-cni
RUN chmod 0755 /usr/local/bin/kube-proxy /usr/local/bin/phalanx-kind-cni
DOCKERFILE
legacy_build -t "$NODE_TOOLS_IMAGE" "$work/tools"
docker tag "$NODE_TOOLS_IMAGE" "registry.k8s.io/kube-proxy:$K8S_VERSION"
IMAGES+=("registry.k8s.io/kube-proxy:$K8S_VERSION" "$NODE_TOOLS_IMAGE")

log "node root filesystem"
ctx="$work/node"
mkdir -p "$ctx/bin" "$ctx/cni" "$ctx/kube"
cp -r "$KIND_SRC/images/base/files" "$ctx/files"
chmod -R u+w "$ctx/files"
cp "$TOOLS"/{containerd,ctr,containerd-shim-runc-v2,crictl} "$ctx/bin/"
cp "$TOOLS"/{ptp,loopback,host-local,portmap} "$ctx/cni/"
cp "$K8S_BIN"/{kubelet,kubeadm,kubectl} "$ctx/kube/"
sed "s|@NODE_TOOLS_IMAGE@|$NODE_TOOLS_IMAGE|" "$HERE/node/default-cni.yaml" >"$ctx/default-cni.yaml"
cp "$HERE/node/default-storage.yaml" "$ctx/"
cp "$HERE/node/entrypoint.sh" "$ctx/bin/phalanx-node-entrypoint"
# The steps of kind's images/base/Dockerfile and `kind build node-image`, minus downloads.
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $BASE
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY bin/ /usr/local/bin/
COPY cni/ /opt/cni/bin/
COPY kube/ /usr/bin/
COPY default-cni.yaml default-storage.yaml /kind/manifests/
RUN chmod 0755 /usr/local/bin/* /kind /kind/bin /kind/bin/* /opt/cni/bin/* /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl \\
 && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \\
 && ln -sf /usr/lib/systemd/systemd /sbin/init \\
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service \\
 && mkdir -p /etc/kubernetes/manifests \\
 && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \\
 && sed -i 's|registry.k8s.io/pause:[0-9.]*|registry.k8s.io/pause:$PAUSE_VERSION|' /etc/containerd/config.toml \\
 && echo "$K8S_VERSION" > /kind/version
ENV container=docker
STOPSIGNAL SIGRTMIN+3
DOCKERFILE
legacy_build -t "$NODE_IMAGE.stage" "$ctx"

log "preloading ${#IMAGES[@]} images into the node's containerd"
build_id="phalanx-node-build-$$"
docker run -d --name "$build_id" --entrypoint=sleep --security-opt seccomp=unconfined "$NODE_IMAGE.stage" infinity >/dev/null
docker exec -d "$build_id" containerd
for _ in $(seq 1 60); do docker exec "$build_id" ctr version >/dev/null 2>&1 && break; sleep 0.5; done
docker save "${IMAGES[@]}" |
  docker exec -i "$build_id" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
    --all-platforms --no-unpack --digests - >/dev/null
docker exec "$build_id" ctr --namespace=k8s.io images list -q | grep -v -e '^sha256:' -e '^import-' | sed 's/^/  /' >&2
docker exec "$build_id" pkill containerd || true
sleep 1
docker commit \
  --change 'ENTRYPOINT [ "/usr/local/bin/phalanx-node-entrypoint", "/sbin/init" ]' \
  "$build_id" "$NODE_IMAGE" >/dev/null
docker rm -f "$build_id" >/dev/null; build_id=""
docker rmi "$NODE_IMAGE.stage" >/dev/null
# Older node images of this script (kept while a cluster still runs on them).
docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^phalanx\.local/kind-node(-tools)?:' |
  grep -v -e "^$NODE_IMAGE\$" -e "^$NODE_TOOLS_IMAGE\$" | xargs -r docker rmi >/dev/null 2>&1 || true
log "built $NODE_IMAGE in $((SECONDS - start))s"
echo "$NODE_IMAGE"
