"""The Python client, for notebooks and scripts (docs/python-client.md): a TrainingJob built from
the API's own models, checked as `phalanx validate` checks it, submitted, followed, its rank 0's
log read, waited for, deleted, or run on this machine as `phalanx local` runs it.

    from phalanx.client import Client, training_job

    job = training_job("mnist", image="ghcr.io/me/train:1", command=["python3", "train.py"], nodes=2)
    tj = Client(namespace="team-a")
    tj.submit(job)
    for progress in tj.watch("mnist"):
        print(progress)
    tj.wait("mnist", timeout=3600)

Building, serialising, validating and ``run_local`` need no cluster (nor the kubernetes client,
imported only by :class:`Client`). A refused job raises :class:`~phalanx.validate.InvalidJob`
(client-side, each problem naming its field) or :class:`ApiError` (the API server's own words,
e.g. a CEL rule naming the field); a job that fails raises :class:`JobFailed` from ``wait``.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.api.manifests import load_operator_config
from phalanx.api.slots import Slot, slot_of
from phalanx.api.types import (
    TERMINAL_PHASES,
    ObjectMeta,
    Phase,
    TrainingJob,
    TrainingJobSpec,
    TrainingJobStatus,
)
from phalanx.problems import Problem
from phalanx.validate import InvalidJob, field_path, validate_job
from phalanx.watch import progress_line

__all__ = [
    "ApiError", "Client", "InvalidJob", "JobFailed", "NotFound", "ObjectMeta", "Progress", "TrainingJob",
    "TrainingJobSpec", "default_namespace", "job_from_object", "manifest", "pick_pod", "progress_of",
    "run_local", "training_job", "validate",
]

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_STATUS_FIELDS = {info.alias or name for name, info in TrainingJobStatus.model_fields.items()}


# --- Errors -------------------------------------------------------------------------------------


class ApiError(Exception):
    """The API server refused a call: its HTTP status, reason and message (a CEL or schema refusal
    names the field, e.g. ``spec: Invalid value: ...: nodes × procsPerNode must equal ...``);
    ``causes``: the (field, message) pairs of the Status' details, when it gives them."""

    def __init__(self, what: str, status: int | None, reason: str, message: str,
                 causes: list[tuple[str, str]] | None = None):
        self.status, self.reason, self.message = status, reason, message
        self.causes = causes or []
        super().__init__(f"{what}: {status} {reason}: {message}")


class NotFound(ApiError, LookupError):
    """No such TrainingJob (or pod) in the namespace."""


class JobFailed(RuntimeError):
    """The job ended Failed; ``job`` is its last state, the message its ``status.message``."""

    def __init__(self, job: TrainingJob):
        self.job = job
        message = job.status.message if job.status and job.status.message else "no message"
        super().__init__(f"TrainingJob {job.metadata.name} failed: {message}")


def api_error(exc: Any, what: str) -> ApiError:
    """An :class:`ApiError` (``NotFound`` for 404) from the kubernetes client's ApiException."""
    from phalanx.kube import api_message

    causes = []
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        details = json.loads(exc.body).get("details") or {}
        causes = [(c.get("field", ""), c.get("message", "")) for c in details.get("causes") or []]
    kind = NotFound if exc.status == 404 else ApiError
    return kind(what, exc.status, str(exc.reason), api_message(exc), causes)


# --- Building and checking a job (pure) ---------------------------------------------------------


def training_job(name: str, *, image: str | None = None, command: list[str] | None = None, nodes: int | None = None,
                 namespace: str | None = None, labels: dict[str, str] | None = None,
                 annotations: dict[str, str] | None = None, **spec: Any) -> TrainingJob:
    """A TrainingJob named ``name``; ``spec`` takes any TrainingJobSpec field by its Python or
    wire name (``procs_per_node=8`` or ``procsPerNode=8``), as a value, a dict or a model
    (``resources={"gpus": 8}``). Raises InvalidJob naming each field pydantic refuses; the
    cross-field rules are checked by :func:`validate` (and ``Client.submit``)."""
    fields = {**({"image": image} if image else {}), **spec}
    if command is not None:
        fields["command"] = list(command)
    if nodes is not None:
        fields["nodes"] = nodes
    try:
        spec_model = TrainingJobSpec.model_validate(fields)
    except ValidationError as exc:
        raise InvalidJob([Problem(_wire_path(err["loc"]), err["msg"]) for err in exc.errors()]) from None
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return TrainingJob(metadata=ObjectMeta(**meta), spec=spec_model)


