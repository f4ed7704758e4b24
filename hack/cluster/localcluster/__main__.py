"""``python -m localcluster up|down|status|nodes``.

up      start the control plane detached, write <work-dir>/kubeconfig, cluster.json and
        cluster.pid, create the topology's kwok nodes (default small-4; --topology none
        for none). --features workload (comma-separated) turns on alpha feature sets (see
        localcluster.cluster.FEATURES). Exits 0 at once if one already runs there.
down    stop the cluster recorded in <work-dir>/cluster.json.
status  print the recorded cluster's state as JSON; exit 1 when it is not running.
nodes   create a topology's nodes in the running cluster (or in --kubeconfig's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .cluster import ClusterError, LocalCluster, default_work_dir
from .nodes import create_nodes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["up", "down", "status", "nodes"])
    ap.add_argument("--work-dir", default=None, help=f"default {default_work_dir()}")
    ap.add_argument("--bin-dir", default=None, help="default: PHALANX_BIN_DIR or the build cache")
    ap.add_argument("--topology", default="small-4", help="name in hack/cluster/topologies, a path, or 'none'")
    ap.add_argument("--kubeconfig", default=None, help="for `nodes`: target cluster")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--features", default="", help="for `up`: comma-separated feature sets, e.g. workload")
    a = ap.parse_args(argv)

    if a.command == "up":
        existing = LocalCluster.attach(a.work_dir)
        features = [f for f in a.features.split(",") if f]
        if existing is not None and existing.running():
            if sorted(existing.features) != sorted(features):
                print(f"a cluster with features {existing.features or 'none'} already runs there; "
                      "`python -m localcluster down` first", file=sys.stderr)
                return 1
            print(f"already running; export KUBECONFIG={existing.kubeconfig}")
            return 0
        if existing is not None:
            existing.stop()  # stale state: clean leftovers
        try:
            c = LocalCluster(work_dir=a.work_dir, bin_dir=a.bin_dir, stop_at_exit=False, features=features)
        except ClusterError as e:
            print(f"cluster-up failed: {e}", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        try:
            c.start(timeout=a.timeout)
            if a.topology != "none":
                names = create_nodes(c.kubeconfig, a.topology)
                print(f"created {len(names)} kwok nodes from {a.topology}", file=sys.stderr)
        except (ClusterError, Exception) as e:  # noqa: BLE001
            c.stop()
            print(f"cluster-up failed: {e}", file=sys.stderr)
            return 1
        c.detach()
        print(f"cluster up in {time.monotonic() - t0:.1f}s: {c.server}", file=sys.stderr)
        print(f"export KUBECONFIG={c.kubeconfig}")
        return 0

    if a.command == "down":
        c = LocalCluster.attach(a.work_dir)
        if c is None:
            print("no cluster recorded", file=sys.stderr)
            return 0
        c.stop()
        print("cluster stopped", file=sys.stderr)
        return 0

    if a.command == "status":
        c = LocalCluster.attach(a.work_dir)
        if c is None:
            print(json.dumps({"running": False}))
            return 1
        st = c.status()
        st["running"] = c.running()
        print(json.dumps(st, indent=2))
        return 0 if st["ready"] else 1

    # nodes
    kc = a.kubeconfig
    if kc is None:
        c = LocalCluster.attach(a.work_dir)
        if c is None:
            print("no cluster recorded; pass --kubeconfig", file=sys.stderr)
            return 1
        kc = c.kubeconfig
    names = create_nodes(kc, a.topology)
    print(f"{len(names)} nodes ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
