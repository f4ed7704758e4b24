"""Run the operator as a plain process (in-cluster or with a kubeconfig)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from prometheus_client import start_http_server


def run_operator(args: argparse.Namespace) -> int:
    if args.kubeconfig:  # before the kubernetes client is imported: it reads $KUBECONFIG once
        os.environ["KUBECONFIG"] = args.kubeconfig
    import kopf

    from phalanx import handlers  # registers the handlers
    from phalanx.cli import load_operator_config

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # a line per pod event drowns the log at scale
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    handlers.State.kubeconfig = args.kubeconfig
    handlers.State.config = load_operator_config(args.config)
    if args.metrics_port:
        start_http_server(args.metrics_port)
    liveness = f"http://0.0.0.0:{args.liveness_port}/healthz" if args.liveness_port else None
    kwargs: dict = {"clusterwide": True} if args.all_namespaces or not args.namespace else {"namespaces": args.namespace}
    asyncio.run(kopf.operator(standalone=True, liveness_endpoint=liveness, **kwargs))
    return 0