def _wire_path(loc: tuple[Any, ...]) -> str:
    """A TrainingJobSpec error's location under ``spec``, as the wire (and the docs) name it."""
    return field_path(("spec", *(to_camel(part) if isinstance(part, str) else part for part in loc)))


def manifest(job: TrainingJob | dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """The object as the API server receives it: camelCase, only the fields that were set (the
    API server applies every default, as for a YAML manifest), no status. ``namespace`` applies
    where the job names none. A dict is taken as a manifest already (a copy, namespaced)."""
    if isinstance(job, dict):
        obj = copy.deepcopy(job)
        obj.pop("status", None)
        if namespace is not None and isinstance(obj.get("metadata"), dict):
            obj["metadata"].setdefault("namespace", namespace)
        return obj
    meta = job.metadata.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    if namespace is not None:
        meta.setdefault("namespace", namespace)
    spec = job.spec.model_dump(by_alias=True, mode="json", exclude_unset=True, exclude_none=True)
    return {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "metadata": meta, "spec": spec}


def validate(job: TrainingJob | dict[str, Any], config: OperatorConfig | None = None,
             namespace_labels: dict[str, str] | None = None) -> TrainingJob:
    """The job as the operator would take it, or InvalidJob naming every field that is wrong: the
    same verdict as `phalanx validate` (schema, CEL rules, layout, network profiles, policy) under
    ``config`` (default: the operator's defaults) and the namespace's ``namespace_labels``."""
    obj = manifest(job, namespace="default")
    parsed, problems = validate_job(obj, config, namespace_labels)
    if problems or parsed is None:
        raise InvalidJob(problems)
    return parsed


# --- Reading what the API server returns (pure) -------------------------------------------------


def job_from_object(obj: dict[str, Any]) -> TrainingJob:
    """A TrainingJob from the API server's object; status fields this client does not know (an
    operator newer than it) are left out, and a status it cannot read becomes None — the raw
    status stays readable through :func:`progress_of`."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    known = {key: value for key, value in status.items() if key in _STATUS_FIELDS}
    doc = {"apiVersion": obj.get("apiVersion", constants.API_VERSION), "kind": obj.get("kind", constants.KIND),
           "metadata": obj.get("metadata") or {}, "spec": obj.get("spec") or {}}
    job = TrainingJob.model_validate(doc)
    try:
        job.status = TrainingJobStatus.model_validate(known)
    except ValidationError:
        job.status = None
    return job


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Progress:
    """One snapshot of a job's status: phase, step, loss, the metrics its code reports. Every value
    is read defensively from the raw status (``status``): a missing or malformed one is None."""

    name: str
    phase: str
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    tokens_per_second: float | None = None
    epoch: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    resumed_step: int | None = None
    restarts: int = 0
    last_checkpoint: dict[str, Any] | None = None
    message: str | None = None
    status: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase == Phase.SUCCEEDED

    def __str__(self) -> str:
        resumed = f"  resumed from step {self.resumed_step}" if self.resumed_step is not None else ""
        return f"{self.name}  {progress_line(self.status)}{resumed}"  # the watch line names the metrics


def progress_of(name: str, status: Any) -> Progress:
    """A :class:`Progress` from a TrainingJob's raw status (any shape: nothing raises). The
    progress fields carry the progress record's names (ProgressKey)."""
    status = status if isinstance(status, dict) else {}
    key = constants.ProgressKey
    metrics = status.get(key.METRICS)
    metrics = {str(k): float(v) for k, v in (metrics.items() if isinstance(metrics, dict) else ())
               if _number(v) is not None}
    checkpoint, phase, message = status.get(key.LAST_CHECKPOINT), status.get("phase"), status.get("message")
    return Progress(
        name=name, phase=phase if isinstance(phase, str) else Phase.PENDING.value,
        step=_integer(status.get(key.STEP)), total_steps=_integer(status.get(key.TOTAL_STEPS)),
        loss=_number(status.get(key.LOSS)), tokens_per_second=_number(status.get(key.TOKENS_PER_SECOND)),
        epoch=_number(status.get(key.EPOCH)), metrics=metrics, resumed_step=_integer(status.get(key.RESUMED_STEP)),
        restarts=_integer(status.get("restarts")) or 0, last_checkpoint=checkpoint if isinstance(checkpoint, dict) else None,
        message=message if isinstance(message, str) else None, status=status)


def _changed(before: Progress | None, now: Progress) -> bool:
    """A change a reader would see: the status line, a metric, the resumed step or the message."""
    return before is None or (progress_line(before.status), before.metrics, before.resumed_step, before.message) != \
        (progress_line(now.status), now.metrics, now.resumed_step, now.message)


def _attempt_of(pod: dict[str, Any]) -> int:
    try:
        return int(pod["metadata"]["labels"][constants.LABEL_RESTART_ATTEMPT])
    except (KeyError, TypeError, ValueError):
        return -1


def pick_pod(pods: list[dict[str, Any]], slot: Slot, attempt: int | None, owner_uid: str | None = None) -> dict[str, Any] | None:
    """The pod of ``slot`` (node-rank, or a role's replica) in the job's current ``attempt``
    (status.restartAttempt): else its latest attempt's; a pod not being deleted before one that
    is. Pods owned by another object of the same name (``owner_uid`` given) are not the job's."""
    from phalanx.kube import owner_uids

    mine = [p for p in pods if slot_of(p) == slot and (owner_uid is None or owner_uid in owner_uids(p))]
    current = [p for p in mine if _attempt_of(p) == attempt] or mine
    if not current:
        return None
    return max(current, key=lambda p: (_attempt_of(p), not p["metadata"].get("deletionTimestamp"),
                                       p["metadata"].get("creationTimestamp") or ""))


# --- Running locally ----------------------------------------------------------------------------


def run_local(job: TrainingJob | dict[str, Any], *, json: bool = False, timeout: float | None = None,
              checkpoint_dir: str | Path | None = None, env: dict[str, str] | None = None,
              config: OperatorConfig | None = None) -> dict[str, Any]:
    """Run the job on this machine as `phalanx local` does (one process per pod, the same
    environment), after the same verdict; returns its summary dict. Raises InvalidJob before
    anything starts, and what :func:`phalanx.local.run.run_local` raises (RuntimeError when a node
    fails, Stopped, RunTimeout)."""
    from phalanx.local.env import LocalJob
    from phalanx.local.run import run_local as run_local_job

    checked = validate(job, config)
    local = LocalJob(spec=checked.spec, name=checked.metadata.name, namespace=checked.metadata.namespace)
    return run_local_job(local, json=json, timeout=timeout, checkpoint_dir=checkpoint_dir, env=env)


# --- The cluster --------------------------------------------------------------------------------


def _api_client(kubeconfig: str | Path | None, context: str | None) -> Any:
    """As the operator loads it (phalanx.kube.load_client) when no kubeconfig or context is named:
    in-cluster (a notebook in a pod), else $KUBECONFIG or ~/.kube/config; a named one as given."""
    from kubernetes import client, config

    if kubeconfig is None and context is None:
        from phalanx.kube import load_client

        return load_client(pool_size=4)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context,
                            client_configuration=cfg)
    return client.ApiClient(cfg)


