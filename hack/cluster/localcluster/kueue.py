"""Run a real Kueue (built by hack/kueue/build.sh) against any cluster whose API server runs on this
machine: the local control plane (hack/cluster/localcluster) in tests and benchmarks.

Kueue runs as a local process with the admin kubeconfig. Its webhooks are served on loopback
(127.0.0.1:<free port>) with a certificate made here (a throwaway CA + a serving cert for IP
127.0.0.1), and registered with ``clientConfig.url: https://127.0.0.1:PORT/<path>`` and that CA
as ``caBundle`` — the API server calls them directly, no Service. Kueue's own certificate
management (which writes a Secret and patches the webhook configurations it finds by name) is
off. Only the webhooks of what is enabled are registered: pods and Kueue's own kinds (the
stock manifests also name Jobs, Deployments, RayClusters, ... whose paths are not served with
those integrations off, and ``failurePolicy: Fail`` would then refuse them cluster-wide). The
pod webhooks only see namespaces labelled ``MANAGED_LABEL``, which is also Kueue's
``managedJobsNamespaceSelector``. ``stop()`` removes the webhook configurations first, so a
stopped Kueue never blocks pod creation.

    PYTHONPATH=hack/cluster python -m localcluster.kueue up --kubeconfig .local-cluster/kubeconfig   # foreground
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from phalanx_common.proc import die_with_parent

from .cluster import free_port

BUILD = Path(__file__).resolve().parents[2] / "kueue" / "build.sh"  # hack/kueue/build.sh
MANAGED_LABEL = ("phalanx.dev/kueue", "true")
WEBHOOK_PREFIX = "phalanx-kueue"
FEATURE_GATES = "TopologyAwareScheduling=true,VisibilityOnDemand=false"
FINALIZER = "kueue.x-k8s.io/managed"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def build(timeout: float = 3600) -> Path:
    """hack/kueue/build.sh (cached: seconds when built); the dir with kueue, crds/, webhook-manifests.yaml."""
    out = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"hack/kueue/build.sh failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def cached_dir() -> Path:
    return Path(subprocess.run([str(BUILD), "--print-dir"], capture_output=True, text=True, check=True).stdout.strip())



def make_certs(d: Path) -> bytes:
    """CA + serving cert for 127.0.0.1 in ``d`` (tls.crt/tls.key, controller-runtime's names); the CA PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "phalanx-kueue-webhook-ca")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(now + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kueue-webhook")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                         x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    (d / "tls.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL,
                                                  serialization.NoEncryption()))
    (d / "tls.key").chmod(0o600)
    (d / "tls.crt").write_bytes(cert.public_bytes(pem))
    ca_pem = ca.public_bytes(pem)
    (d / "ca.crt").write_bytes(ca_pem)
    return ca_pem


def metrics_certs(cert_dir: Path) -> None:
    """Kueue v0.17 with its own certificate management off loads a metrics serving pair from the
    fixed path /etc/kueue/metrics/certs at start (cmd/kueue/main.go), even with metrics off
    (bindAddress "0"), and exits when it is missing. Put a pair there (root on dev and CI
    machines), written atomically; an existing pair is kept."""
    d = METRICS_CERT_DIR
    if (d / "tls.crt").is_file() and (d / "tls.key").is_file():
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            tmp = d / f".{name}.{os.getpid()}"
            tmp.write_bytes((cert_dir / name).read_bytes())
            tmp.chmod(0o600 if name.endswith("key") else 0o644)
            tmp.replace(d / name)
    except OSError as e:
        raise RuntimeError(f"Kueue needs a certificate pair in {d} (hard-coded in v0.17 when its "
                           f"certificate management is off) and it cannot be written: {e}") from e


def config(webhook_port: int, health_port: int, cert_dir: Path, namespace: str = "kueue-system") -> dict[str, Any]:
    key, value = MANAGED_LABEL
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "managedJobsNamespaceSelector": {"matchLabels": {key: value}},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": ["pod"]},
    }


def webhook_configurations(manifests: Path, port: int, ca_pem: bytes, url_host: str = "127.0.0.1") -> list[dict[str, Any]]:
    """Kueue's webhook configurations, only pods and kueue.x-k8s.io kinds, pointing at url_host:port."""
    import base64

    key, value = MANAGED_LABEL
    out = []
    for doc in yaml.safe_load_all(manifests.read_text()):
        if not doc:
            continue
        hooks = []
        for w in doc.get("webhooks") or []:
            groups = {g for r in w.get("rules") or [] for g in r.get("apiGroups") or []}
            if not groups <= {"", "kueue.x-k8s.io"}:
                continue
            path = w["clientConfig"]["service"]["path"]
            w["clientConfig"] = {"url": f"https://{url_host}:{port}{path}", "caBundle": base64.b64encode(ca_pem).decode()}
            if "" in groups:  # pods: only the namespaces Kueue manages
                w["namespaceSelector"] = {"matchLabels": {key: value}}
            w["timeoutSeconds"] = 10
            hooks.append(w)
        kind = doc["kind"]
        suffix = "mutating" if kind.startswith("Mutating") else "validating"
        out.append({"apiVersion": doc["apiVersion"], "kind": kind,
                    "metadata": {"name": f"{WEBHOOK_PREFIX}-{suffix}"}, "webhooks": hooks})
    return out


