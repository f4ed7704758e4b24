"""Kubernetes I/O: carry out a reconcile Plan with bounded concurrency. No decisions here."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from phalanx import constants, safejson
from phalanx.decision import Plan
from phalanx.gang.pins import pin_affinity
from phalanx.lifecycle.progress import MAX_BYTES, http_body
from phalanx.lifecycle.refusals import Refusal
from phalanx.metrics import API_REQUESTS, PODS_CREATED
from phalanx.pending import as_sendable

log = logging.getLogger("phalanx.kube")

# A pod's log is read through its kubelet: one that does not answer must not hold the pass long.
LOG_READ_TIMEOUT_SECONDS = 10.0
# Gang-backend objects the operator may create (Volcano/coscheduling PodGroup, Workload API).
CUSTOM_PLURALS = {"PodGroup": "podgroups", "Workload": "workloads"}
_SNAKE_KINDS = {"Pod": "pod", "Service": "service", "ConfigMap": "config_map", "NetworkPolicy": "network_policy"}


class Outcome(Enum):
    """What an API call came to, where the object's absence or presence is an expected answer
    (``Kube._call_expecting``) rather than an error."""

    DONE = 200  # the call went through
    GONE = 404  # not there: deleted already, or never created
    EXISTS = 409  # already exists (a create replayed, or someone else's of that name)
    UNPROCESSABLE = 422  # the change no longer applies (a pod's gate was lifted already)


def expected_outcome(status: int | None, expected: tuple[Outcome, ...]) -> Outcome | None:
    """The named outcome an API error's ``status`` stands for, when the caller expects it;
    None: an error to raise."""
    return next((o for o in expected if o is not Outcome.DONE and o.value == status), None)


def load_client(kubeconfig: str | None = None, pool_size: int = 64) -> client.ApiClient:
    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(cfg)


@dataclass
class Kube:
    """The few API calls the operator makes, run in a thread pool (the client is synchronous)."""

    api: client.ApiClient
    concurrency: int = constants.DEFAULT_POD_CREATE_CONCURRENCY

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.pool = ThreadPoolExecutor(max_workers=max(4, self.concurrency), thread_name_prefix="kube")
        self.gate = asyncio.Semaphore(self.concurrency)

    async def _call(self, verb: str, fn, *args, **kwargs) -> bytes:
        """One API call in the pool. The raw response is read and its connection returned to the
        pool (keep-alive: no new TLS handshake per request); no model deserialisation."""

        def call() -> bytes:
            # a pending body is decoded here, in the pool and past the gate: never more at once
            # than there are requests in flight (phalanx.pending)
            response = fn(*map(as_sendable, args), _preload_content=False, **kwargs)
            try:
                return response.data
            finally:
                response.release_conn()

        async with self.gate:
            API_REQUESTS.labels(verb).inc()
            return await asyncio.get_running_loop().run_in_executor(self.pool, call)

    async def _call_expecting(self, expected: tuple[Outcome, ...], verb: str, fn, *args,
                              **kwargs) -> tuple[Outcome, bytes | None]:
        """``_call``, where an answer in ``expected`` (GONE, EXISTS, UNPROCESSABLE) is an outcome
        the caller acts on, not an error: (outcome, the response body when DONE)."""
        try:
            return Outcome.DONE, await self._call(verb, fn, *args, **kwargs)
        except ApiException as exc:
            outcome = expected_outcome(exc.status, expected)
            if outcome is None:
                raise
            return outcome, None

    async def create(self, obj: dict[str, Any], dry_run: bool = False) -> bool:
        """Create a child; one that exists already (409) counts as done when it is this job's own
        (its owner reference), and is a refusal naming it when it is not: never adopted.
        Returns True if created. ``dry_run``: validated and admitted, not persisted."""
        ns, kind = obj["metadata"]["namespace"], obj["kind"]
        extra = {"dry_run": "All"} if dry_run else {}
        if kind in CUSTOM_PLURALS:
            group, version = obj["apiVersion"].split("/")
            fn, args = self.custom.create_namespaced_custom_object, (group, version, ns, CUSTOM_PLURALS[kind])
        else:
            fn, args = self._core_fn("create", kind), (ns,)
        outcome, _ = await self._call_expecting((Outcome.EXISTS,), "create", fn, *args, obj, **extra)
        if outcome is Outcome.EXISTS:
            await self._require_owned(obj)
            return False
        if kind == "Pod" and not dry_run:
            PODS_CREATED.inc()
        return True

    def _core_fn(self, verb: str, kind: str) -> Callable[..., Any]:
        """``create``/``read`` of a built-in kind the operator creates (Pod, Service, ConfigMap,
        NetworkPolicy)."""
        api = self.networking if kind == "NetworkPolicy" else self.core
        return getattr(api, f"{verb}_namespaced_{_SNAKE_KINDS[kind]}")

    async def _require_owned(self, obj: dict[str, Any]) -> None:
        """``obj`` exists: raise a 409 naming it unless it carries one of ``obj``'s owner uids."""
        owners = {o.get("uid") for o in obj["metadata"].get("ownerReferences") or []}
        if not owners:
            return
        meta = obj["metadata"]
        existing = await self.read(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if existing is not None and owners & owner_uids(existing):
            return
        message = (f"{obj['kind']} {meta['namespace']}/{meta['name']} exists and was not created by this job "
                   "(it has no owner reference to it); the operator never adopts an object: delete or rename it"
                   if existing is not None else f"{obj['kind']} {meta['namespace']}/{meta['name']} is being replaced")
        raise _with_message(message)

    async def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One object of a kind the operator creates; None when absent."""
        if kind in CUSTOM_PLURALS:
            return await self.get_custom(api_version, CUSTOM_PLURALS[kind], namespace, name)
        outcome, raw = await self._call_expecting((Outcome.GONE,), "get", self._core_fn("read", kind), name, namespace)
        return None if outcome is Outcome.GONE else safejson.loads(raw)

    async def served_resources(self, group: str) -> dict[str, list[str]]:
        """Discovery: ``{version: [resource plural, ...]}`` the API server serves for ``group``
        (empty when it serves no version of it)."""
        def get(path: str) -> dict[str, Any]:
            method, url, headers, _, _ = self.api.param_serialize(
                "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
            response = self.api.call_api(method, url, header_params=headers)
            response.read()
            if response.status == 404:
                return {}
            if response.status != 200:
                raise ApiException(status=response.status, reason=response.reason)
            return safejson.loads(response.data)

        loop = asyncio.get_running_loop()
        doc = await loop.run_in_executor(self.pool, get, f"/apis/{group}")
        out: dict[str, list[str]] = {}
        for v in doc.get("versions") or []:
            res = await loop.run_in_executor(self.pool, get, f"/apis/{group}/{v['version']}")
            out[v["version"]] = [r.get("name", "") for r in res.get("resources") or []]
        return out

    async def get_custom(self, api_version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """One namespaced custom object (e.g. a scheduling.k8s.io PodGroup), None when absent."""
        group, version = api_version.split("/")
        outcome, raw = await self._call_expecting((Outcome.GONE,), "get", self.custom.get_namespaced_custom_object,
                                                  group, version, namespace, plural, name)
        return None if outcome is Outcome.GONE else safejson.loads(raw)

    async def list_cluster_custom(self, group: str, version: str, plural: str, limit: int = 100) -> list[dict[str, Any]]:
        """Up to ``limit`` cluster-scoped custom objects (e.g. Kueue Topologies)."""
        raw = await self._call("list", self.custom.list_cluster_custom_object, group, version, plural, limit=limit)
        return list((safejson.loads(raw) or {}).get("items") or [])[:limit]

    async def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        """The namespace's labels as the API server has them now (a list by name: the operator's
        role may list and watch namespaces, not get them); None when it cannot be read."""
        try:
            raw = await self._call("list", self.core.list_namespace, field_selector=f"metadata.name={namespace}")
        except Exception as exc:  # noqa: BLE001 - forbidden, or the API briefly away: the watch's view will do
            log.warning("cannot read namespace %s (%s); using the watch's view", namespace, getattr(exc, "status", exc))
            return None
        items = safejson.loads(raw).get("items") or []
        return dict(items[0]["metadata"].get("labels") or {}) if items else None

    async def update_config_map(self, obj: dict[str, Any]) -> None:
        """Bring an existing ConfigMap to ``obj``'s data and annotations (merge patch)."""
        meta = obj["metadata"]
        body = {"metadata": {"annotations": meta.get("annotations", {})}, "data": obj["data"]}
        await self._call("patch", self.core.patch_namespaced_config_map, meta["name"], meta["namespace"], body)

    async def delete_pod(self, namespace: str, name: str, grace: int | None = None) -> None:
        """Delete a pod (``grace``: seconds instead of its own grace period); one gone already is deleted."""
        extra = {} if grace is None else {"grace_period_seconds": grace}
        await self._call_expecting((Outcome.GONE,), "delete", self.core.delete_namespaced_pod, name, namespace, **extra)

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into a pod's; one gone already needs nothing."""
        await self._call_expecting((Outcome.GONE,), "patch", self.core.patch_namespaced_pod, name, namespace,
                                   {"metadata": {"annotations": annotations}})

    async def dry_run_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The pod as the API server would store it (a server-side dry-run create: validated,
        defaulted, fields of disabled features dropped), not persisted."""
        raw = await self._call("create", self.core.create_namespaced_pod, pod["metadata"]["namespace"], pod,
                               dry_run="All")
        return safejson.loads(raw)

    async def list_nodes(self, page: int = 500) -> list[dict[str, Any]]:
        """Every node, as the API server has it now, read ``page`` at a time (one answer for
        thousands of nodes is tens of MiB in one piece)."""
        nodes: list[dict[str, Any]] = []
        token = None
        while True:
            extra = {"_continue": token} if token else {}
            answer = safejson.loads(await self._call("list", self.core.list_node, limit=page, **extra))
            nodes.extend(answer.get("items") or [])
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return nodes

    async def release_pod(self, namespace: str, name: str, node: str | None) -> bool:
        """Pin to ``node`` and lift the gang gate in one patch. The pin is required node affinity
        on ``metadata.name`` (a gated pod may gain affinity): the scheduler's PreFilter then
        narrows the pod to that one node instead of filtering every node. False when the pod was
        already released (422: its gate is gone, its pin is an earlier one) or is gone."""
        ops: list[dict[str, Any]] = []
        if node:
            ops.append({"op": "add", "path": "/spec/affinity", "value": pin_affinity(node)})
        ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": []})
        outcome, _ = await self._call_expecting((Outcome.GONE, Outcome.UNPROCESSABLE), "patch",
                                                self.core.patch_namespaced_pod, name, namespace, ops)
        if outcome is Outcome.UNPROCESSABLE:  # a gate was already lifted: still pin nothing further
            log.info("%s/%s was already released; this pin is void", namespace, name)
        return outcome is Outcome.DONE

    async def patch_status(self, namespace: str, name: str, status: dict[str, Any], before: dict[str, Any] | None,
                           plural: str = constants.PLURAL) -> None:
        """Write a TrainingJob's (or, ``plural``, a TrainingSweep's) whole status; the keys of
        ``before`` that it no longer has are removed."""
        removed = {k: None for k in (before or {}) if k not in status}
        body = {"status": {**status, **removed}}
        await self._call("patch", self.custom.patch_namespaced_custom_object_status,
                         constants.GROUP, constants.VERSION, namespace, plural, name, body)

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete a TrainingJob (its children go with it); one gone already is deleted."""
        await self._call_expecting((Outcome.GONE,), "delete", self.custom.delete_namespaced_custom_object,
                                   constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name,
                                   body={"propagationPolicy": "Background"})

    async def create_job(self, namespace: str, obj: dict[str, Any]) -> bool:
        """Create a TrainingJob (a sweep's trial). False when one of its name exists already
        (a replayed create; whose it is the sweep reads from its trials' index). A refusal
        (invalid, forbidden) is raised as the API server's ApiException."""
        outcome, _ = await self._call_expecting((Outcome.EXISTS,), "create", self.custom.create_namespaced_custom_object,
                                                constants.GROUP, constants.VERSION, namespace, constants.PLURAL, obj)
        return outcome is Outcome.DONE

    async def suspend_job(self, namespace: str, name: str) -> None:
        """Set a TrainingJob's spec.suspend (a sweep stopping a trial); one gone needs nothing."""
        await self._call_expecting((Outcome.GONE,), "patch", self.custom.patch_namespaced_custom_object,
                                   constants.GROUP, constants.VERSION, namespace, constants.PLURAL, name, {"spec": {"suspend": True}})

    async def create_quarantine(self, obj: dict[str, Any]) -> bool:
        """Create a NodeQuarantine (cluster-scoped); False when the node has one already."""
        outcome, _ = await self._call_expecting((Outcome.EXISTS,), "create", self.custom.create_cluster_custom_object,
                                                constants.GROUP, constants.VERSION, constants.QUARANTINE_PLURAL, obj)
        return outcome is Outcome.DONE

    async def renew_quarantine(self, name: str, expires_at: str) -> None:
        """Move a NodeQuarantine's spec.expiresAt; one deleted meanwhile needs nothing."""
        await self._call_expecting((Outcome.GONE,), "patch", self.custom.patch_cluster_custom_object, constants.GROUP,
                                   constants.VERSION, constants.QUARANTINE_PLURAL, name, {"spec": {"expiresAt": expires_at}})

    async def delete_quarantine(self, name: str, resource_version: str = "") -> bool:
        """Delete a NodeQuarantine, only at ``resource_version`` when given; False when it was gone
        already (an admin cleared it) or changed since (409: the next pass decides on the new one)."""
        preconditions = {"body": {"preconditions": {"resourceVersion": resource_version}}} if resource_version else {}
        outcome, _ = await self._call_expecting((Outcome.GONE, Outcome.EXISTS), "delete",
                                                self.custom.delete_cluster_custom_object, constants.GROUP,
                                                constants.VERSION, constants.QUARANTINE_PLURAL, name, **preconditions)
        return outcome is Outcome.DONE

    async def get_progress(self, pod_ip: str, port: int = constants.PROGRESS_PORT, timeout: float = 2.0) -> bytes | None:
        """Rank 0's progress body, unparsed: it is untrusted (lifecycle.progress.parse_progress).
        None when unreachable, slower than ``timeout``, not 200, or over the size limit."""
        try:
            return await asyncio.wait_for(http_get(pod_ip, port, "/progress"), timeout)
        except (OSError, TimeoutError):
            return None

    async def pod_log_tail(self, namespace: str, name: str, container: str, tail_lines: int,
                           limit_bytes: int, timeout: float = LOG_READ_TIMEOUT_SECONDS) -> bytes | None:
        """The last ``tail_lines`` lines of a pod's container log, at most ``limit_bytes``, unparsed
        (user output: lifecycle.logtail cleans it). None when it cannot be read within ``timeout``
        (the pod gone, no log yet, forbidden, a kubelet not answering): the caller goes on without it."""
        try:
            return await self._call("log", self.core.read_namespaced_pod_log, name, namespace, container=container,
                                    tail_lines=tail_lines, limit_bytes=limit_bytes, _request_timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - a message without the lines is still the message
            log.warning("cannot read the log of %s/%s (%s)", namespace, name, getattr(exc, "status", exc))
            return None

    async def _create_all(self, objs: list[dict[str, Any]], dry_run: bool = False) -> list[Refusal]:
        """Create concurrently; return the API server's refusals (quota, admission, ...)."""
        results = await asyncio.gather(*(self.create(o, dry_run=dry_run) for o in objs), return_exceptions=True)
        refusals = []
        for obj, result in zip(objs, results, strict=True):
            refusal, error = _classify(obj, result)
            if error is not None:
                raise error
            refusals += [refusal] if refusal else []
        return refusals

    async def _create_pods(self, pods: list[dict[str, Any]]) -> list[Refusal]:
        """Slow start as the Job controller's, without its batch barrier: the first pod alone,
        then each success lets one more go beside it (the window doubles per round trip) up to
        ``concurrency`` in flight; a slow request holds its own slot, not the next batch. A
        refusal (quota, a webhook) stops further creates, so it costs at most one window of
        requests, not one per missing pod; the requests in flight are awaited, then the refusals
        returned (an unexpected error is raised)."""
        todo, in_flight = iter(pods), {}
        window, refusals, failure = 1, [], None
        try:
            while True:
                while not (refusals or failure) and len(in_flight) < window:
                    pod = next(todo, None)
                    if pod is None:
                        break
                    in_flight[asyncio.ensure_future(self.create(pod))] = pod
                if not in_flight:
                    break
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    refusal, error = _classify(in_flight.pop(task), task.exception() or task.result())
                    refusals += [refusal] if refusal else []
                    failure = failure or error
                    window = min(window + 1, max(self.concurrency, 1))
        finally:
            for task in in_flight:
                task.cancel()  # only when this coroutine itself was cancelled
        if failure is not None:
            raise failure
        return refusals

    async def force_delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod with grace period 0; one gone already is deleted."""
        await self.delete_pod(namespace, name, grace=0)

    async def _dry_run(self, plan: Plan) -> list[Refusal]:
        """Every new kind of object once (the first pod stands for its gang) with dryRun=All:
        admission and validation answer without anything being created."""
        sample, kinds = [], set()
        for obj in plan.create:
            if _needs_sibling(obj):
                continue  # its admission looks for an object created just before it: a dry run cannot say
            if obj["kind"] not in kinds:
                kinds.add(obj["kind"])
                sample.append(obj)
        return await self._create_all(sample, dry_run=True)

    async def execute(self, namespace: str, plan: Plan, before_status: dict[str, Any] | None, name: str,
                      released: Callable[[bool], None] | None = None) -> list[Refusal]:
        """Deletes first (old attempts must go before new pods take their hostnames), then creates
        (Service and ConfigMap before pods), then releases the gang, then the status.
        Returns the creations the API server refused (nothing is created after a refusal).
        ``released(all_new)`` follows the release: False when a pod had been released already
        (a pass that saw it gated before the watch caught up), so this plan's pins are not real.
        It also follows a pinned creation (pods created with their pins): False when anything
        stopped it — what was created shows in the pod index and holds its nodes from there."""
        if plan.delete_pods or plan.force_delete_pods:
            await asyncio.gather(*(self.delete_pod(namespace, p, plan.delete_grace.get(p)) for p in plan.delete_pods),
                                 *(self.force_delete_pod(namespace, p) for p in plan.force_delete_pods))
        if plan.annotate_pods:
            await asyncio.gather(*(self.annotate_pod(namespace, p, a) for p, a in plan.annotate_pods.items()))
        pinned = bool(plan.pins) and not plan.release and any(o["kind"] == "Pod" for o in plan.create)
        written = False
        try:
            refusals = await self._create(plan)
            written = pinned and not refusals
        finally:
            if pinned and released is not None:
                released(written)  # the pinned creation's booking: written (its TTL runs), or void
        if refusals:
            return refusals
        if plan.release:
            applied = await asyncio.gather(*(self.release_pod(namespace, p, plan.pins.get(p)) for p in plan.release))
            if released is not None:
                released(all(applied))
        if plan.status is not None:
            await self.patch_status(namespace, name, plan.status, before_status)
        if plan.delete_job:
            await self.delete_job(namespace, name)
        return []

    async def _create(self, plan: Plan) -> list[Refusal]:
        """The plan's dry run, ConfigMap updates and creates, in order; stops at the first refusal."""
        if plan.dry_run and plan.create:
            refusals = await self._dry_run(plan)
            if refusals:
                return refusals
        if plan.update:  # before new pods read it
            await asyncio.gather(*(self.update_config_map(o) for o in plan.update))
        refusals: list[Refusal] = []
        for obj in [o for o in plan.create if o["kind"] in CUSTOM_PLURALS]:  # in render order: a PodGroup
            refusals = refusals or await self._create_all([obj])            # names its Workload
        refusals = refusals or await self._create_all([o for o in plan.create if o["kind"] not in ("Pod", *CUSTOM_PLURALS)])
        return refusals or await self._create_pods([o for o in plan.create if o["kind"] == "Pod"])


async def http_get(host: str, port: int, path: str, limit: int = MAX_BYTES + 4096) -> bytes | None:
    """One HTTP/1.0 GET, read to EOF (at most ``limit`` bytes with the headers). A single read()
    returns whatever arrived first — often the headers without the body, when the server sends
    them apart: a progress poll would then read as failed and the step count stall."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        raw = b""
        while len(raw) <= limit:
            chunk = await reader.read(limit + 1 - len(raw))
            if not chunk:
                return http_body(raw)
            raw += chunk
        return None  # larger than any valid report: not read further
    finally:
        writer.close()


def owner_uids(obj: dict[str, Any]) -> set[str]:
    return {o.get("uid") for o in (obj.get("metadata") or {}).get("ownerReferences") or [] if isinstance(o, dict)}


def _with_message(message: str) -> ApiException:
    """An ApiException whose body carries ``message`` as the API server's own would."""
    exc = ApiException(status=409, reason="AlreadyExists")
    exc.body = json.dumps({"message": message})
    return exc


def _classify(obj: dict[str, Any], result: Any) -> tuple[Refusal | None, BaseException | None]:
    """A create's outcome: a refusal (4xx: quota, admission, validation), an error, or neither."""
    if isinstance(result, ApiException) and result.status and 400 <= result.status < 500:
        return Refusal(obj["kind"], obj["metadata"]["name"], result.status, api_message(result)), None
    return None, result if isinstance(result, BaseException) else None


def _needs_sibling(obj: dict[str, Any]) -> bool:
    """A scheduling.k8s.io PodGroup that names its Workload: kube-apiserver's PodGroupWorkloadExists
    admission refuses it (403) unless that Workload exists, which a dry run of both cannot show."""
    return obj["kind"] == "PodGroup" and obj.get("apiVersion", "").startswith(f"{constants.WORKLOAD_API_GROUP}/") \
        and bool((obj.get("spec") or {}).get("podGroupTemplateRef"))


def api_message(exc: ApiException) -> str:
    """The API server's own words for an error (its Status message), else the HTTP reason."""
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(exc.reason)
