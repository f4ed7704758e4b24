"""Run the operator as a plain process (in-cluster or with a kubeconfig).

Two optional companions run next to kopf on its event loop:

- ``--leader-elect``: a Lease elector (phalanx.leader). Every replica watches and indexes (a
  standby is warm); only the holder's job loops decide and write. kopf's own bookkeeping — the
  finalizer its daemons put on each TrainingJob — happens in every replica, idempotently.
- namespaced mode (``-n``): a cluster-wide pod reflector (phalanx.podreflector), so that the
  gang planner counts the GPUs that pods of *other* namespaces hold. It is synced before kopf
  starts: no job loop ever plans on a partial inventory.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

from prometheus_client import start_http_server


def run_operator(args: argparse.Namespace) -> int:
    if args.kubeconfig:  # before the kubernetes client is imported: it reads $KUBECONFIG once
        os.environ["KUBECONFIG"] = args.kubeconfig
    from phalanx import handlers  # registers the handlers
    from phalanx.cli import CliError, load_operator_config
    from phalanx.kube import load_client
    from phalanx.leader import elector_from_args
    from phalanx.metrics import LEADER

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # a line per pod event drowns the log at scale
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    handlers.State.kubeconfig = args.kubeconfig
    handlers.State.config = load_operator_config(args.config)
    if getattr(args, "leader_elect", False):
        try:
            handlers.State.leader = elector_from_args(args, load_client(args.kubeconfig))
        except ValueError as exc:
            raise CliError(str(exc)) from exc
    else:
        LEADER.set(1)
    if args.metrics_port:
        start_http_server(args.metrics_port)
    liveness = f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None
    namespaces = None if args.all_namespaces or not args.namespace else list(args.namespace)
    asyncio.run(_serve(handlers, args.kubeconfig, namespaces, liveness))
    return 0


async def _serve(handlers: Any, kubeconfig: str | None, namespaces: list[str] | None, liveness: str | None) -> None:
    import kopf

    from phalanx.kube import load_client
    from phalanx.podreflector import PodReflector

    if namespaces:
        reflector = PodReflector(load_client(kubeconfig, pool_size=2), on_freed=handlers._wake_waiting_gangs)
        reflector.start(asyncio.get_running_loop())
        logging.getLogger("phalanx.operator").info(
            "namespaced mode (%s): reading the pods of every namespace for capacity", ", ".join(namespaces))
        await reflector.synced.wait()
        handlers.State.pod_reflector = reflector
    scope: dict[str, Any] = {"namespaces": namespaces} if namespaces else {"clusterwide": True}
    leader = handlers.State.leader
    campaign = asyncio.create_task(leader.run(), name="leader election") if leader is not None else None
    try:
        await kopf.operator(standalone=True, liveness_endpoint=liveness, **scope)
    finally:
        if campaign is not None:
            campaign.cancel()
            await leader.release()  # kopf has stopped every job loop: hand over at once
