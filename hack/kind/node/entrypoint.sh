#!/bin/bash
# Node entrypoint of the offline image: kind's own entrypoint, after making the cgroup
# hierarchies writable and containerd's OOM score requests feasible. A --privileged container gets them read-write; one started through
# hack/kind/shim/docker (engine refuses --privileged) gets them read-only, but it holds
# CAP_SYS_ADMIN, so it remounts them. A no-op when they are writable already.
for m in $(findmnt -rn -o TARGET -R /sys/fs/cgroup); do
  if findmnt -rn -o OPTIONS "$m" | grep -q '^ro,'; then
    mount -o remount,bind,rw "$m" || echo "WARN: could not remount $m read-write" >&2
  fi
done
# Without CAP_SYS_RESOURCE (not in this container's bounding set) no process here may
# lower an oom_score_adj, which runc does for every pod sandbox (-998): let containerd
# clamp the value to its own, as kind's entrypoint does for rootless nodes.
capbnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
if (( (0x$capbnd >> 24 & 1) == 0 )); then
  echo "INFO: no CAP_SYS_RESOURCE: enabling containerd restrict_oom_score_adj" >&2
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
fi
exec /usr/local/bin/entrypoint "$@"
