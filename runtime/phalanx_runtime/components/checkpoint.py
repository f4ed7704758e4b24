"""Sharded, atomically committed checkpoints with ``torch.distributed.checkpoint`` (DCP).

Layout under the checkpoint directory (``$PHALANX_CHECKPOINT_DIR`` = ``<mountPath>/<ns>/<job>`` on
the job's checkpoint volume; the operator sets it only for a job with ``checkpoint.volume``, and a
run without it makes no Checkpointer)::

    step-<N>/                committed: DCP shards + .metadata + rng/rank-<r>.pt + COMMITTED
    .tmp-step-<N>/           being written (or abandoned by a crash: ignored, removed at start)
    model/                   what model the checkpoints hold (models/huggingface/provenance.py):
                             Hugging Face config.json, tokenizer files, phalanx-model.json
    final/model.pt           consolidated model (checkpoint.exportConsolidated; what the checkpoint holds)
    final/hf/, final/adapter/  Hugging Face export (checkpoint.exportHuggingFace)

What a checkpoint holds (one DCP state dict, resharded on load):

* ``model`` / ``optim``: ``get_state_dict`` (``flatten_optimizer_state_dict``), so DDP, FSDP2
  (DTensor), TP and PP layouts load into each other at any world size; a LoRA run on a
  pretrained model (``trainable_only``) holds only the trainable parameters (the adapters) and
  their optimizer state, loaded at resume over the base that every start reads again from the
  Hugging Face directory (which an export reads too); a LoRA run on a preset saves the whole model;
* ``trainer``: step, LR scheduler, data-loader position (global batches consumed: the position
  re-splits over any data-parallel degree);
* per rank (``rng/rank-<r>.pt``, torch.save of tensors and primitives): torch / python / numpy
  RNG; a rank that did not exist in the saved run keeps its seeded RNG.

Nothing read back is unpickled freely (a checkpoint directory is writable by pods): RNG files and
DCP's non-tensor entries load with ``torch.load(weights_only=True)``, DCP's ``.metadata`` with an
unpickler that admits DCP's metadata classes only (:class:`SafeReader`), ``COMMITTED`` is JSON.
``COMMITTED`` records the writing job's uid (``$PHALANX_JOB_UID``): resuming a checkpoint another
uid wrote (a deleted and re-created job of the same name, ``checkpoint.resume: true``) is logged
and reported in the progress as ``resumedFrom: {uid, step}``.

Commit protocol: every rank writes into ``.tmp-step-N``; DCP's coordinator (rank 0) writes
``.metadata`` only after it has gathered every rank's write result, so when rank 0's save has
returned (sync) or its future completed (async) all shards are on disk; rank 0 then writes
``COMMITTED`` (fsync) and renames the directory to ``step-N`` (atomic on POSIX filesystems).
A resume considers only ``step-*`` directories whose COMMITTED marker and DCP metadata read back
and whose shard files have every byte the metadata points at; otherwise it falls back to the
previous one. Pruning (keepLast) touches committed directories only, after a commit.

Async save (``dcp.async_save``) runs on its own gloo process group (a second save on the default
group while training continues aborts on gloo): training is blocked while the state
is staged (copied to host memory); the write runs in a thread; the next save, and exit, wait for it.
"""

from __future__ import annotations

import enum
import io
import json
import logging
import os
import pickle
import random
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import (
    DefaultLoadPlanner,
    _EmptyStateDictLoadPlanner,
)
from torch.distributed.checkpoint.fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from phalanx_common.contract import ENV_JOB_NAME, ENV_JOB_UID
from phalanx_common.storage import is_object_uri
from phalanx_runtime.distributed.process_group import new_gloo_group
from phalanx_runtime.env import ENV_CHECKPOINT_TEST_WRITE_DELAY

log = logging.getLogger("phalanx_runtime.checkpoint")

COMMIT_MARKER = "COMMITTED"
STEP_RE = re.compile(r"^step-(\d+)$")
TMP_PREFIX = ".tmp-step-"
MODEL_DIR = "model"
MARKER_MAX_BYTES = 64 * 1024


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def committed_steps(directory: str | os.PathLike) -> list[int]:
    """Steps with a committed directory (newest first), validated or not."""
    d = Path(directory)
    if not d.is_dir():
        return []
    steps = [int(m.group(1)) for p in d.iterdir() if (m := STEP_RE.match(p.name)) and p.is_dir()]
    return sorted(steps, reverse=True)


