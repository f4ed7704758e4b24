"""Run the operator as a plain process (in-cluster or with a kubeconfig).

Two optional companions run next to kopf on its event loop:

- ``--leader-elect``: a Lease elector (phalanx.leader). Every replica watches and indexes (a
  standby is warm); only the holder's job loops decide and write. kopf's own bookkeeping — the
  finalizer its daemons put on each TrainingJob — happens in every replica, idempotently.
- a cluster-wide pod reflector (phalanx.podreflector, started by the startup handler): every
  pod for capacity — in namespaced mode (``-n``) too, so that the gang planner counts the GPUs
  that pods of *other* namespaces hold — and each job's pods in the served namespaces. It is
  synced before kopf's watches start: no job loop ever plans on a partial inventory.

The startup settings (operator config, kubeconfig, elector, namespaces) reach the handlers in
kopf's ``memo`` (phalanx.startup.new_memo).

No tenant's object can stop the process serving the others: kopf's list and watch decode through
phalanx.safejson (an object nested beyond Python's recursion is isolated, not fatal), the Lease is
renewed on a thread of its own (phalanx.leader), and SIGTERM is taken by a thread that ends the
process within its grace period whatever the loop is doing (phalanx.shutdown).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

from prometheus_client import start_http_server

from phalanx import constants
from phalanx.api.manifests import InputError, load_operator_config
from phalanx.shutdown import TerminationGuard

# kopf's liveness endpoint logs every probe through aiohttp's access logger at INFO (a line every
# few seconds per probe); they are DEBUG here, shown with --verbose only.
PROBE_ACCESS_LOGGER = "aiohttp.access"


class _AtDebug(logging.Filter):
    """Re-levels a logger's records to DEBUG (and drops them unless DEBUG is enabled)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:  # a line per pod event drowns the log at scale
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.getLogger(PROBE_ACCESS_LOGGER).addFilter(_AtDebug())


def run_operator(args: argparse.Namespace) -> int:
    guard = TerminationGuard(args.shutdown_grace)
    guard.block()  # before any thread starts: they inherit the mask, so SIGTERM reaches the guard
    if args.kubeconfig:  # before the kubernetes client is imported: it reads $KUBECONFIG once
        os.environ["KUBECONFIG"] = args.kubeconfig
    from phalanx import (
        handlers,  # noqa: F401 - registers the handlers
        startup,
    )
    from phalanx.kube import load_client
    from phalanx.leader import elector_from_args
    from phalanx.metrics import LEADER
    from phalanx.sweep import handlers as _sweep_handlers  # noqa: F401 - registers the TrainingSweep handlers

    configure_logging(args.verbose)
    memo = startup.new_memo(config=load_operator_config(args.config).as_installed(), kubeconfig=args.kubeconfig)
    if getattr(args, "leader_elect", False):
        try:
            memo.leader = elector_from_args(args, load_client(args.kubeconfig))
        except ValueError as exc:
            raise InputError(str(exc)) from exc
    else:
        LEADER.set(1)
    if args.metrics_port:
        start_http_server(args.metrics_port)
    liveness = f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None
    namespaces = None if args.all_namespaces or not args.namespace else list(args.namespace)
    try:
        asyncio.run(_serve(memo, args.kubeconfig, namespaces, liveness, guard))
    finally:
        # kopf has stopped (a signal, or a failure it could not survive): threads still busy
        # (a decide, an API call) must not keep a process without a reconcile loop alive
        guard.exit_within(constants.EXIT_AFTER_STOP_SECONDS, "threads still running after the operator stopped")
    return 0


async def _serve(memo: Any, kubeconfig: str | None, namespaces: list[str] | None, liveness: str | None,
                 guard: TerminationGuard) -> None:
    import kopf

    from phalanx import safejson

    safejson.install_in_kopf()
    stop = asyncio.Event()
    guard.start(asyncio.get_running_loop(), stop)

    memo.namespaces = namespaces  # the pod reflector (started by the startup handler) indexes their jobs' pods
    if namespaces:
        logging.getLogger("phalanx.operator").info(
            "namespaced mode (%s): reading the pods of every namespace for capacity", ", ".join(namespaces))
    scope: dict[str, Any] = {"namespaces": namespaces} if namespaces else {"clusterwide": True}
    leader = memo.leader
    if leader is not None:
        leader.start(asyncio.get_running_loop())  # its own thread: a busy loop cannot starve the renewal
    try:
        await kopf.operator(standalone=True, liveness_endpoint=liveness, memo=memo, stop_flag=stop, **scope)
    finally:
        if leader is not None:
            await leader.release()  # kopf has stopped every job loop: hand over at once