class LocalKueue:
    """Kueue as a local process against ``kubeconfig`` (an admin one). ``start()`` installs the
    CRDs, starts Kueue, waits until it is ready, registers its webhooks; ``stop()`` undoes the
    webhooks and stops it (CRDs and Kueue objects stay)."""

    def __init__(self, kubeconfig: Path, work_dir: Path, kubectl: str, kueue_dir: Path | None = None,
                 log_level: int = 2):
        self.kubeconfig = Path(kubeconfig)
        self.work_dir = Path(work_dir)
        self.kubectl_bin = kubectl
        self.dir = Path(kueue_dir) if kueue_dir else build()
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.log = self.work_dir / "kueue.log"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([self.kubectl_bin, f"--kubeconfig={self.kubeconfig}", *args], input=input,
                             capture_output=True, text=True, timeout=120)
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
        return out

    def install_crds(self) -> None:
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(self.dir / "crds"))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(self.dir / "crds"))

    def start(self, timeout: float = 90) -> LocalKueue:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.install_crds()
        ns = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}})
        self.kubectl("apply", "-f", "-", input=ns)
        cert_dir = self.work_dir / "certs"
        ca_pem = make_certs(cert_dir)
        metrics_certs(cert_dir)
        self.webhook_port, self.health_port = free_port(), free_port()
        cfg = self.work_dir / "config.yaml"
        cfg.write_text(yaml.safe_dump(config(self.webhook_port, self.health_port, cert_dir)))
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        self.proc = subprocess.Popen(
            [str(self.dir / "kueue"), f"--config={cfg}", f"--feature-gates={FEATURE_GATES}",
             f"--zap-log-level={self.log_level}", f"--visibility-server-port={free_port()}"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
            preexec_fn=lambda: die_with_parent(signal.SIGTERM))  # a kill -9 of the tests takes Kueue along
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"kueue exited ({self.proc.returncode}); log:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kueue not ready after {timeout}s; log:\n{self.tail()}")
            time.sleep(0.3)
        self._wait_webhook_tls(ca_pem, deadline)
        hooks = webhook_configurations(self.dir / "webhook-manifests.yaml", self.webhook_port, ca_pem)
        self.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": hooks}))
        self.started_in = time.monotonic() - t0
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def _wait_webhook_tls(self, ca_pem: bytes, deadline: float) -> None:
        ctx = ssl.create_default_context(cadata=ca_pem.decode())
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.webhook_port), timeout=1) as s, \
                        ctx.wrap_socket(s, server_hostname="127.0.0.1"):
                    return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"kueue webhook on 127.0.0.1:{self.webhook_port} not serving: {e}") from e
                time.sleep(0.3)

    def unregister_webhooks(self) -> None:
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            suffix = "mutating" if kind.startswith("mutating") else "validating"
            self.kubectl("delete", kind, f"{WEBHOOK_PREFIX}-{suffix}", "--ignore-not-found", check=False)

    def stop(self) -> None:
        self.unregister_webhooks()
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.release_pods()

    def release_pods(self) -> None:
        """Drop Kueue's finalizer from the pods it managed: with Kueue gone nothing else would, and
        their namespaces could never finish deleting."""
        out = self.kubectl("get", "pods", "-A", "-l", "kueue.x-k8s.io/managed=true", "-o", "json", check=False)
        if out.returncode != 0:
            return
        for pod in json.loads(out.stdout).get("items") or []:
            meta = pod["metadata"]
            if FINALIZER in (meta.get("finalizers") or []):
                keep = [f for f in meta["finalizers"] if f != FINALIZER]
                self.kubectl("patch", "pod", "-n", meta["namespace"], meta["name"], "--type=merge",
                             "-p", json.dumps({"metadata": {"finalizers": keep or None}}), check=False)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:]) if self.log.exists() else ""

    def __enter__(self) -> LocalKueue:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()



def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("verb", choices=["up", "build"])
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ".local-cluster/kubeconfig"))
    p.add_argument("--kubectl", default="kubectl")
    p.add_argument("--work-dir", default=".local-cluster/kueue")
    args = p.parse_args(argv)
    if args.verb == "build":
        print(build())
        return 0
    k = LocalKueue(Path(args.kubeconfig), Path(args.work_dir), args.kubectl).start()
    print(f"kueue ready in {k.started_in:.1f}s (webhooks on 127.0.0.1:{k.webhook_port}); log {k.log}; Ctrl-C stops it", flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        k.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
