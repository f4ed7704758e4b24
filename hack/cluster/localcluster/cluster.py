"""The local control plane, run by kwokctl (``--runtime binary``) from the binaries build.sh made.

kwokctl (sigs.k8s.io/kwok) owns the process management: PKI, kubeconfig, etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and the kwok controller, each on
loopback, detached, with logs under ``<work_dir>/kwokctl/clusters/<name>/logs``. This module
only says what differs from kwokctl's defaults (admission plugins, QPS, pod GC, the kwok
stages and the node selector, feature gates) and keeps the ``LocalCluster`` interface the
tests and benches use. ``<work_dir>/cluster.json`` lets another process ``attach`` or stop it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from phalanx_common.net import free_port  # the one home; re-exported for callers
from phalanx_common.proc import alive, cmdline, kill_pids, start_time

from .binaries import default_bin_dir, missing_binaries
from .topology import KWOK_NODE_SELECTOR

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
STATE_FILE = "cluster.json"
COMPONENT_EXIT_SECONDS = 30.0  # kwokctl delete signals the components; we wait for them to exit
KWOKCTL_CONFIG = "config.kwok.x-k8s.io/v1alpha1"

# What our clusters need beyond kwokctl's defaults, per component.
APISERVER_ARGS = {
    "enable-admission-plugins": "NamespaceLifecycle,ServiceAccount,NodeRestriction,DefaultTolerationSeconds,"
    "Priority,ResourceQuota,LimitRanger,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
    "ValidatingAdmissionPolicy",
    "api-audiences": "https://kubernetes.default.svc.cluster.local",
    "service-cluster-ip-range": SERVICE_CIDR,
    "endpoint-reconciler-type": "none",  # nothing real behind kwok nodes' kubelet endpoints
    "profiling": "false",
}
CONTROLLER_MANAGER_ARGS = {
    "controllers": "*",
    "service-cluster-ip-range": SERVICE_CIDR,
    "cluster-cidr": POD_CIDR,
    "allocate-node-cidrs": "false",
    # Quick gc of terminated pods keeps churny suites fast.
    "terminated-pod-gc-threshold": "12500",
    "concurrent-gc-syncs": "20",
    "kube-api-qps": "200",
    "kube-api-burst": "400",
    "leader-elect": "false",
}
SCHEDULER_ARGS = {"kube-api-qps": "200", "kube-api-burst": "400", "leader-elect": "false"}
KWOK_ARGS = {
    "manage-all-nodes": "false",
    "manage-nodes-with-annotation-selector": KWOK_NODE_SELECTOR,
    "node-lease-duration-seconds": "40",
    "cidr": POD_CIDR,
    "node-ip": "10.0.0.1",
}


# Optional feature sets (``LocalCluster(features=[...])``, ``make cluster-up FEATURES=...``):
# alpha feature gates for every component, and API groups/versions the apiserver must serve.
# The default cluster enables none of them.
FEATURES: dict[str, dict[str, Any]] = {
    # Kubernetes Workload API + kube-scheduler gang and topology-aware workload scheduling
    # (KEP-4671, KEP-5732): scheduling.k8s.io/v1alpha2 Workload and PodGroup.
    "workload": {
        "gates": ("GenericWorkload", "GangScheduling", "TopologyAwareWorkloadScheduling"),
        "runtime_config": ("scheduling.k8s.io/v1alpha2=true",),
    },
}


def feature_args(features: Any) -> tuple[list[str], list[str]]:
    """(``--feature-gates=...`` for every component, ``--runtime-config=...`` for the apiserver)."""
    gates: list[str] = []
    runtime: list[str] = []
    for name in features or ():
        if name not in FEATURES:
            raise ClusterError(f"unknown feature set {name!r}; known: {', '.join(sorted(FEATURES))}")
        gates += [g for g in FEATURES[name]["gates"] if g not in gates]
        runtime += [r for r in FEATURES[name]["runtime_config"] if r not in runtime]
    gate_args = [f"--feature-gates={','.join(f'{g}=true' for g in gates)}"] if gates else []
    runtime_args = [f"--runtime-config={','.join(runtime)}"] if runtime else []
    return gate_args, runtime_args


class ClusterError(RuntimeError):
    pass




def default_work_dir() -> Path:
    """``<repo>/.local-cluster`` (this package lives in <repo>/hack/cluster/localcluster)."""
    return Path(__file__).resolve().parents[3] / ".local-cluster"


def _patch(name: str, args: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "extraArgs": [{"key": k, "value": v} for k, v in args.items()]}


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok, by kwokctl.

    >>> with LocalCluster() as c:            # doctest: +SKIP
    ...     create_nodes(c.kubeconfig, load_topology("small-4"))
    """

    def __init__(
        self,
        work_dir: str | Path | None = None,
        bin_dir: str | Path | None = None,
        *,
        kwok_config: str | Path | None = None,
        extra_apiserver_args: list[str] | None = None,
        features: list[str] | tuple[str, ...] = (),
        stop_at_exit: bool = True,
    ) -> None:
        """``features``: names from ``FEATURES`` (alpha gates + API versions); ``stop_at_exit``:
        stop it when this interpreter exits (off for ``up``, whose cluster outlives it)."""
        self.features = list(features)
        feature_args(self.features)  # unknown names fail here, before anything starts
        self.work_dir = Path(work_dir) if work_dir else default_work_dir()
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self.kwok_config = Path(kwok_config) if kwok_config else None
        self.extra_apiserver_args = list(extra_apiserver_args or [])
        self.stop_at_exit = stop_at_exit
        self.ports: dict[str, int] = {}
        self.etcd_data: Path | None = None
        # kwokctl names clusters globally per workdir; one name per work dir keeps them apart.
        self.name = "phalanx-" + hashlib.sha256(str(self.work_dir.resolve()).encode()).hexdigest()[:8]

    # ---- paths ---------------------------------------------------------------------------
    @property
    def kwok_workdir(self) -> Path:
        return self.work_dir / "kwokctl"

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.work_dir / STATE_FILE

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    @property
    def kubectl(self) -> str:
        return self.bin("kubectl")

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> LocalCluster:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)} "
                "(run `make cluster-binaries` or hack/cluster/build.sh, or set PHALANX_BIN_DIR)"
            )
        if self.running():
            raise ClusterError(f"a cluster already runs from {self.work_dir}; `python -m localcluster down` first")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.stop_at_exit:
            atexit.register(self.stop)
        self.ports = {k: free_port() for k in ("apiserver", "etcd", "etcd-peer", "kube-controller-manager",
                                                "kube-scheduler", "kwok")}
        self.etcd_data = _etcd_data_dir()
        config = self.work_dir / "kwokctl.yaml"
        config.write_text(yaml.safe_dump_all(self._config_docs(), sort_keys=False))
        try:
            self._kwokctl("create", "cluster", "--config", str(config), *self._binary_flags(),
                          f"--wait={int(timeout)}s", timeout=timeout + 30)
            shutil.copyfile(self.kwok_workdir / "clusters" / self.name / "kubeconfig.yaml", self.kubeconfig)
            self.kubeconfig.chmod(0o600)
            self._wait_default_service_account(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        self.state_file.write_text(json.dumps({"bin_dir": str(self.bin_dir), "features": self.features,
                                               "kubeconfig": str(self.kubeconfig), "ports": self.ports,
                                               "etcd_data": str(self.etcd_data)}))
        return self

    def stop(self) -> None:
        """Stop every component and delete the cluster's data (etcd included). Returns once every
        component process is gone: ``kwokctl delete`` signals them and returns while they still exit."""
        components = self._component_processes()
        if (self.kwok_workdir / "clusters" / self.name).exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._kwokctl("delete", "cluster", timeout=60)
        _wait_gone(components, COMPONENT_EXIT_SECONDS)
        shutil.rmtree(self.kwok_workdir / "clusters" / self.name, ignore_errors=True)
        if self.etcd_data is not None:
            shutil.rmtree(self.etcd_data, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    def running(self) -> bool:
        return self.state_file.exists() and self._readyz()

    def status(self) -> dict[str, Any]:
        return {"work_dir": str(self.work_dir), "kubeconfig": str(self.kubeconfig),
                "server": self.server if "apiserver" in self.ports else None, "features": self.features,
                "kwokctl": str(self.kwok_workdir / "clusters" / self.name), "ready": self.running()}

    def detach(self) -> None:
        """Leave it running after this interpreter exits (``make cluster-up``)."""
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    @classmethod
    def attach(cls, work_dir: str | Path | None = None) -> LocalCluster | None:
        """A handle on a cluster started elsewhere (from its state file), or None."""
        wd = Path(work_dir) if work_dir else default_work_dir()
        try:
            st = json.loads((wd / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        c = cls(work_dir=wd, bin_dir=st.get("bin_dir"), features=st.get("features", []), stop_at_exit=False)
        c.ports = {k: int(v) for k, v in st.get("ports", {}).items()}
        c.etcd_data = Path(st["etcd_data"]) if st.get("etcd_data") else None
        return c

    def _component_processes(self) -> set[tuple[int, int | None]]:
        """(pid, start time) of each live component, from kwokctl's pid files."""
        found = set()
        for f in (self.kwok_workdir / "clusters" / self.name / "pids").glob("*.pid"):
            with contextlib.suppress(OSError, ValueError):
                pid = int(f.read_text().strip())
                if alive(pid):
                    found.add((pid, start_time(pid)))
        return found

    # ---- kwokctl -------------------------------------------------------------------------
    def _kwokctl(self, *args: str, timeout: float) -> None:
        env = {**os.environ, "KWOK_WORKDIR": str(self.kwok_workdir)}
        out = subprocess.run([self.bin("kwokctl"), "--name", self.name, *args], env=env,
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise ClusterError(f"kwokctl {' '.join(args[:2])} failed ({out.returncode}):\n{out.stderr[-3000:]}")

    def _binary_flags(self) -> list[str]:
        p = self.ports
        flags = [
            "--runtime=binary", "--kubeconfig=", f"--kube-apiserver-port={p['apiserver']}",
            f"--etcd-port={p['etcd']}", f"--kube-controller-manager-port={p['kube-controller-manager']}",
            f"--kube-scheduler-port={p['kube-scheduler']}", f"--controller-port={p['kwok']}",
            f"--etcd-binary={self.bin('etcd')}", f"--kwok-controller-binary={self.bin('kwok')}",
        ]
        for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            flags.append(f"--{c}-binary={self.bin(c)}")
        gates, runtime = feature_args(self.features)  # kwokctl passes them to every component
        flags += [a.replace("--feature-gates=", "--kube-feature-gates=") for a in gates]
        flags += [a.replace("--runtime-config=", "--kube-runtime-config=") for a in runtime]
        return flags

    def _gate_args(self) -> list[str]:
        return feature_args(self.features)[0]

    def _config_docs(self) -> list[dict[str, Any]]:
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        etcd = {"listen-peer-urls": peer, "initial-advertise-peer-urls": peer, "initial-cluster": f"node0={peer}",
                "data-dir": str(self.etcd_data), "snapshot-count": "10000", "log-level": "warn"}
        extra = dict(a.removeprefix("--").split("=", 1) for a in self.extra_apiserver_args)
        kwokctl = {
            "apiVersion": KWOKCTL_CONFIG, "kind": "KwokctlConfiguration",
            "options": {"bindAddress": "127.0.0.1", "kubeAuthorization": True, "kubeAdmission": True},
            "componentsPatches": [
                _patch("etcd", etcd), _patch("kube-apiserver", {**APISERVER_ARGS, **extra}),
                _patch("kube-controller-manager", CONTROLLER_MANAGER_ARGS),
                _patch("kube-scheduler", SCHEDULER_ARGS), _patch("kwok-controller", KWOK_ARGS),
            ],
        }
        stages = (self.kwok_config.read_text() if self.kwok_config
                  else resources.files(__package__).joinpath("kwok-stages.yaml").read_text())
        return [kwokctl, *(d for d in yaml.safe_load_all(stages) if d)]

    # ---- readiness -----------------------------------------------------------------------
    def _readyz(self) -> bool:
        if not self.kubeconfig.exists() or "apiserver" not in self.ports:
            return False
        out = subprocess.run([self.kubectl, f"--kubeconfig={self.kubeconfig}", "get", "--raw", "/readyz"],
                             capture_output=True, text=True, timeout=10, check=False)
        return out.returncode == 0

    def _wait_default_service_account(self, deadline: float) -> None:
        """The serviceaccount controller has to make `default` before pods can be admitted."""
        while time.monotonic() < deadline:
            out = subprocess.run([self.kubectl, f"--kubeconfig={self.kubeconfig}", "-n", "default", "get",
                                  "serviceaccount", "default"], capture_output=True, timeout=10, check=False)
            if out.returncode == 0:
                return
            time.sleep(0.3)
        raise ClusterError("timed out waiting for serviceaccount default/default")


def _wait_gone(processes: set[tuple[int, int | None]], timeout: float) -> None:
    """Wait until none of ``processes`` (pid, start time) lives; SIGKILL what is left at the end."""
    def left() -> list[int]:
        return [pid for pid, st in processes if alive(pid) and start_time(pid) == st]

    deadline = time.monotonic() + timeout
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    kill_pids(left())


def _etcd_data_dir() -> Path:
    """A fresh etcd data dir, on tmpfs when there is one (etcd fsyncs every write, slow on VM
    disks); dirs left by a killed cluster are swept first."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    _sweep_stale_etcd_dirs(base)
    return Path(tempfile.mkdtemp(prefix="phalanx-etcd-", dir=base))


def _sweep_stale_etcd_dirs(base: Path) -> None:
    """Remove phalanx-etcd-* data dirs no running process names (left by kill -9)."""
    stale = list(base.glob("phalanx-etcd-*"))
    if not stale:
        return
    in_use = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            for arg in cmdline(int(d.name)).split():
                if arg.startswith("--data-dir="):
                    in_use.add(arg.split("=", 1)[1])
    for d in stale:
        if str(d) not in in_use:
            shutil.rmtree(d, ignore_errors=True)
