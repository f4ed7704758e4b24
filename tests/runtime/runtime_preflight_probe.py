"""A rank for ``spawn.run_ranks`` that runs the pre-flight check: ``$PROBE_FAILING_RANK``'s device
check fails (a simulated ECC error), ``$PROBE_SILENT_RANK`` never joins (it sleeps). Each rank
writes its outcome, and its failure report as a pod's termination message would hold it, into
``$PROBE_DIR``."""

import json
import os
import time

import torch

SIMULATED = "CUDA error: uncorrectable ECC error encountered (simulated)"


def preflight_rank(cfg):
    from phalanx_runtime.distributed.process_group import init_distributed
    from phalanx_runtime.failure_report import report_exception
    from phalanx_runtime.preflight import run_preflight

    member = init_distributed()
    out_dir = os.environ["PROBE_DIR"]
    os.environ["PHALANX_NODE_NAME"] = f"node-{member.rank}"
    if member.rank == int(os.environ.get("PROBE_SILENT_RANK", "-1")):
        time.sleep(float(os.environ.get("PROBE_SILENT_SECONDS", "20")))
        return {}
    failing = member.rank == int(os.environ.get("PROBE_FAILING_RANK", "-1"))
    started = time.monotonic()
    try:
        run_preflight(torch.device("cpu"), member.rank, False, cfg.spec.failure_policy.preflight_timeout_seconds,
                      check=lambda device, want_gpu: SIMULATED if failing else None)
        error = None
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        error = f"{type(exc).__name__}: {exc}"
        report = os.path.join(out_dir, f"report-{member.rank}")
        open(report, "w").close()  # a pod's termination log exists before anything writes it
        report_exception(exc, rank=member.rank, path=report)
    outcome = {"rank": member.rank, "error": error, "elapsed": time.monotonic() - started}
    with open(os.path.join(out_dir, f"rank-{member.rank}.json"), "w") as f:
        json.dump(outcome, f)
    return outcome