def default_namespace(kubeconfig: str | Path | None = None, context: str | None = None) -> str:
    """The namespace of the credentials :class:`Client` loads: in a pod (none named), the pod's
    own; else the kubeconfig context's (kubectl's); else ``default``."""
    from kubernetes import config

    if kubeconfig is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        with contextlib.suppress(OSError):
            return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    try:
        contexts, active = config.list_kube_config_contexts(config_file=str(kubeconfig) if kubeconfig else None)
    except (config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), active) if context else active
    return (chosen or {}).get("context", {}).get("namespace") or "default"


class Client:
    """TrainingJobs in one namespace, through the kubernetes client.

    ``namespace``: default the kubeconfig context's (in a pod: the pod's); ``kubeconfig`` and
    ``context``: default in-cluster, then $KUBECONFIG or ~/.kube/config; ``api_client``: a
    ready kubernetes ApiClient instead. ``operator_config`` (an OperatorConfig or the path of
    the operator's config YAML — Helm values' ``config``) is what ``submit`` validates against:
    a cluster with its own network profiles or topology levels names them there."""

    def __init__(self, namespace: str | None = None, kubeconfig: str | Path | None = None, *,
                 context: str | None = None, api_client: Any = None,
                 operator_config: OperatorConfig | str | Path | None = None):
        from kubernetes import client

        self.api = api_client if api_client is not None else _api_client(kubeconfig, context)
        self.namespace = namespace or (default_namespace(kubeconfig, context) if api_client is None else "default")
        self.config = operator_config if isinstance(operator_config, OperatorConfig) else \
            load_operator_config(str(operator_config) if operator_config else None)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self.api.close()

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One API call; its ApiException becomes an :class:`ApiError` with the server's words."""
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise api_error(exc, what) from None

    def _raw(self, name: str) -> dict[str, Any]:
        return self._call(f"TrainingJob {self.namespace}/{name}", self.custom.get_namespaced_custom_object,
                          constants.GROUP, constants.VERSION, self.namespace, constants.PLURAL, name)

    # --- jobs ---

    def submit(self, job: TrainingJob | dict[str, Any], *, check: bool = True, dry_run: bool = False) -> TrainingJob:
        """Create the job (in its own namespace, else the client's); returns it as created. With
        ``check``: InvalidJob before anything is sent when :func:`validate` finds problems.
        ``dry_run``: the API server checks and defaults it, stores nothing."""
        obj = manifest(job, namespace=self.namespace)
        if check:
            validate(obj, self.config)
        namespace = obj["metadata"]["namespace"]
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        extra = {"dry_run": "All"} if dry_run else {}
        created = self._call(f"TrainingJob {namespace}/{name}", self.custom.create_namespaced_custom_object,
                             constants.GROUP, constants.VERSION, namespace, constants.PLURAL, obj, **extra)
        return job_from_object(created)

    def get(self, name: str) -> TrainingJob:
        """The job, its status parsed (NotFound when there is none)."""
        return job_from_object(self._raw(name))

    def list(self, label_selector: str | None = None) -> list[TrainingJob]:
        """Every TrainingJob of the namespace (matching ``label_selector``), by name."""
        found = self._call(f"TrainingJobs in {self.namespace}", self.custom.list_namespaced_custom_object,
                           constants.GROUP, constants.VERSION, self.namespace, constants.PLURAL,
                           **({"label_selector": label_selector} if label_selector else {}))
        return sorted((job_from_object(item) for item in found.get("items", [])), key=lambda j: j.metadata.name)

    def progress(self, name: str) -> Progress:
        """The job's progress now: phase, step, loss, metrics (see :class:`Progress`)."""
        return progress_of(name, self._raw(name).get("status"))

    def watch(self, name: str, *, timeout: float | None = None, every: float = 2.0) -> Iterator[Progress]:
        """A :class:`Progress` now and at every change `phalanx watch` would print a line for (or
        of a metric or the resumed step), polling every ``every`` seconds; ends after the one
        that finishes the job (Succeeded or Failed). TimeoutError after ``timeout`` seconds."""
        for _, progress in self._changes(name, timeout, every):
            yield progress

    def _changes(self, name: str, timeout: float | None, every: float) -> Iterator[tuple[dict[str, Any], Progress]]:
        """(the object, its progress) at each change, until the job finishes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            obj = self._raw(name)
            now = progress_of(name, obj.get("status"))
            if _changed(last, now):
                yield obj, now
                last = now
            if now.finished:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"TrainingJob {self.namespace}/{name}: not finished after {timeout:.0f}s "
                                   f"(phase {now.phase})")
            time.sleep(every)

    def wait(self, name: str, timeout: float | None = None, *, every: float = 2.0,
             raise_on_failure: bool = True) -> TrainingJob:
        """Block until the job finishes; returns it when Succeeded. Failed: JobFailed carrying the
        job and its status message (or the job, with ``raise_on_failure=False``). TimeoutError
        after ``timeout`` seconds."""
        final = collections.deque(self._changes(name, timeout, every), maxlen=1)  # the finished job's
        job = job_from_object(final[0][0])
        if raise_on_failure and job.status is not None and job.status.phase == Phase.FAILED:
            raise JobFailed(job)
        return job

    def delete(self, name: str, *, wait: bool = False, timeout: float = 120.0, every: float = 0.5) -> None:
        """Delete the job (NotFound when there is none); the garbage collector removes its pods.
        ``wait``: return once the job and its children are gone (foreground deletion), so the
        name can be submitted again; TimeoutError after ``timeout`` seconds."""
        body = {"propagationPolicy": "Foreground" if wait else "Background"}
        self._call(f"TrainingJob {self.namespace}/{name}", self.custom.delete_namespaced_custom_object,
                   constants.GROUP, constants.VERSION, self.namespace, constants.PLURAL, name, body=body)
        deadline = time.monotonic() + timeout
        while wait:
            try:
                self._raw(name)
            except NotFound:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"TrainingJob {self.namespace}/{name}: still there {timeout:.0f}s after its delete")
            time.sleep(every)

    # --- pods and logs ---

    def pod(self, name: str, rank: int = 0, *, role: str | None = None) -> dict[str, Any]:
        """The pod of node-rank ``rank`` (or of replica ``rank`` of ``role``) in the job's current
        attempt, as the API server returns it; NotFound when it has none (yet)."""
        job = self._raw(name)
        slot = Slot(role or constants.ROLE_WORKER, rank)
        attempt = _integer((job.get("status") or {}).get("restartAttempt"))
        response = self._call(f"pods of TrainingJob {self.namespace}/{name}", self.core.list_namespaced_pod,
                              self.namespace, label_selector=f"{constants.LABEL_JOB_NAME}={name}",
                              _preload_content=False)
        pods = json.loads(response.data).get("items") or []
        found = pick_pod(pods, slot, attempt, (job.get("metadata") or {}).get("uid"))
        if found is None:
            raise NotFound(f"TrainingJob {self.namespace}/{name}", 404, "NotFound", f"no pod of {slot} (yet)")
        return found

    def logs(self, name: str, rank: int = 0, *, role: str | None = None, follow: bool = False,
             tail_lines: int | None = None, container: str = constants.CONTAINER_NAME) -> str | Iterator[str]:
        """The trainer container's log of node-rank ``rank``'s pod (rank 0: the job's progress and
        errors) in the current attempt: the text, or with ``follow`` an iterator of its lines as
        they come (ending when the container stops)."""
        pod = self.pod(name, rank, role=role)["metadata"]["name"]
        extra = {"tail_lines": tail_lines} if tail_lines is not None else {}
        response = self._call(f"log of pod {self.namespace}/{pod}", self.core.read_namespaced_pod_log, pod,
                              self.namespace, container=container, follow=follow, _preload_content=False, **extra)
        if not follow:  # raw bytes: the client would parse a JSON log line and print it back as a dict
            try:
                return response.data.decode(errors="replace")
            finally:
                response.release_conn()
        return _lines(response)


def _lines(response: Any) -> Iterator[str]:
    try:
        for line in response:
            yield line.decode(errors="replace").rstrip("\n")
    finally:
        response.release_conn()
