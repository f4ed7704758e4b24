#!/usr/bin/env bash
# Build a Debian root filesystem with debootstrap (no container registry) and
# import it into Docker as an image. Cached: the tag carries a key hashing the
# suite, the package list and this script's code (not its comments), so a rerun
# returns at once.
#
#   hack/kind/rootfs.sh NAME "pkg1,pkg2,..."   # prints the image tag
#
# Env: PHALANX_DEBIAN_MIRROR (default http://deb.debian.org/debian),
#      PHALANX_DEBIAN_SUITE (default bookworm).
set -euo pipefail
LOG_PREFIX="[rootfs]"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
name="$1"; packages="$2"
suite="${PHALANX_DEBIAN_SUITE:-bookworm}"
mirror="${PHALANX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
key="$( (printf '%s\n' "$suite" "$packages"; code_of "${BASH_SOURCE[0]}") | key_of 12)"
tag="phalanx.local/${name}:${suite}-${key}"

build_lock "rootfs-$name"
if docker image inspect "$tag" >/dev/null 2>&1; then
  log "have $tag"; echo "$tag"; exit 0
fi
command -v debootstrap >/dev/null || { log "debootstrap missing: apt-get install debootstrap"; exit 1; }

root="$(mktemp -d "${TMPDIR:-/tmp}/phalanx-rootfs.XXXXXX")"
cleanup() { umount -R "$root/proc" 2>/dev/null || true; rm -rf "$root"; }
trap cleanup EXIT
start=$SECONDS
log "debootstrap $suite ($packages)"
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; exit 1; }
rm -f "$root.log"
# Slim: no apt lists, docs or caches inside the image.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
tar -C "$root" --numeric-owner -c . | docker import - "$tag" >/dev/null
log "built $tag in $((SECONDS - start))s"
echo "$tag"