def validate_checkpoint(path: str | os.PathLike) -> str | None:
    """None if the committed checkpoint at ``path`` is complete, else why not."""
    p = Path(path)
    info = read_marker(p)
    if info is None or type(info.get("step")) is not int:
        return "commit marker unreadable"
    try:
        md = SafeReader(str(p)).read_metadata()
    except Exception as e:  # noqa: BLE001 — any unreadable metadata means a damaged checkpoint
        return f"DCP metadata unreadable: {type(e).__name__}: {e}"
    sizes = {}
    for rel in _needed_files(md, info):
        try:
            sizes[rel] = (p / rel).stat().st_size
        except OSError:
            pass
    return missing_files(md, info, sizes)


def _shard_extents(md: Metadata) -> dict[str, int]:
    """Each shard file's size as the metadata needs it (its last byte pointed at)."""
    need: dict[str, int] = {}
    for si in (md.storage_data or {}).values():
        rel = getattr(si, "relative_path", None)
        if rel is not None:
            need[rel] = max(need.get(rel, 0), int(si.offset) + int(si.length))
    return need


def _rng_files(info: dict) -> list[str]:
    world = info.get("world_size", 0)
    return [f"rng/rank-{r}.pt" for r in range(world if type(world) is int and 0 <= world <= 1 << 20 else 0)]


def _needed_files(md: Metadata, info: dict) -> list[str]:
    return [*_shard_extents(md), *_rng_files(info)]


def missing_files(md: Metadata, info: dict, sizes: dict[str, int]) -> str | None:
    """None if ``sizes`` (file → bytes present, by path relative to the step) holds every shard
    byte the metadata points at and every rank's RNG file the marker counts, else what lacks."""
    for rel, size in _shard_extents(md).items():
        if rel not in sizes:
            return f"shard {rel} missing"
        if sizes[rel] < size:
            return f"shard {rel} truncated ({sizes[rel]} < {size} bytes)"
    for rel in _rng_files(info):
        if rel not in sizes:
            return f"{rel} missing"
    return None


def latest_valid(directory: str | os.PathLike) -> tuple[int, Path] | None:
    """Newest committed checkpoint in a directory that validates (damaged ones are logged and skipped)."""
    found = latest_valid_in(VolumeStore(directory))
    return (found[0], Path(found[1])) if found else None


def latest_valid_in(store) -> tuple[int, str] | None:
    """Newest committed checkpoint of a store (volume or object) that validates."""
    for step in store.committed_steps():
        why = store.validate(step)
        if why is None:
            return step, store.step_url(step)
        log.warning("checkpoint %s is damaged (%s); falling back to the previous one", store.step_url(step), why)
    return None


def _rng_state() -> dict:
    """Tensors and primitives only, so ``torch.load(weights_only=True)`` reads it back."""
    st = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        name, keys, pos, has_gauss, cached = np.random.get_state()
        st["numpy"] = {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state()
    return st


def _set_rng_state(st: dict) -> None:
    torch.set_rng_state(st["torch"])
    version, state, gauss = st["python"]
    random.setstate((version, tuple(state), gauss))
    if "numpy" in st:
        import numpy as np

        n = st["numpy"]
        np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                             n["cached_gaussian"]))
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state(st["cuda"])


