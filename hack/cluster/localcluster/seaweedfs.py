"""A local SeaweedFS (hack/seaweedfs/build.sh): a real S3-compatible server on 127.0.0.1 for the
object-storage checkpoint tests and benchmarks — master, volume server, filer and S3 gateway in
one ``weed server`` process, its data in a directory of its own, one access key.

    with LocalS3(tmp_dir) as s3:
        s3.make_bucket("ckpt")
        env = s3.env()   # AWS_ENDPOINT_URL_S3, AWS_ACCESS_KEY_ID, ... as a pod gets them
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE.parents[1] / "seaweedfs" / "build.sh"
REGION = "us-east-1"


def build(timeout: float = 3600) -> Path:
    """hack/seaweedfs/build.sh (cached: seconds when built); the dir holding ``weed``."""
    out = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"hack/seaweedfs/build.sh failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def _free_ports(n: int) -> list[int]:
    """``n`` free ports, each with port+10000 free too (SeaweedFS's gRPC ports by default)."""
    out: list[int] = []
    while len(out) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 or port in out:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        out.append(port)
    return out


class LocalS3:
    def __init__(self, work: str | os.PathLike, weed_dir: Path | None = None):
        self.work = Path(work)
        self.weed = (weed_dir or build()) / "weed"
        self.access_key = "phalanx" + secrets.token_hex(4)
        self.secret_key = secrets.token_hex(16)
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""
        self.started_in = 0.0

    def start(self, timeout: float = 120) -> LocalS3:
        data = self.work / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.work / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "phalanx", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        master, volume, filer, s3 = _free_ports(4)
        self.endpoint = f"http://127.0.0.1:{s3}"
        args = [str(self.weed), "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={master}", f"-volume.port={volume}", "-filer", f"-filer.port={filer}",
                "-s3", f"-s3.port={s3}", f"-s3.config={config}", "-master.volumeSizeLimitMB=1024",
                "-volume.max=0", "-s3.port.iceberg=0", "-s3.port.lance=0"]
        self.log = open(self.work / "weed.log", "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited {self.proc.returncode}:\n{self.tail()}")
            if self._answers():
                self.started_in = time.monotonic() - t0
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"weed server's S3 gateway did not answer in {timeout:.0f}s:\n{self.tail()}")

    def _answers(self) -> bool:
        """The S3 gateway answers, and with a bucket made it is writable (the volume server is up)."""
        try:
            urllib.request.urlopen(self.endpoint, timeout=2)
        except urllib.error.HTTPError:
            pass  # 403 for an anonymous request: the gateway is up
        except OSError:
            return False
        try:
            fs = self.fs()
            probe = "phalanx-probe"
            if not fs.exists(probe):
                fs.mkdir(probe)
            fs.pipe(f"{probe}/ok", b"1")
            fs.rm(probe, recursive=True)
        except Exception:  # noqa: BLE001 — not ready yet
            return False
        return True

    def tail(self, n: int = 3000) -> str:
        try:
            return (self.work / "weed.log").read_text()[-n:]
        except OSError:
            return ""

    def env(self) -> dict[str, str]:
        """What a pod with checkpoint.storage gets (render/pod.py storage_access_env), for this server."""
        return {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION}

    def fs(self):
        import s3fs

        return s3fs.S3FileSystem(key=self.access_key, secret=self.secret_key, use_listings_cache=False,
                                 client_kwargs={"endpoint_url": self.endpoint, "region_name": REGION})

    def make_bucket(self, name: str) -> str:
        fs = self.fs()
        if not fs.exists(name):
            fs.mkdir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, 9)
        self.proc = None

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
