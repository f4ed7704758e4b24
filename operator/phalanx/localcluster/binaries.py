"""Where the control-plane binaries built by ``hack/cluster/build.sh`` live."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
)
OPTIONAL = ("helm",)


def cache_root() -> Path:
    return Path(os.environ.get("PHALANX_CACHE") or Path.home() / ".cache" / "phalanx")


def hack_cluster_dir() -> Path | None:
    """``hack/cluster`` of the checkout this module lives in, if any."""
    for parent in Path(__file__).resolve().parents:
        cand = parent / "hack" / "cluster"
        if (cand / "go.mod").is_file():
            return cand
    return None


def cache_key(hack_dir: Path) -> str:
    """Same key as build.sh: ``<k8s version>-<sha256(go.mod + go.sum + build.sh)[:10]>``."""
    gomod = (hack_dir / "go.mod").read_bytes()
    gosum = (hack_dir / "go.sum").read_bytes() + (hack_dir / "build.sh").read_bytes()
    m = re.search(rb"^\s*k8s\.io/kubernetes\s+(v\S+)", gomod, re.M)
    version = m.group(1).decode() if m else "unknown"
    return f"{version}-{hashlib.sha256(gomod + gosum).hexdigest()[:10]}"


def default_bin_dir() -> Path:
    """PHALANX_BIN_DIR, else the cache dir for this checkout's pins, else the newest cached."""
    env = os.environ.get("PHALANX_BIN_DIR")
    if env:
        return Path(env)
    root = cache_root() / "bin"
    hack = hack_cluster_dir()
    if hack is not None:
        return root / cache_key(hack)
    cands = sorted(
        (p for p in root.glob("*") if (p / "kube-apiserver").exists()),
        key=lambda p: p.stat().st_mtime,
    )
    return cands[-1] if cands else root / "unknown"


def missing_binaries(bin_dir: Path | None = None) -> list[str]:
    d = bin_dir or default_bin_dir()
    return [b for b in REQUIRED if not os.access(d / b, os.X_OK)]