def load_rng(path: Path) -> bool:
    """Restore this rank's RNG from ``path`` with ``weights_only=True``; a file that needs more
    (an older runtime's numpy arrays, or anything crafted) is refused and the seeded RNG kept."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        log.warning("RNG state %s not restored (%s); this rank keeps its seeded RNG", path, e)
        return False
    return load_rng_bytes(data, path)


def load_rng_bytes(data: bytes, name: object) -> bool:
    """:func:`load_rng` of the file's bytes (``name`` for the log)."""
    try:
        _set_rng_state(torch.load(io.BytesIO(data), weights_only=True))
    except Exception as e:  # noqa: BLE001 — an unreadable RNG file must not stop the resume
        log.warning("RNG state %s not restored (%s: %s); this rank keeps its seeded RNG",
                    name, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        return False
    return True


def _torch_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def read_marker(path: Path) -> dict | None:
    """A checkpoint's COMMITTED marker (JSON, at most MARKER_MAX_BYTES), None if unreadable."""
    try:
        with open(path / COMMIT_MARKER, "rb") as f:
            raw = f.read(MARKER_MAX_BYTES + 1)
        info = json.loads(raw) if len(raw) <= MARKER_MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


# DCP's metadata pickle names these globals, and nothing else may be constructed from it.
_METADATA_GLOBALS = {("torch.distributed.checkpoint.metadata", n) for n in (
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
    "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
    ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
    ("collections", "OrderedDict")}


def _enum_member(cls: object, name: str) -> object:
    """``getattr`` for the unpickler: some Pythons (3.11.2, the runtime image's) pickle an enum
    member as ``getattr(EnumClass, "NAME")``; only public members of the allowed enums."""
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum) and isinstance(name, str) and name in cls.__members__):
        raise pickle.UnpicklingError(f"checkpoint metadata asks for {cls!r}.{name!r}: refused, not an enum member")
    return cls.__members__[name]


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) == ("builtins", "getattr"):
            return _enum_member  # its first argument can only be an allowed class (find_class)
        # torch.__dict__, not getattr: no lazy submodule import for an arbitrary name.
        if (module, name) in _METADATA_GLOBALS or (module == "torch" and isinstance(torch.__dict__.get(name), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}: refused, not DCP metadata")


class _SafeMetadata:
    """``.metadata`` unpickled with DCP's metadata classes only."""

    def read_metadata(self, *args, **kwargs) -> Metadata:
        rank = kwargs.get("rank")
        name = ".metadata" if rank is None else f"__{rank}.metadata"
        with self.fs.create_stream(self.fs.concat_path(self.path, name), "rb") as f:
            metadata = _MetadataUnpickler(f).load()
        if not isinstance(metadata, Metadata):
            raise pickle.UnpicklingError(f"checkpoint metadata is a {type(metadata).__name__}")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafeReader(_SafeMetadata, FileSystemReader):
    """DCP's FileSystemReader, but ``.metadata`` is unpickled with DCP's metadata classes only."""


class SafeFsspecReader(_SafeMetadata, FsspecReader):
    """DCP's FsspecReader (object storage), with the same safe metadata."""


def _weights_only(planner_class):
    """``planner_class`` loading DCP's non-tensor entries (trainer state, optimizer scalars) with
    ``weights_only=True``; DCP's own planners unpickle them with weights_only=False."""

    class WeightsOnly(planner_class):
        def load_bytes(self, read_item, value) -> None:
            obj = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    WeightsOnly.__name__ = f"WeightsOnly{planner_class.__name__}"
    return WeightsOnly


SafeLoadPlanner = _weights_only(DefaultLoadPlanner)
SafeEmptyLoadPlanner = _weights_only(_EmptyStateDictLoadPlanner)


def _make_dir(path: Path) -> None:
    """The checkpoint dir, or an error that says which volume must be writable."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise type(e)(e.errno, f"cannot create the checkpoint dir {path} ($PHALANX_CHECKPOINT_DIR): {e.strerror} "
                               "(in a pod it is on spec.checkpoint.volume, which the pod's user must be able to write)") from e


class VolumeStore:
    """A job's checkpoint directory on a volume: each save is written into ``.tmp-step-<N>`` and
    renamed to ``step-<N>`` when committed. The object-storage twin is
    :class:`~phalanx_runtime.components.objectstore.ObjectStore`; the Checkpointer calls both
    the same way (rank 0 alone for what changes shared state, except each rank's RNG file)."""

    begin_is_collective = False
    commits_in_background = False  # TieredStore: its uploads commit
    restored = None  # TieredStore: which files a resume read from the pod's copy

    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self.uri = str(self.dir)

    def step_url(self, step: int) -> str:
        return str(self.dir / f"step-{step}")

    def _tmp(self, step: int) -> Path:
        return self.dir / f"{TMP_PREFIX}{step}"

    def prepare(self) -> None:
        _make_dir(self.dir)
        for p in self.dir.glob(TMP_PREFIX + "*"):
            log.info("removing uncommitted checkpoint %s", p)
            shutil.rmtree(p, ignore_errors=True)

    def committed_steps(self) -> list[int]:
        return committed_steps(self.dir)

    def validate(self, step: int) -> str | None:
        return validate_checkpoint(self.step_url(step))

    def read_marker(self, step: int) -> dict | None:
        return read_marker(Path(self.step_url(step)))

    def read_rng(self, step: int, rank: int) -> bytes | None:
        try:
            return (Path(self.step_url(step)) / "rng" / f"rank-{rank}.pt").read_bytes()
        except OSError:
            return None

    def begin(self, step: int, rank: int) -> None:
        """Before any rank writes ``step`` (rank 0's stale ones were removed at start)."""
        (self._tmp(step) / "rng").mkdir(parents=True, exist_ok=True)

    def put_rng(self, step: int, rank: int, data: bytes) -> None:
        (self._tmp(step) / "rng" / f"rank-{rank}.pt").write_bytes(data)

    def writer(self, step: int):
        return _writer(FileSystemWriter, str(self._tmp(step)), sync_files=True)

    def reader(self, step: int):
        return SafeReader(self.step_url(step))

    def commit(self, step: int, info: dict) -> None:
        tmp, final = self._tmp(step), Path(self.step_url(step))
        with open(tmp / COMMIT_MARKER, "w") as f:
            json.dump(info, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if final.exists():  # a damaged checkpoint of the same step, skipped at resume
            self._trash(final, f"step-{step}")
        os.rename(tmp, final)
        _fsync_dir(self.dir)

    def _trash(self, path: Path, name: str) -> None:
        trash = self.dir / f".old-{name}-{os.getpid()}"
        os.rename(path, trash)  # gone from the committed set at once
        shutil.rmtree(trash, ignore_errors=True)

    def uncommit(self, step: int) -> None:
        try:
            self._trash(Path(self.step_url(step)), f"step-{step}")
        except OSError:
            pass

    def put_tree(self, local: Path, rel: str) -> None:
        """Replace ``rel`` (a directory) with ``local``, moved in by a rename."""
        final = self.dir / rel
        if final.exists():
            self._trash(final, rel)
        os.rename(local, final)

    def scratch(self, rel: str) -> Path:
        """A fresh directory on the same volume, for :meth:`put_tree` to rename into place."""
        tmp = self.dir / f".tmp-{rel}"
        shutil.rmtree(tmp, ignore_errors=True)
        return tmp

    def fetch_published(self, local: Path) -> None:
        """Nothing to fetch: a volume keeps what a run published."""

    def drain(self) -> None:
        """Nothing in the background: a volume's commit is the rename."""

    def publish(self, local: Path) -> None:
        """``local`` next to the checkpoints, unless it is there already (the run's own dir)."""
        if local.is_file() and local.resolve().parent != self.dir.resolve():
            shutil.copyfile(local, self.dir / local.name)

    def put_file(self, local: Path, rel: str) -> Path:
        out = self.dir / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(local, out)
        return out


def store_for(location: str, local_tier: str | None = None):
    """The store of ``location``: a URI (``s3://``, ``gs://``, …) is object storage, behind the
    pod-local directory ``local_tier`` where one is given; else a path."""
    if is_object_uri(location):
        from phalanx_runtime.components.objectstore import ObjectStore, TieredStore

        return TieredStore(location, local_tier) if local_tier else ObjectStore(location)
    return VolumeStore(location.removeprefix("file://"))


@dataclass
class CheckpointConfig:
    directory: str
    interval_steps: int = 0
    keep_last: int = 3
    async_save: bool = True
    resume: bool = True
    export_consolidated: bool = False
    local_tier: str | None = None  # object storage: the pod-local directory saves go to first

    @classmethod
    def from_spec(cls, spec_ckpt, directory: str, local_dir: str | None = None) -> CheckpointConfig:
        """``local_dir``: the pod's checkpoint dir, the local tier of object storage unless
        ``storage.localTier.enabled`` is false (a job without storage: on by default)."""
        tier = spec_ckpt.storage.local_tier.enabled if spec_ckpt.storage is not None else True
        return cls(directory=directory, interval_steps=spec_ckpt.interval_steps, keep_last=spec_ckpt.keep_last,
                   async_save=spec_ckpt.async_save, resume=spec_ckpt.resume,
                   export_consolidated=spec_ckpt.export_consolidated,
                   local_tier=os.path.join(local_dir, "tier") if local_dir and tier and directory != local_dir else None)


class Checkpointer:
    """Save / restore model parts, optimizer, scheduler, loader and RNG. Collective: every rank
    calls every method (except :meth:`poll`, which is rank-local) at the same step."""

    def __init__(self, cfg: CheckpointConfig, *, parts, optimizer, scheduler, loader, progress=None,
                 layout: str = "", dp_rank: int = 0, dp_size: int = 1, model_files=None,
                 trainable_only: bool = False, published: tuple[Path, ...] = ()):
        self.cfg = cfg
        # Files rank 0 copies next to the checkpoints after each commit and at close where they are
        # not there already (object storage: metrics.jsonl, which `phalanx plot <uri>` reads).
        self.published = tuple(published)
        # model_files(dir) writes what model this is (MODEL_DIR); rank 0 calls it at the first save.
        self.model_files = model_files
        self.trainable_only = trainable_only
        self.store = store_for(cfg.directory, cfg.local_tier)
        # A volume's directory (exports and the LoRA base check read it); None on object storage.
        self.dir = self.store.dir if isinstance(self.store, VolumeStore) else None
        self.parts, self.optimizer, self.scheduler, self.loader = list(parts), optimizer, scheduler, loader
        self.progress = progress
        self.layout = layout
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.dp_rank, self.dp_size = dp_rank, dp_size
        # Own gloo group for DCP (async saves run collectives from a thread while training uses
        # the default group).
        self.pg = new_gloo_group()
        self._pending = None  # (future, step)
        self._saved_step: int | None = None  # the last step written (committed, or being uploaded)
        self._upload_wait = 0.0  # how long the last save waited for the previous save and upload
        self._staging = None  # staging future of the in-flight async save
        self.last: dict | None = None  # {"step", "path", "time"}
        self.stall_seconds: list[float] = []  # time training was blocked per save
        self.save_seconds: list[float] = []  # total time per save (until committed)
        self._t_start: dict[int, float] = {}
        self.job_uid = os.environ.get(ENV_JOB_UID) or None  # the operator's job; None locally
        self.resumed_from: dict | None = None  # {"uid", "step"} when resuming another uid's checkpoint
        if self.rank == 0:
            self.store.prepare()
            for path in self.published:  # a new pod's empty dir goes on from the copy (the log's history)
                self.store.fetch_published(Path(path))
        dist.barrier(group=self.pg)

    # ---------------------------------------------------------------- state dicts

    def _model(self):
        if len(self.parts) != 1:
            # check_layout refuses such jobs before any process starts; this guards direct callers.
            raise ValueError("checkpoints of several model parts per rank (virtual pipeline stages) "
                             "are not supported: use virtualStages 1 with checkpointing")
        return self.parts[0]

    def _optim(self):
        opt = self.optimizer
        if opt.__class__.__name__ == "ZeroRedundancyOptimizer":
            # ZeRO-1: the local shard's AdamW; its keys (FQNs) are disjoint across ranks.
            return opt.optim
        return opt

    def _options(self, **kw):
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(flatten_optimizer_state_dict=True, **kw)

    def _saved_options(self):
        """What a checkpoint holds of the model: every parameter, or (``trainable_only``) the
        trainable ones, loaded non-strictly since the frozen rest is not in the checkpoint (DCP
        still refuses a checkpoint that lacks any trainable one)."""
        if self.trainable_only:
            return self._options(ignore_frozen_params=True, strict=False)
        return self._options()

    def state_dict(self, step: int) -> dict:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(self._model(), self._optim(), options=self._saved_options())
        return {"model": msd, "optim": osd,
                "trainer": {"step": step, "scheduler": self.scheduler.state_dict(),
                            "loader": self.loader.state_dict()}}

    def _partition_replicas(self, sd: dict) -> dict:
        """DDP / ZeRO-1 (no DTensor): model and optimizer tensors are replicated over the data-
        parallel group, and DCP would keep one copy of each anyway. Assign each to one dp rank
        up front (greedy by bytes, same answer on every rank) so a rank stages and writes only
        its share: async staging copies 1/dp of the state instead of all of it."""
        from torch.distributed.tensor import DTensor

        if self.dp_size <= 1:
            return sd
        # ZeRO-1's optimizer state is already disjoint per rank: only the model is replicated.
        parts = ("model",) if self._optim() is not self.optimizer else ("model", "optim")
        flat = {(part, k): v for part in parts for k, v in sd[part].items()}
        if any(isinstance(v, DTensor) for v in flat.values()):
            return sd
        load = [0] * self.dp_size
        owner = {}
        for key in sorted((k for k, v in flat.items() if torch.is_tensor(v)),
                          key=lambda k: (-flat[k].numel() * flat[k].element_size(), k)):
            r = min(range(self.dp_size), key=lambda i: (load[i], i))
            owner[key] = r
            load[r] += flat[key].numel() * flat[key].element_size()
        out = dict(sd)
        for part in parts:
            out[part] = {k: v for k, v in sd[part].items() if owner.get((part, k), self.dp_rank) == self.dp_rank}
        return out

    # ---------------------------------------------------------------- save

    def should_save(self, step: int, total: int) -> bool:
        iv = self.cfg.interval_steps
        return step == total or (iv > 0 and step % iv == 0)

    def save(self, step: int, *, force_sync: bool = False) -> None:
        """Save at ``step`` (after the optimizer step). Async unless disabled or ``force_sync``."""
        import torch.distributed.checkpoint as dcp

        t0 = time.perf_counter()
        self.wait()  # one save in flight at a time
        self.store.drain()  # and one upload: a local tier that the bucket cannot keep up with waits
        # training is blocked while the previous save or upload finishes: that is stall too
        self._upload_wait = time.perf_counter() - t0
        if self._saved_step == step:
            self._upload_wait = 0.0
            return
        if self.model_files is not None and self.rank == 0:
            self._write_model_files()
        t0 = time.perf_counter()
        self._t_start[step] = t0
        self.store.begin(step, self.rank)
        if self.store.begin_is_collective:  # rank 0 cleared an earlier run's step before anyone writes
            dist.barrier(group=self.pg)
        self.store.put_rng(step, self.rank, _torch_bytes(_rng_state()))
        t1 = time.perf_counter()
        sd = self._partition_replicas(self.state_dict(step))
        t2 = time.perf_counter()
        writer = self.store.writer(step)
        if self.cfg.async_save and not force_sync:
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            # Staging (the copy to host memory) runs in a thread too, overlapping the next step's
            # forward/backward; before_update() waits for it before the optimizer changes anything.
            stager = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                                  use_async_staging=True, use_non_blocking_copy=False))
            resp = dcp.async_save(sd, storage_writer=writer, process_group=self.pg, async_stager=stager)
            if hasattr(resp, "upload_completion"):
                self._staging, fut = resp.staging_completion, resp.upload_completion
            else:  # staging finished inside async_save
                fut = resp
            fut.add_done_callback(lambda _f, st=stager: st.close())
            self.stall_seconds.append(time.perf_counter() - t0 + self._take_upload_wait())
            log.debug("save step %d: rng %.1f ms, state dict %.1f ms, staging %.1f ms", step, 1e3 * (t1 - t0),
                      1e3 * (t2 - t1), 1e3 * (time.perf_counter() - t2))
            self._pending = (fut, step)
        else:
            dcp.save(sd, storage_writer=writer, process_group=self.pg)
            self.stall_seconds.append(time.perf_counter() - t0 + self._take_upload_wait())
            self._commit(step)

    def _take_upload_wait(self) -> float:
        waited, self._upload_wait = self._upload_wait, 0.0
        return waited

    def _write_model_files(self) -> None:
        """Replace ``model/`` with this run's (the directory may hold an earlier run's). A failure
        is logged, not raised: the checkpoint itself is still good (and rank 0 alone is here)."""
        try:
            tmp = self.store.scratch(MODEL_DIR)
            self.model_files(tmp)
            self.store.put_tree(tmp, MODEL_DIR)
        except Exception as e:  # noqa: BLE001 — the model record is for exports, not for training
            log.warning("could not record the model in %s/%s (%s: %s): exporting these checkpoints will need it",
                        self.store.uri, MODEL_DIR, type(e).__name__, e)
        self.model_files = None

    @contextmanager
    def model_record(self):
        """A local directory whose ``model/`` is the record of what model the checkpoints hold
        (downloaded from object storage; the volume's own directory otherwise)."""
        if self.dir is not None:
            yield self.dir
            return
        with tempfile.TemporaryDirectory(prefix="phalanx-model-record-") as tmp:
            self.store.get_tree(MODEL_DIR, Path(tmp) / MODEL_DIR)
            yield Path(tmp)

    def before_update(self) -> None:
        """Call before ``optimizer.step()``: an async save's staging copy must be complete before
        parameters or optimizer state change. The wait counts as stall."""
        if self._staging is not None:
            t0 = time.perf_counter()
            self._staging.result()
            self._staging = None
            if self.stall_seconds:
                self.stall_seconds[-1] += time.perf_counter() - t0

    def poll(self) -> None:
        """Commit a finished async save (rank-local, cheap): call at step boundaries."""
        if self._pending is not None and self._pending[0].done():
            self.wait()

    def wait(self) -> None:
        """Block until the in-flight async save is written, then commit it."""
        if self._pending is None:
            return
        self.before_update()
        fut, step = self._pending
        self._pending = None
        fut.result()  # raises if the write failed: the checkpoint stays uncommitted
        self._commit(step)

    def _commit(self, step: int) -> None:
        """Every rank's shards of ``step`` are written: DCP's coordinator wrote .metadata after
        gathering all write results, and every rank's save returned only after that. Commit (rank
        0), or with a local tier hand the files to the uploads, which commit in the bucket."""
        self._saved_step = step
        info = {"step": step, "world_size": self.world, "layout": self.layout, "time": _utc_now(),
                "job_uid": self.job_uid, "job_name": os.environ.get(ENV_JOB_NAME)}
        if self.store.commits_in_background:
            self.store.upload(step, self.rank, self.world, info if self.rank == 0 else None, self._uploaded)
            return
        self._committed(step, info["time"])
        if self.rank == 0:
            self.store.commit(step, info)
            self._after_commit(step)

    def _committed(self, step: int, when: str) -> None:
        self.save_seconds.append(time.perf_counter() - self._t_start.pop(step, time.perf_counter()))
        self.last = {"step": step, "path": self.store.step_url(step), "time": when}

    def _after_commit(self, step: int) -> None:
        """Rank 0, once ``step`` is committed where it lasts."""
        log.info("checkpoint step %d committed at %s", step, self.last["path"])
        self._publish()
        if self.progress is not None:
            self.progress.update(lastCheckpoint=dict(self.last))
        self._prune(step)

    def _uploaded(self, step: int, committed: bool) -> None:
        """The upload thread, when this rank's files of ``step`` are in the bucket (rank 0: and the
        step committed there); a failed upload leaves the last committed step as it was."""
        if self.rank != 0 or committed:
            self._committed(step, _utc_now())
        if committed:
            self._after_commit(step)

    def _prune(self, just: int) -> None:
        """Keep the newest ``keepLast``, and always ``just`` (the one just committed): an earlier
        job's higher steps in the same directory must not prune it."""
        keep = max(self.cfg.keep_last, 1)
        for step in [s for s in self.store.committed_steps() if s != just][keep - 1:]:
            self.store.uncommit(step)

    # ---------------------------------------------------------------- load

    def find_resume(self) -> tuple[int, Path] | None:
        """Rank 0 picks the newest valid committed checkpoint; every rank gets the same answer."""
        found = [latest_valid_in(self.store) if (self.rank == 0 and self.cfg.resume) else None]
        steps = self.store.committed_steps() if self.rank == 0 and not self.cfg.resume else []
        if steps:
            log.warning("checkpoint.resume is false: starting fresh; the committed checkpoints in %s "
                        "(steps %s) are not loaded", self.store.uri, steps)
        dist.broadcast_object_list(found, src=0, group=self.pg)
        return found[0]

    def load(self, path: str | os.PathLike) -> int:
        """Restore everything from a committed checkpoint (``step-<N>`` of this store); returns its step."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        m = STEP_RE.match(os.path.basename(str(path).rstrip("/")))
        if m is None:
            raise ValueError(f"{path} is not a committed checkpoint (step-<N>)")
        saved = int(m.group(1))
        sd = self.state_dict(0)
        dcp.load(sd, storage_reader=self.store.reader(saved), planner=SafeLoadPlanner(), process_group=self.pg)
        set_state_dict(self._model(), self._optim(), model_state_dict=sd["model"], optim_state_dict=sd["optim"],
                       options=self._saved_options())
        tr = sd["trainer"]
        self.scheduler.load_state_dict(tr["scheduler"])
        self.loader.load_state_dict(tr["loader"])
        rng = self.store.read_rng(saved, self.rank)
        if rng is not None:
            load_rng_bytes(rng, f"{path}/rng/rank-{self.rank}.pt")
        step = int(tr["step"])
        info = self.store.read_marker(saved) or {}
        written = info.get("time")
        self.last = {"step": step, "path": self.store.step_url(saved), "time": written if isinstance(written, str) else None}
        self._saved_step = step
        restored = self.store.restored
        if restored is not None:  # a local tier: which files this rank read from the pod's copy
            log.info("rank %d restored step %d: %d files from the local tier, %d from %s", self.rank, step,
                     restored["local"], restored["remote"], self.store.uri)
        if self.progress is not None:  # resumedStep: the operator's status.resumedStep for this start
            self.progress.update(lastCheckpoint=dict(self.last), resumedStep=step)
        if self.rank == 0:
            log.info("resumed from %s (step %d)", path, step)
        self._note_provenance(info.get("job_uid"), step, path)
        return step

    def _note_provenance(self, writer: object, step: int, path: Path) -> None:
        """Resuming a checkpoint that another job uid wrote (or one with no uid recorded) happens on
        purpose (``checkpoint.resume: true``) but never silently: logged and in the progress."""
        if self.job_uid is None or writer == self.job_uid:
            return
        uid = writer[:128] if isinstance(writer, str) else ""  # the operator takes at most 128
        self.resumed_from = {"uid": uid, "step": step}
        if self.progress is not None:
            self.progress.update(resumedFrom=dict(self.resumed_from))
        if self.rank == 0:
            log.warning("resumed %s (step %d), written by %s, not by this job (uid %s): an earlier job "
                        "of this name; checkpoint.resume: false would start fresh", path, step,
                        f"job uid {uid}" if uid else "a job whose uid was not recorded", self.job_uid)

    def resume(self) -> int:
        """Load the newest valid committed checkpoint if resume is on; returns the start step."""
        found = self.find_resume()
        if found is None:
            return 0
        return self.load(found[1])

    # ---------------------------------------------------------------- end

    def export_consolidated(self) -> Path | None:
        """Rank 0 reads the model of the last committed checkpoint into full tensors and writes
        ``final/model.pt`` (torch.save of a plain state dict: the single-process model's keys)."""
        self.drain()
        out = None
        if self.rank == 0 and self.last is not None:
            from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

            sd: dict = {}
            saved = int(STEP_RE.match(os.path.basename(self.last["path"].rstrip("/"))).group(1))
            _load_state_dict(sd, storage_reader=self.store.reader(saved),
                             planner=SafeEmptyLoadPlanner(keys={"model"}), no_dist=True)
            model = {k: v for k, v in sd["model"].items()}
            tmp = self.store.scratch("final-model.pt")
            torch.save(model, tmp)
            out = self.store.put_file(tmp, "final/model.pt")
            log.info("consolidated model (%d tensors) written to %s", len(model), out)
        dist.barrier(group=self.pg)
        return out

    def dump_full_state(self, path: str | os.PathLike) -> None:
        """Debugging / tests (``$PHALANX_DEBUG_FULL_STATE``): rank 0 writes the full (unsharded)
        model and flattened optimizer state plus trainer state with torch.save. Collective."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(self._model(), self._optim(),
                                  options=self._options(full_state_dict=True, cpu_offload=True))
        if self.rank == 0:
            torch.save({"model": msd, "optim": osd, "scheduler": self.scheduler.state_dict(),
                        "loader": self.loader.state_dict()}, path)
        dist.barrier(group=self.pg)

    def _publish(self) -> None:
        for path in self.published:
            try:
                self.store.publish(Path(path))
            except Exception as e:  # noqa: BLE001 — a copy for plots, not the checkpoint
                log.warning("could not copy %s to %s (%s: %s)", path, self.store.uri, type(e).__name__, e)

    def drain(self) -> None:
        """Every write and upload this rank has done is committed, or has failed."""
        self.wait()
        self.store.drain()

    def close(self) -> None:
        self.drain()
        if self.rank == 0:
            self._publish()
        dist.barrier(group=self.pg)


def _writer(writer_class, path: str, **kwargs):
    """DCP's ``writer_class`` (FileSystemWriter, FsspecWriter); with ``$PHALANX_CHECKPOINT_TEST_WRITE_DELAY``
    (seconds, tests and the chaos benchmark only) each rank pauses after writing its shards, before
    DCP's metadata and the commit — a window in which to kill a rank mid-checkpoint."""
    delay = float(os.environ.get(ENV_CHECKPOINT_TEST_WRITE_DELAY) or 0)
    if delay <= 0:
        return writer_class(path, **kwargs)

    class _SlowWriter(writer_class):
        def write_data(self, plan, planner):
            fut = super().write_data(plan, planner)
            fut.wait()
            time.sleep(delay)
            return fut

    return _SlowWriter(path, **kwargs)
