"""Where the control-plane binaries built by ``hack/cluster/build.sh`` live."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kwokctl",
    "kubectl",
)
OPTIONAL = ("helm",)


HACK_CLUSTER = Path(__file__).resolve().parent.parent  # hack/cluster: build.sh, topologies/


def cache_root() -> Path:
    return Path(os.environ.get("PHALANX_CACHE") or Path.home() / ".cache" / "phalanx")


def default_bin_dir() -> Path:
    """PHALANX_BIN_DIR, else the cache dir build.sh uses for this checkout's pins.

    build.sh owns the cache key (k8s version + a hash of its pins); asking it keeps one home."""
    env = os.environ.get("PHALANX_BIN_DIR")
    if env:
        return Path(env)
    out = subprocess.run(["bash", str(HACK_CLUSTER / "build.sh"), "--print-dir"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PHALANX_CACHE": str(cache_root())})
    return Path(out.stdout.strip())


def missing_binaries(bin_dir: Path | None = None) -> list[str]:
    d = bin_dir or default_bin_dir()
    return [b for b in REQUIRED if not os.access(d / b, os.X_OK)]


def build_binaries() -> None:
    """hack/cluster/build.sh: builds what is missing, or waits for a build of them already under
    way (`make test` builds them in the background, hack/test.sh); raises with its log tail."""
    out = subprocess.run(["bash", str(HACK_CLUSTER / "build.sh")], capture_output=True, text=True,
                         env={**os.environ, "PHALANX_CACHE": str(cache_root())})
    if out.returncode != 0:
        raise RuntimeError(f"hack/cluster/build.sh failed ({out.returncode}):\n{out.stderr[-4000:]}")
