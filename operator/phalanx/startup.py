"""The operator process's start, health and stop, as the kopf handlers in ``phalanx.handlers``
run them: the shared state in kopf's ``memo`` (``new_memo``), kopf's settings, the API client and
pod reflector, the Workload API version served, the gang scheduler's task, the /healthz verdict,
and the pools shut down on cleanup.

``memo`` holds: ``config`` (OperatorConfig), ``kubeconfig``, ``kube`` (kube.Kube), ``leader``
(leader.Elector with --leader-elect, else None), ``namespaces`` (the served ones, None: all),
``pod_reflector`` (podreflector.PodReflector: every pod, and each job's pods), ``gangs`` (the job
loops' shared bookkeeping, jobloop.Gangs), ``scheduler`` (scheduler.Scheduler: the one gang queue
and its published rows; ``scheduler_task`` runs its cycles), ``node_health`` (nodehealth.NodeHealth:
node signals, job evidence, NodeQuarantines; its ``task`` acts on them), ``sweep_wakeups`` (the sweep loops'
wake-ups, controlloop.Wakeups) and ``decider`` (the one thread every ``decide()`` runs on, off
the event loop)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from phalanx import constants, health
from phalanx.api.config import OperatorConfig
from phalanx.backends import workload as workload_backend
from phalanx.controlloop import Wakeups
from phalanx.jobloop import Gangs
from phalanx.kube import Kube, load_client
from phalanx.lifecycle import inplace
from phalanx.metrics import RESTART_IN_PLACE
from phalanx.nodehealth import NodeHealth
from phalanx.offloop import decide_started, new_decider
from phalanx.podreflector import PodReflector
from phalanx.topologywatch import TopologyWatch, read_kueue_topologies

log = logging.getLogger("phalanx.operator")


def new_memo(config: OperatorConfig | None = None, kubeconfig: str | None = None, leader: Any = None) -> kopf.Memo:
    """The operator's startup settings and shared state, handed to ``kopf.operator(memo=...)``."""
    gangs = Gangs()
    return kopf.Memo(config=config or OperatorConfig(), kubeconfig=kubeconfig, kube=None, leader=leader,
                     namespaces=None, pod_reflector=None, gangs=gangs, scheduler=gangs.scheduler, scheduler_task=None,
                     node_health=NodeHealth(changed=gangs.scheduler.changed),
                     sweep_wakeups=Wakeups(), decider=new_decider(), topology_watch=TopologyWatch(), topology_task=None)


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: kopf builds one on every event of every watched resource (a deepcopy of the
    whole body, managedFields included: 7 % of the operator's samples with 64 jobs starting), but
    only change-detecting handlers (on.create/update/delete/field) read it, and this operator
    registers none (its daemons and event handlers decide from the live state). An empty essence
    on both sides: no diff, nothing stored. tests/unit/phalanx/test_startup.py fails if a
    change-detecting handler is ever registered."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, defaults: kopf.Memo) -> None:
    """kopf's settings; ``memo`` completed from ``defaults`` (run without phalanx.main, e.g.
    `kopf run`), its API client, and the pod reflector listed before any job loop runs."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=constants.ANNOTATION_KOPF_PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = constants.FINALIZER
    settings.posting.level = logging.WARNING  # our Events are explicit; no per-handler chatter
    settings.watching.server_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10]
    settings.queueing.worker_limit = 1000
    settings.scanning.disabled = True  # no CRD/namespace scanning: least-privilege RBAC
    for key, value in defaults.items():
        memo.setdefault(key, value)
    memo.scheduler = memo.gangs.scheduler  # one object, whichever of the two a caller's memo had
    memo.kube = Kube(load_client(memo.kubeconfig), concurrency=memo.config.pod_create_concurrency)
    memo.config = memo.config.with_workload_api(await _discover_workload_api(memo.kube))
    if memo.config.restart_in_place:
        memo.config = memo.config.with_restart_all_containers(await _discover_in_place(memo.kube, memo.get("namespaces")))
    if memo.pod_reflector is None:
        memo.pod_reflector = await _start_pod_reflector(memo)
    memo.scheduler.quarantined = memo.node_health.quarantined
    memo.config = memo.config.model_copy(update={"topology": await read_kueue_topologies(memo.kube, memo.config.topology)})
    if memo.scheduler_task is None:
        memo.scheduler_task = asyncio.create_task(memo.scheduler.run(memo.decider, memo.config), name="phalanx-scheduler")
    if memo.topology_task is None:
        memo.topology_task = asyncio.create_task(
            memo.topology_watch.run(memo.decider, memo.config.topology, memo.scheduler.current_nodes), name="phalanx-topology")


def start_node_health(memo: kopf.Memo) -> None:
    """The node health task, once. Started from a watch's handler, not at start-up: it posts
    Events with ``kopf.event``, which works only in a context kopf set up for its handlers."""
    memo.node_health.start(memo.kube, memo.config.health, memo.leader)  # memo copies share it


async def _start_pod_reflector(memo: kopf.Memo) -> PodReflector:
    """Every pod, listed before any job loop runs (a loop that saw no pods would create them again)."""
    reflector = PodReflector(load_client(memo.kubeconfig, pool_size=2), namespaces=memo.namespaces,
                             on_job=memo.gangs.wake, on_freed=memo.scheduler.changed)
    reflector.start(asyncio.get_running_loop())
    await reflector.synced.wait()
    return reflector


async def _discover_workload_api(kube: Kube) -> list[str] | None:
    """Which Workload API version (scheduling.k8s.io) the cluster serves, for the workload backend
    (OperatorConfig.with_workload_api); None when discovery failed."""
    try:
        version = workload_backend.pick_api_version(await kube.served_resources(constants.WORKLOAD_API_GROUP))
    except Exception:  # noqa: BLE001 - discovery refused or failed: render the newest shape
        log.warning("Workload API discovery failed; assuming scheduling.k8s.io/%s", workload_backend.LATEST, exc_info=True)
        return None
    log.info("Workload API: %s", f"scheduling.k8s.io/{version}" if version else "not served")
    return [version] if version else []



async def _discover_in_place(kube: Kube, namespaces: list[str] | None) -> bool:
    """Whether gangs can restart in place (OperatorConfig.with_restart_all_containers): the API
    server keeps a RestartAllContainers rule (a dry-run create of a probe pod) and every node's
    kubelet declares the feature. A probe refused for another reason (a webhook, a quota, RBAC)
    says nothing of the feature: the nodes decide then — a gang pod whose rules the API server
    dropped carries none and is recreated on failure, so a wrong guess costs nothing. False when
    the nodes cannot be read."""
    namespace = (namespaces or ["default"])[0]
    kept: bool | None
    try:
        kept = inplace.rules_kept(await kube.dry_run_pod(inplace.probe_pod(namespace)))
    except ApiException as exc:
        kept = False if exc.status == 422 else None  # 422: the API server refuses the rule itself
        log.warning("in-place restart probe in namespace %s answered %s %s", namespace, exc.status, exc.reason)
    except Exception:  # noqa: BLE001 - the API server unreachable: gangs recreate
        log.warning("in-place restart discovery failed; gangs restart by recreating their pods", exc_info=True)
        kept = False
    try:
        lacking = inplace.nodes_lacking(await kube.list_nodes()) if kept is not False else []
    except Exception:  # noqa: BLE001 - refused or failed: gangs recreate
        log.warning("in-place restart discovery could not list the nodes; gangs restart by recreating their pods",
                    exc_info=True)
        kept, lacking = False, []
    on, why = inplace.in_place_verdict(kept, lacking)
    RESTART_IN_PLACE.set(1 if on else 0)
    (log.info if on or kept is False else log.warning)("in-place restarts: %s", why)
    return on


def problems(memo: kopf.Memo) -> list[str]:
    """Why /healthz fails: a watch or a thread the job loops need is gone (empty: healthy)."""
    now = time.monotonic()
    tasks = [health.TaskView(t.get_name(), t.done()) for t in asyncio.all_tasks()]
    watchers = frozenset(t.name for t in tasks if t.name.startswith(health.WATCHER_PREFIX) and not t.done)
    memo.watchers_seen = memo.get("watchers_seen", frozenset()) | watchers  # scanning is off: a fixed set
    reflector = memo.get("pod_reflector")
    started = decide_started[0]
    scheduler_task = memo.get("scheduler_task")
    stopped = ["the gang scheduler's task has stopped"] if scheduler_task is not None and scheduler_task.done() else []
    health_task = memo.node_health.task if memo.get("node_health") is not None else None
    stopped += ["the node health task has stopped"] if health_task is not None and health_task.done() else []
    return health.watcher_problems(tasks, memo.watchers_seen) + stopped + health.thread_problems(
        reflector.thread.is_alive() if reflector is not None and reflector.thread is not None else None,
        now - reflector.failing_since if reflector is not None and reflector.failing_since else None,
        now - started if started is not None else None)


def shutdown(memo: kopf.Memo) -> None:
    """The scheduler stops; the API and decide pools stop taking work (a busy thread must not
    hold the exit)."""
    for task in ("scheduler_task", "topology_task"):
        if memo.get(task) is not None:
            memo[task].cancel()
    if memo.get("node_health") is not None:
        memo.node_health.stop()
    if memo.get("kube") is not None:
        memo.kube.pool.shutdown(wait=False, cancel_futures=True)
    if memo.get("decider") is not None:
        memo.decider.shutdown(wait=False, cancel_futures=True)
