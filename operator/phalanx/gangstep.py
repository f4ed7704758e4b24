"""How one job's decide() meets the operator's one gang scheduler (``phalanx.scheduler``): the
gang step reads the job's row of the scheduler's plan (and books it when the gang is released);
the elastic probe asks whether the gang would fit at another size. Both run inside decide(), on
the decide thread, and touch kopf's indexes and the scheduler only on the event loop (``on_loop``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import kopf

from phalanx.api.types import TrainingJob
from phalanx.decision import FindSpare, Fits, GangDecision, GangStep
from phalanx.gang.admission import decision_for, gang_request
from phalanx.gang.inventory import Reservation
from phalanx.gang.planner import GangRequest
from phalanx.gang.spare import Spare, spare_for
from phalanx.offloop import JobGone, on_loop
from phalanx.scheduler import Row


@dataclass
class Indexes:
    """The indexes one job loop reads: kopf's, and the PodReflector's (``job_pods``, ``usage``)."""

    job_pods: Any
    job_services: kopf.Index
    job_config_maps: kopf.Index
    job_network_policies: kopf.Index
    cluster_nodes: kopf.Index
    usage: Any
    priority_classes: kopf.Index
    namespace_labels: kopf.Index
    resource_quotas: kopf.Index


def _values(index: kopf.Index) -> list[Any]:
    return [value for store in index.values() for value in store]


def _priority(job: TrainingJob, priority_classes: kopf.Index) -> int:
    name = job.spec.scheduling.priority_class_name
    return next(iter(priority_classes.get(name, [0]))) if name else 0


def native_gang_step(memo: kopf.Memo, indexes: Indexes) -> GangStep:
    """The reconcile's gang step: this gang's row of the scheduler's plan of every waiting gang;
    pin and release it only if it is placed. It runs inside decide(), on the one decide thread,
    as the scheduler's cycles do, so plans never interleave; what it reads and writes of the
    indexes and the scheduler it does on the event loop (``on_loop``). A gang with no row for its
    request yet (its first plan) is planned at once, by a cycle run from this pass."""
    gangs, scheduler, config = memo.gangs, memo.scheduler, memo.config
    loop = _running_loop()

    def step(job: TrainingJob, pods: list[dict[str, Any]]) -> GangDecision:
        namespace, name = job.metadata.namespace, job.metadata.name
        key = f"{namespace}/{name}"
        request: GangRequest | None = None

        def alive() -> None:
            if loop is not None and not gangs.alive(namespace, name):
                raise JobGone(key)

        def join() -> Row | None:
            nonlocal request
            alive()
            request = gang_request(job, config, _priority(job, indexes.priority_classes))  # reads an index: on the loop
            scheduler.attach(indexes.cluster_nodes, indexes.usage)
            return scheduler.submit(key, request)

        def read() -> tuple[Row | None, list[Any]]:
            alive()
            return scheduler.row(key, request), _values(indexes.cluster_nodes)

        if on_loop(loop, join) is None:
            scheduler.cycle(loop, config, quiet=key)
        row, nodes = on_loop(loop, read)
        if row is None:
            raise JobGone(key)  # left the queue while planned: only a stopped loop does that
        decision = decision_for(job, row.result, pods, nodes, config)
        if decision.release:

            def booked() -> None:
                alive()
                scheduler.book(key, row)

            on_loop(loop, booked)
        return decision

    return step


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def elastic_probe(memo: kopf.Memo, namespace: str, name: str, indexes: Indexes) -> Fits:
    """Could this job's gang be placed at another size? Its own pods count as free (they would be
    replaced); other waiting gangs keep their queue order; nothing is queued, pinned or booked."""
    scheduler, config = memo.scheduler, memo.config
    loop = _running_loop()

    def fits(candidate: TrainingJob) -> bool:
        def request() -> GangRequest:
            scheduler.attach(indexes.cluster_nodes, indexes.usage)
            return gang_request(candidate, config, _priority(candidate, indexes.priority_classes))

        return scheduler.probe(loop, on_loop(loop, request), config)

    return fits


def spare_finder(memo: kopf.Memo, indexes: Indexes) -> FindSpare:
    """A spare node for one node-rank of a placed gang (gang.spare), chosen on the decide thread
    against the scheduler's view (its bookings and the rows it promised to waiting gangs count as
    taken) and booked at once, so no gang planned afterwards is given the same node."""
    scheduler, config = memo.scheduler, memo.config
    loop = _running_loop()

    def find(job: TrainingJob, rank: int, keep: tuple[str, ...], lost: str) -> Spare:
        key = f"{job.metadata.namespace}/{job.metadata.name}"

        def snapshot() -> tuple[GangRequest, tuple[list[Any], list[Any], list[Reservation]]]:
            scheduler.attach(indexes.cluster_nodes, indexes.usage)
            return gang_request(job, config, _priority(job, indexes.priority_classes)), scheduler.spare_inputs()

        request, (nodes, pods, held) = on_loop(loop, snapshot)
        spare = spare_for(request, nodes, pods, held, config.topology, keep, lost)
        if spare.node is not None:
            booking = [Reservation(gang=key, node=spare.node, requests=request.requests)]
            on_loop(loop, lambda: scheduler.hold(f"{key}#node-rank-{rank}", booking))
        return spare

    return find
