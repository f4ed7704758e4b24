"""Checkpoints in object storage (``s3://``, ``gs://``, any fsspec URL): the same commit protocol
as on a volume, without renames, which object stores do not have.

Layout under ``$PHALANX_CHECKPOINT_URI`` (``<checkpoint.storage.uri>/<namespace>/<job>``)::

    step-<N>/                 DCP shards + .metadata + rng/rank-<r>.pt, then COMMITTED
    model/                    what model the checkpoints hold (as on a volume)

A step is committed when its ``COMMITTED`` object exists: rank 0 puts it (one PUT, atomic in S3
and GCS) only after DCP's coordinator has written ``.metadata``, which it does after every rank's
shards are written. A ``step-<N>/`` prefix without the marker is a save that did not finish: it
is never resumed and rank 0 deletes it at start. Pruning deletes the marker first (the step is
uncommitted at once), then the rest. Validation is the volume's: the marker and metadata read
back (metadata with the safe unpickler) and every shard object has every byte the metadata
points at.

Endpoint, region and credentials come the cloud's way, from the environment the pod gets:
``AWS_ENDPOINT_URL_S3`` / ``AWS_REGION`` and a Secret's ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, or the service account's web identity (IRSA, GKE workload identity),
which botocore and google-auth read themselves. Nothing here logs them.

fsspec (s3fs, gcsfs) does the transfers and DCP's ``FsspecWriter`` / ``FsspecReader`` the
checkpoint files, as torch ships them: a reader opens each shard and reads the byte ranges of
the tensors this rank loads.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import queue
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from torch.distributed.checkpoint.fsspec_filesystem import FsspecWriter

from phalanx_runtime.components.checkpoint import (
    COMMIT_MARKER,
    MARKER_MAX_BYTES,
    STEP_RE,
    SafeFsspecReader,
    _writer,
    missing_files,
)
from phalanx_runtime.env import ENV_CHECKPOINT_TEST_WRITE_DELAY

RNG_MAX_BYTES = 1 << 20  # a rank's RNG state is a few KiB; more is not one

log = logging.getLogger("phalanx_runtime.checkpoint")


def _storage_options(scheme: str) -> dict:
    """No listings cache: another rank's or another start's objects must be seen at once."""
    return {"use_listings_cache": False} if scheme in ("s3", "gs", "gcs") else {}


class ObjectStore:
    """One job's checkpoint prefix, called as :class:`~phalanx_runtime.components.checkpoint.VolumeStore`
    is: methods that change shared objects by rank 0 only, except each rank's RNG file."""

    # begin() may delete an earlier run's objects of the step: every rank waits for it before writing.
    begin_is_collective = True
    commits_in_background = False
    restored = None

    def __init__(self, uri: str):
        from fsspec.core import url_to_fs

        scheme, sep, _ = uri.partition("://")
        if not sep:
            raise ValueError(f"not a storage URI: {uri!r}")
        self.scheme = scheme
        self.uri = uri.rstrip("/")
        self.options = _storage_options(self.scheme)
        self.fs, self.path = url_to_fs(self.uri, **self.options)
        self.path = self.path.rstrip("/")

    # ------------------------------------------------------------------ names

    def url(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    def _key(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def step_url(self, step: int) -> str:
        return self.url(f"step-{step}")

    # ------------------------------------------------------------------ reads

    def _step_prefixes(self) -> dict[int, str]:
        try:
            names = self.fs.ls(self.path, detail=False)
        except FileNotFoundError:
            return {}
        out = {}
        for name in names:
            m = STEP_RE.match(posixpath.basename(name.rstrip("/")))
            if m:
                out[int(m.group(1))] = name.rstrip("/")
        return out

    def _marked(self) -> set[int]:
        """Steps whose COMMITTED object exists: one listing, not a request per step."""
        found = self.fs.glob(self._key("step-*", COMMIT_MARKER))
        return {int(m.group(1)) for name in found if (m := STEP_RE.match(posixpath.basename(posixpath.dirname(name))))}

    def committed_steps(self) -> list[int]:
        return sorted(self._marked(), reverse=True)

    def read_bytes(self, rel: str, limit: int) -> bytes | None:
        """At most ``limit`` bytes of the object ``rel`` (None if missing or larger)."""
        try:
            with self.fs.open(self._key(rel), "rb") as f:
                data = f.read(limit + 1)
        except (FileNotFoundError, OSError):
            return None
        return data if len(data) <= limit else None

    def read_marker(self, step: int) -> dict | None:
        raw = self.read_bytes(f"step-{step}/{COMMIT_MARKER}", MARKER_MAX_BYTES)
        try:
            info = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError):
            return None
        return info if isinstance(info, dict) else None

    def sizes(self, step: int) -> dict[str, int]:
        """Object sizes under ``step-<N>/``, by path relative to it."""
        base = self._key(f"step-{step}")
        found = self.fs.find(base, detail=True)
        return {posixpath.relpath(name, base): int(info.get("size") or 0) for name, info in found.items()}

    def validate(self, step: int) -> str | None:
        """None if the committed checkpoint of ``step`` is complete, else why not."""

        info = self.read_marker(step)
        if info is None or type(info.get("step")) is not int:
            return "commit marker unreadable"
        try:
            md = SafeFsspecReader(self.step_url(step), **self.options).read_metadata()
        except Exception as e:  # noqa: BLE001 — any unreadable metadata means a damaged checkpoint
            return f"DCP metadata unreadable: {type(e).__name__}: {e}"
        return missing_files(md, info, self.sizes(step))

    def read_rng(self, step: int, rank: int) -> bytes | None:
        return self.read_bytes(f"step-{step}/rng/rank-{rank}.pt", RNG_MAX_BYTES)

    def reader(self, step: int):
        return SafeFsspecReader(self.step_url(step), **self.options)

    def writer(self, step: int):
        return _writer(FsspecWriter, self.step_url(step), sync_files=False, **self.options)

    # ------------------------------------------------------------------ writes

    def put_bytes(self, rel: str, data: bytes) -> None:
        with self.fs.open(self._key(rel), "wb") as f:
            f.write(data)

    def put_json(self, rel: str, obj: dict) -> None:
        self.put_bytes(rel, json.dumps(obj).encode())

    def remove(self, rel: str) -> None:
        key = self._key(rel)
        try:
            if self.fs.exists(key) or self.fs.find(key):
                self.fs.rm(key, recursive=True)
        except FileNotFoundError:
            pass

    def uncommit(self, step: int) -> None:
        """The step leaves the committed set at once (its marker), then its objects go."""

        try:
            self.fs.rm_file(self._key(f"step-{step}", COMMIT_MARKER))
        except FileNotFoundError:
            pass
        self.remove(f"step-{step}")

    def prepare(self) -> None:
        self.remove_uncommitted()

    def begin(self, step: int, rank: int) -> None:
        """A step of an earlier run at the step about to be written (a damaged one that the resume
        skipped, or an uncommitted one) is removed first, so no old shard mixes with new ones."""
        if rank == 0 and self._step_prefixes().get(step) is not None:
            self.uncommit(step)

    def put_rng(self, step: int, rank: int, data: bytes) -> None:
        self.put_bytes(f"step-{step}/rng/rank-{rank}.pt", data)

    def commit(self, step: int, info: dict) -> None:
        self.put_json(f"step-{step}/{COMMIT_MARKER}", info)

    def scratch(self, rel: str) -> Path:
        """A fresh local path for what :meth:`put_tree` / :meth:`put_file` upload."""
        return Path(tempfile.mkdtemp(prefix="phalanx-upload-")) / posixpath.basename(rel)

    def put_file(self, local: Path, rel: str) -> str:
        self.fs.put_file(str(local), self._key(rel))
        shutil.rmtree(Path(local).parent, ignore_errors=True)
        return self.url(rel)

    def publish(self, local: Path) -> None:
        if local.is_file():
            self.fs.put_file(str(local), self._key(local.name))

    def fetch_published(self, local: Path) -> None:
        """The copy of ``local`` an earlier start published, where ``local`` is not there yet."""
        if not local.exists() and self.fs.exists(self._key(local.name)):
            local.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(self._key(local.name), str(local))

    def remove_uncommitted(self) -> None:
        marked = self._marked()
        for step in sorted(self._step_prefixes()):
            if step not in marked:
                log.info("removing uncommitted checkpoint %s", self.step_url(step))
                self.remove(f"step-{step}")

    def drain(self) -> None:
        """Nothing in the background: every rank's write is the commit's."""

    def put_dir(self, local: Path) -> None:
        """Every file of the local directory ``local`` under this prefix (the local dir stays)."""
        for f in sorted(p for p in Path(local).rglob("*") if p.is_file()):
            self.fs.put_file(str(f), self._key(f.relative_to(local).as_posix()))

    def put_tree(self, local: Path, rel: str) -> None:
        """Replace the prefix ``rel`` with the files of the local directory ``local``."""
        self.remove(rel)
        ObjectStore(self.url(rel)).put_dir(local)
        shutil.rmtree(Path(local).parent, ignore_errors=True)

    def get_tree(self, rel: str, local: Path) -> bool:
        """Copy the prefix ``rel`` into the local directory ``local``; False if it holds nothing."""
        base = self._key(rel)
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return False
        for name in found:
            dest = Path(local) / posixpath.relpath(name, base)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with self.fs.open(name, "rb") as src:
                dest.write_bytes(src.read())
        return bool(found)




class TieredStore(ObjectStore):
    """Object storage behind a pod-local tier (``checkpoint.storage.localTier``): every rank saves
    into the pod's own directory (an emptyDir, memory-backed where configured), so training waits
    for a local save only, and a background thread uploads that rank's files; the bucket stays the
    one place a step is committed.

    Commit: each rank puts ``step-<N>/.uploaded/rank-<r>`` after its files; rank 0's thread, once
    every rank's is there, puts ``COMMITTED`` and prunes. Resume: the newest step committed in the
    bucket, each file read from the pod's copy where it has the bucket's size (a restart in place,
    same pods and nodes) and from the bucket otherwise (a new pod, a replaced node, another world
    size). The pod keeps its newest step only."""

    begin_is_collective = True
    commits_in_background = True
    UPLOADED = ".uploaded"

    def __init__(self, uri: str, local: str | os.PathLike, *, commit_timeout: float = 3600.0):
        super().__init__(uri)
        self.local = Path(local)
        self.commit_timeout = commit_timeout
        self.jobs: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.failed: list[tuple[int, BaseException]] = []
        self.pending = 0
        self.lock = threading.Condition()
        self.restored = {"local": 0, "remote": 0}

    def _local_step(self, step: int) -> Path:
        return self.local / f"step-{step}"

    @staticmethod
    def own_files(step_dir: Path, rank: int) -> list[Path]:
        """What rank ``rank`` wrote of a step: its shards and RNG file, and rank 0 the metadata."""
        found = [*step_dir.glob(f"__{rank}_*.distcp"), step_dir / "rng" / f"rank-{rank}.pt"]
        if rank == 0:
            found.append(step_dir / ".metadata")
        return [f for f in found if f.is_file()]

    # ------------------------------------------------------------------ save

    def prepare(self) -> None:
        super().prepare()
        self.local.mkdir(parents=True, exist_ok=True)

    def begin(self, step: int, rank: int) -> None:
        super().begin(step, rank)  # rank 0: an earlier run's objects of this step go first
        for f in self.own_files(self._local_step(step), rank):
            f.unlink()
        (self._local_step(step) / "rng").mkdir(parents=True, exist_ok=True)

    def put_rng(self, step: int, rank: int, data: bytes) -> None:
        (self._local_step(step) / "rng" / f"rank-{rank}.pt").write_bytes(data)

    def writer(self, step: int):
        from torch.distributed.checkpoint import FileSystemWriter

        return _writer(FileSystemWriter, str(self._local_step(step)), sync_files=False)

    def upload(self, step: int, rank: int, world: int, info: dict | None, on_done) -> None:
        """After this rank's local save of ``step``: its files go up in the background; rank 0
        (``info``: the marker) commits once every rank's have. ``on_done(step, committed)`` runs
        in the thread when this rank is done."""
        with self.lock:
            self.pending += 1
        self.jobs.put((step, rank, world, info, on_done))
        if self.thread is None:
            self.thread = threading.Thread(target=self._uploads, name="phalanx-checkpoint-upload", daemon=True)
            self.thread.start()

    def _uploads(self) -> None:
        while True:
            step, rank, world, info, on_done = self.jobs.get()
            committed = False
            try:
                self._upload(step, rank)
                if info is not None:
                    self._commit_when_all(step, world, info)
                    committed = True
                self._drop_older(step, rank)
            except BaseException as e:  # noqa: BLE001 — the step stays uncommitted; training goes on
                log.warning("checkpoint step %d: upload from the local tier failed (%s: %s); the step is not "
                            "committed", step, type(e).__name__, e)
                self.failed.append((step, e))
            try:
                on_done(step, committed)
            finally:
                with self.lock:
                    self.pending -= 1
                    self.lock.notify_all()

    def _upload(self, step: int, rank: int) -> None:
        base = self._local_step(step)
        for f in self.own_files(base, rank):
            self.fs.put_file(str(f), self._key(f"step-{step}", f.relative_to(base).as_posix()))
        delay = float(os.environ.get(ENV_CHECKPOINT_TEST_WRITE_DELAY) or 0)
        if delay > 0:  # tests and the chaos benchmark: a window with the files up and the step uncommitted
            time.sleep(delay)
        self.put_bytes(f"step-{step}/{self.UPLOADED}/rank-{rank}", b"")

    def _commit_when_all(self, step: int, world: int, info: dict) -> None:
        marks = self._key(f"step-{step}", self.UPLOADED)
        deadline = time.monotonic() + self.commit_timeout
        while True:
            try:
                done = len(self.fs.ls(marks, detail=False))
            except FileNotFoundError:
                done = 0
            if done >= world:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{done} of {world} ranks uploaded step {step} in {self.commit_timeout:.0f}s")
            time.sleep(0.05)
        self.put_json(f"step-{step}/{COMMIT_MARKER}", info)
        self.remove(f"step-{step}/{self.UPLOADED}")

    def _drop_older(self, step: int, rank: int) -> None:
        """The pod keeps its newest uploaded step: this rank's files of older ones go."""
        for d in self.local.glob("step-*"):
            m = STEP_RE.match(d.name)
            if m and int(m.group(1)) < step:
                for f in self.own_files(d, rank):
                    f.unlink(missing_ok=True)

    def drain(self) -> None:
        """Wait until every upload this rank queued is done (committed or failed)."""
        with self.lock:
            while self.pending:
                self.lock.wait()

    # ------------------------------------------------------------------ load

    def reader(self, step: int):
        sizes = self.sizes(step)
        return TieredReader(self.step_url(step), self._local_step(step), sizes, self.restored, **self.options)


class TieredReader(SafeFsspecReader):
    """DCP's reader of a committed step in the bucket that opens the pod's copy of a file instead
    where it has the bucket object's size (``sizes``, from one listing), counting which in ``counts``."""

    def __init__(self, url: str, local: Path, sizes: dict[str, int], counts: dict[str, int], **options):
        super().__init__(url, **options)
        self.fs = _PreferLocal(self.fs, str(self.path), local, sizes, counts)


class _PreferLocal:
    """DCP's fsspec file system with ``create_stream`` opening the local copy where it is whole."""

    def __init__(self, remote, base: str, local: Path, sizes: dict[str, int], counts: dict[str, int]):
        self.remote, self.base, self.local, self.sizes, self.counts = remote, base, local, sizes, counts

    def __getattr__(self, name):
        return getattr(self.remote, name)

    @contextmanager
    def create_stream(self, path, mode):
        rel = posixpath.relpath(str(path), self.base)
        mine = self.local / rel
        try:
            here = mine.stat().st_size == self.sizes.get(rel, -1)
        except OSError:
            here = False
        self.counts["local" if here else "remote"] += 1
        with (open(mine, mode) if here else self.remote.create_stream(path, mode)) as f:
            yield f
