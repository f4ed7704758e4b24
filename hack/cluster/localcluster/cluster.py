"""A real local Kubernetes control plane (envtest-style) with kwok-played nodes.

Processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok. Each runs
in its own process group on loopback ports picked at start; ``stop()`` (also run at
interpreter exit) terminates every group and removes the etcd data. ``LocalCluster``
can also be detached (``python -m localcluster up``): its state file
``<work_dir>/cluster.json`` lets another process find (``attach``) or stop it.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from phalanx.proc import alive, cmdline, die_with_parent

from .binaries import default_bin_dir, missing_binaries
from .certs import generate_pki
from .topology import KWOK_NODE_SELECTOR

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
STATE_FILE = "cluster.json"

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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_work_dir() -> Path:
    """``<repo>/.local-cluster`` (this package lives in <repo>/hack/cluster/localcluster)."""
    return Path(__file__).resolve().parents[3] / ".local-cluster"


@dataclass
class _Proc:
    name: str
    pid: int
    binary: str
    log: str
    popen: subprocess.Popen | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return alive(self.pid) and self.binary in cmdline(self.pid)

    def stop(self, grace: float = 10.0) -> None:
        if not self.alive():
            if self.popen is not None:
                self.popen.wait()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait(timeout=10)
        else:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.alive():
                time.sleep(0.05)


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok on loopback.

    >>> with LocalCluster() as c:            # doctest: +SKIP
    ...     create_nodes(c.kubeconfig, load_topology("small-4"))
    """

    def __init__(
        self,
        work_dir: str | Path | None = None,
        bin_dir: str | Path | None = None,
        *,
        kwok: bool = True,
        kwok_config: str | Path | None = None,
        extra_apiserver_args: list[str] | None = None,
        verbosity: int = 1,
        die_with_parent: bool = True,
        features: list[str] | tuple[str, ...] = (),
    ) -> None:
        """``features``: names from ``FEATURES`` (e.g. ``["workload"]``) — alpha feature gates for
        kube-apiserver, kube-controller-manager and kube-scheduler, and the API versions the
        apiserver serves with them. Empty (the default): the stock v1.36 defaults."""
        self.features = list(features)
        feature_args(self.features)  # unknown names fail here, before anything starts
        self.work_dir = Path(work_dir) if work_dir else default_work_dir()
        self.bin_dir = Path(bin_dir) if bin_dir else default_bin_dir()
        self.kwok = kwok
        self.kwok_config = Path(kwok_config) if kwok_config else None
        self.extra_apiserver_args = list(extra_apiserver_args or [])
        self.verbosity = verbosity
        # Linux PR_SET_PDEATHSIG: components get SIGKILL if this process dies without
        # running stop() (kill -9, crash). Off for `up`, whose components outlive it.
        self.die_with_parent = die_with_parent and sys.platform.startswith("linux")
        self.procs: list[_Proc] = []
        self.ports: dict[str, int] = {}
        self.etcd_data: Path | None = None
        self._atexit = False

    # ---- paths ---------------------------------------------------------------------------
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

    # ---- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 180.0) -> LocalCluster:
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ClusterError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)} "
                "(run `make cluster-binaries` or hack/cluster/build.sh, or set PHALANX_BIN_DIR)"
            )
        if self.state_file.exists():
            other = LocalCluster.attach(self.work_dir)
            if other is not None and other.running():
                raise ClusterError(
                    f"a cluster already runs from {self.work_dir} (pids "
                    f"{[p.pid for p in other.procs]}); `python -m localcluster down` first"
                )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        deadline = time.monotonic() + timeout
        try:
            self.pki = generate_pki(self.work_dir / "pki", service_ip=SERVICE_IP)
            self._write_kubeconfig()
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self._start_controllers(deadline)
            self._write_state()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every component (reverse start order) and delete etcd's data."""
        for p in reversed(self.procs):
            p.stop()
        self.procs = []
        if self.etcd_data is not None:
            shutil.rmtree(self.etcd_data, ignore_errors=True)
            self.etcd_data = None
        for f in (self.state_file, self.work_dir / "cluster.pid"):
            with contextlib.suppress(FileNotFoundError):
                f.unlink()

    def running(self) -> bool:
        return bool(self.procs) and all(p.alive() for p in self.procs)

    def status(self) -> dict[str, Any]:
        return {
            "work_dir": str(self.work_dir),
            "kubeconfig": str(self.kubeconfig),
            "server": self.server if "apiserver" in self.ports else None,
            "features": self.features,
            "components": {p.name: {"pid": p.pid, "alive": p.alive(), "log": p.log} for p in self.procs},
            "ready": self.running() and self._readyz(),
        }

    def detach(self) -> None:
        """Leave the processes running after this interpreter exits (``make cluster-up``)."""
        if self._atexit:
            atexit.unregister(self.stop)
            self._atexit = False
        for p in self.procs:
            p.popen = None  # don't reap; `down` will kill by pid

    @classmethod
    def attach(cls, work_dir: str | Path | None = None) -> LocalCluster | None:
        """A handle on a cluster started elsewhere (from its state file), or None."""
        wd = Path(work_dir) if work_dir else default_work_dir()
        try:
            st = json.loads((wd / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        c = cls(work_dir=wd, bin_dir=st.get("bin_dir"), features=st.get("features", []))
        c.ports = {k: int(v) for k, v in st.get("ports", {}).items()}
        c.procs = [_Proc(**p) for p in st.get("procs", [])]
        c.etcd_data = Path(st["etcd_data"]) if st.get("etcd_data") else None
        return c

    # ---- components ----------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> _Proc:
        log = self.work_dir / "logs" / f"{name}.log"
        binary = self.bin(name)
        with open(log, "ab") as lf:
            lf.write(f"\n==== {time.strftime('%F %T')} {binary} {' '.join(args)}\n".encode())
            lf.flush()
            popen = subprocess.Popen(
                [binary, *args],
                stdin=subprocess.DEVNULL,
                stdout=lf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killpg reaches children too
                cwd=self.work_dir,
                preexec_fn=die_with_parent if self.die_with_parent else None,  # SIGKILL
            )
        proc = _Proc(name=name, pid=popen.pid, binary=binary, log=str(log), popen=popen)
        self.procs.append(proc)
        return proc

    def _wait(self, proc: _Proc, check, deadline: float, what: str) -> None:
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not proc.alive():
                raise ClusterError(f"{proc.name} exited during startup; log tail:\n{_tail(proc.log)}")
            try:
                if check():
                    return
            except Exception as e:  # noqa: BLE001 - keep polling
                last = e
            time.sleep(0.2)
        raise ClusterError(f"timed out waiting for {what} ({last}); log tail:\n{_tail(proc.log)}")

    def _start_etcd(self, deadline: float) -> None:
        client, peer = free_port(), free_port()
        self.ports["etcd"] = client
        # tmpfs when there is one: etcd fsyncs every write, slow on VM disks.
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.work_dir
        _sweep_stale_etcd_dirs(base)
        self.etcd_data = Path(tempfile.mkdtemp(prefix="phalanx-etcd-", dir=base))
        url = f"http://127.0.0.1:{client}"
        purl = f"http://127.0.0.1:{peer}"
        proc = self._spawn(
            "etcd",
            [
                f"--data-dir={self.etcd_data}",
                "--name=default",
                f"--listen-client-urls={url}",
                f"--advertise-client-urls={url}",
                f"--listen-peer-urls={purl}",
                f"--initial-advertise-peer-urls={purl}",
                f"--initial-cluster=default={purl}",
                "--initial-cluster-state=new",
                "--quota-backend-bytes=8589934592",
                "--snapshot-count=10000",
                "--log-level=warn",
            ],
        )

        def ok() -> bool:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"

        self._wait(proc, ok, deadline, "etcd /health")

    def _start_apiserver(self, deadline: float) -> None:
        port = free_port()
        self.ports["apiserver"] = port
        self._write_kubeconfig()
        pki = self.pki
        args = [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.work_dir / 'pki'}",
            f"--tls-cert-file={pki['apiserver_crt']}",
            f"--tls-private-key-file={pki['apiserver_key']}",
            f"--client-ca-file={pki['ca_crt']}",
            f"--service-account-key-file={pki['sa_pub']}",
            f"--service-account-signing-key-file={pki['sa_key']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,NodeRestriction,"
            "DefaultTolerationSeconds,Priority,ResourceQuota,LimitRanger,"
            "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ValidatingAdmissionPolicy",
            "--allow-privileged=true",
            # Nothing real behind the kubelet endpoints of kwok nodes.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--v={self.verbosity}",
            *self._gate_args(),
            *feature_args(self.features)[1],
            *self.extra_apiserver_args,
        ]
        proc = self._spawn("kube-apiserver", args)
        self._wait(proc, self._readyz, deadline, "kube-apiserver /readyz")

    def _start_controllers(self, deadline: float) -> None:
        kc = str(self.kubeconfig)
        pki = self.pki
        kcm_port, sched_port = free_port(), free_port()
        self.ports["kube-controller-manager"] = kcm_port
        self.ports["kube-scheduler"] = sched_port
        common = [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--v={self.verbosity}",
            *self._gate_args(),
        ]
        kcm = self._spawn(
            "kube-controller-manager",
            [
                *common,
                f"--secure-port={kcm_port}",
                "--controllers=*",
                f"--service-account-private-key-file={pki['sa_key']}",
                f"--root-ca-file={pki['ca_crt']}",
                f"--cluster-signing-cert-file={pki['ca_crt']}",
                f"--cluster-signing-key-file={pki['ca_key']}",
                "--use-service-account-credentials=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--cluster-cidr={POD_CIDR}",
                "--allocate-node-cidrs=false",
                # Quick gc of terminated pods keeps churny suites fast; 0 disables.
                "--terminated-pod-gc-threshold=12500",
                "--concurrent-gc-syncs=20",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )
        sched = self._spawn(
            "kube-scheduler",
            [*common, f"--secure-port={sched_port}", "--kube-api-qps=200", "--kube-api-burst=400"],
        )
        if self.kwok:
            kwok_port = free_port()
            self.ports["kwok"] = kwok_port
            cfg = self.kwok_config or self._default_kwok_config()
            self._spawn(
                "kwok",
                [
                    f"--kubeconfig={kc}",
                    f"--config={cfg}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                    "--node-lease-duration-seconds=40",
                    f"--cidr={POD_CIDR}",
                    "--node-ip=10.0.0.1",
                    f"--server-address=127.0.0.1:{kwok_port}",
                ],
            )
        self._wait(kcm, lambda: self._healthz(kcm_port), deadline, "kube-controller-manager /healthz")
        self._wait(sched, lambda: self._healthz(sched_port), deadline, "kube-scheduler /healthz")
        # The serviceaccount controller has to make `default` before pods can be admitted.
        self._wait(
            kcm,
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
            deadline,
            "serviceaccount default/default",
        )
        for p in self.procs:
            if not p.alive():
                raise ClusterError(f"{p.name} exited during startup; log tail:\n{_tail(p.log)}")

    def _gate_args(self) -> list[str]:
        return feature_args(self.features)[0]

    def _default_kwok_config(self) -> Path:
        dst = self.work_dir / "kwok-stages.yaml"
        dst.write_text(resources.files(__package__).joinpath("kwok-stages.yaml").read_text())
        return dst

    # ---- HTTP ----------------------------------------------------------------------------
    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.work_dir / "pki" / "ca.crt"))
        ctx.load_cert_chain(self.work_dir / "pki" / "admin.crt", self.work_dir / "pki" / "admin.key")
        return ctx

    def _get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(self.server + path, context=self._ssl(), timeout=5) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def _readyz(self) -> bool:
        try:
            with urllib.request.urlopen(self.server + "/readyz", context=self._ssl(), timeout=5) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    @staticmethod
    def _healthz(port: int) -> bool:
        ctx = ssl._create_unverified_context()  # self-signed serving certs of kcm/scheduler
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5) as r:
            return r.status == 200

    # ---- files ---------------------------------------------------------------------------
    def _write_kubeconfig(self) -> None:
        if "apiserver" not in self.ports:
            return
        pki = self.work_dir / "pki"

        def b64(name: str) -> str:
            return base64.b64encode((pki / name).read_bytes()).decode()

        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "phalanx-local",
                    "cluster": {"server": self.server, "certificate-authority-data": b64("ca.crt")},
                }
            ],
            "users": [
                {
                    "name": "phalanx-admin",
                    "user": {
                        "client-certificate-data": b64("admin.crt"),
                        "client-key-data": b64("admin.key"),
                    },
                }
            ],
            "contexts": [
                {"name": "phalanx-local", "context": {"cluster": "phalanx-local", "user": "phalanx-admin"}}
            ],
            "current-context": "phalanx-local",
        }
        tmp = self.kubeconfig.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg, indent=2))
        tmp.chmod(0o600)
        tmp.replace(self.kubeconfig)

    def _write_state(self) -> None:
        st = {
            "bin_dir": str(self.bin_dir),
            "features": self.features,
            "kubeconfig": str(self.kubeconfig),
            "ports": self.ports,
            "etcd_data": str(self.etcd_data) if self.etcd_data else None,
            "procs": [{"name": p.name, "pid": p.pid, "binary": p.binary, "log": p.log} for p in self.procs],
        }
        self.state_file.write_text(json.dumps(st, indent=2))
        (self.work_dir / "cluster.pid").write_text(
            "".join(f"{p.name} {p.pid}\n" for p in self.procs)
        )


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


def _tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"

