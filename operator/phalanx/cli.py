"""The `phalanx` command: render | crd | validate | plan | local | data | export | watch | plot | operator."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from phalanx import __version__, constants
from phalanx.api.config import OperatorConfig
from phalanx.api.manifests import (
    InputError,
    document_name,
    dump_yaml_stream,
    load_operator_config,
    read_jobs,
)
from phalanx_common.storage import is_object_uri


def _checked(obj: dict[str, Any], config: OperatorConfig, path: str):
    """The job, or None after printing its problems (phalanx.validate.check_document)."""
    from phalanx.validate import check_document

    job, errors = check_document(obj, config, path)
    for line in errors:
        print(line, file=sys.stderr)
    return job


def _sweep_cli():
    from phalanx.sweep import cli

    return cli


def cmd_render(args: argparse.Namespace) -> int:
    if (code := _sweep_cli().render(args)) is not None:  # a TrainingSweep (phalanx.sweep.cli)
        return code
    from phalanx.render import render_children

    config = load_operator_config(args.config)
    out: list[dict[str, Any]] = []
    status = 0
    for obj in read_jobs(args.job):
        job = _checked(obj, config, args.job)
        if job is None:
            status = 1
            continue
        if not job.metadata.uid:
            job.metadata.uid = "00000000-0000-0000-0000-000000000000"
        out += render_children(job, config, attempt=args.attempt)
    if status:
        return status
    sys.stdout.write(dump_yaml_stream(out))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    if (code := _sweep_cli().validate(args)) is not None:  # a TrainingSweep (phalanx.sweep.cli)
        return code
    config = load_operator_config(args.config)
    bad = 0
    for obj in read_jobs(args.job):
        if _checked(obj, config, args.job) is None:
            bad += 1
        else:
            print(f"{args.job}: TrainingJob {document_name(obj)}: valid")
    return 1 if bad else 0


def cmd_crd(args: argparse.Namespace) -> int:
    if args.docs_tables or args.check:
        return _docs_tables(args)
    from phalanx.api.chartschema import values_schema_json
    from phalanx.api.crd import crd_yaml
    from phalanx.api.reference import api_reference
    from phalanx.policy.admission import admission_policy_template
    from phalanx.policy.reference import policy_reference

    if (sweep_crd := _sweep_cli().crd(args)) is not None:  # --sweep: the TrainingSweep's (phalanx.sweep.cli)
        text = sweep_crd
    elif args.quarantine:
        from phalanx.api.quarantine import quarantine_crd_yaml

        text = quarantine_crd_yaml()
    elif args.reference:
        text = api_reference()
    elif args.policy_reference:
        text = policy_reference()
    elif args.admission_policy:
        text = admission_policy_template()
    elif args.values_schema:
        text = values_schema_json()
    else:
        text = crd_yaml()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _docs_tables(args: argparse.Namespace) -> int:
    from phalanx.docstables import DocsTableError, Sources, update

    if not args.docs_tables:
        print("error: --check goes with --docs-tables FILE...", file=sys.stderr)
        return 2
    try:
        return update(args.docs_tables, Sources(build_parser()), check=args.check)
    except DocsTableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def cmd_plan(args: argparse.Namespace) -> int:
    from phalanx.plan import EXIT_INPUT_ERROR, run_plan

    config = load_operator_config(args.config)
    try:
        jobs = read_jobs(args.job)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if len(jobs) != 1:
        print(f"error: {args.job}: expected one TrainingJob, found {len(jobs)} documents", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if _checked(jobs[0], config, args.job) is None:
        return EXIT_INPUT_ERROR  # the operator's verdict first: it would never plan this job
    levels = args.levels.split(",") if args.levels else None
    code, text = run_plan(jobs[0], args.nodes, pods_yaml=args.pods, levels=levels, json_out=args.json, config=config,
                          quarantine_yaml=args.quarantine)
    print(text)
    return code


def cmd_local(args: argparse.Namespace) -> int:
    if (code := _sweep_cli().local(args)) is not None:  # a TrainingSweep (phalanx.sweep.cli)
        return code
    from phalanx.local.run import LayoutError, run_local

    job = read_jobs(args.job)[0] if args.job != "-" else None
    if job is not None and _checked(job, load_operator_config(args.config), args.job) is None:
        return 1  # the same verdict as the operator's, before any process starts
    if job is not None and not (job.get("spec") or {}).get("command") and _lacks_extra("local"):
        return 1  # the built-in runtime trains with torch
    try:
        run_local(args.job, json=args.json, timeout=args.timeout, checkpoint_dir=args.checkpoint_dir)
    except LayoutError as exc:
        for problem in exc.errors:
            print(f"error: {args.job}: {problem}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # a node failed (1), or the run was stopped (143) or timed out (124)
        print(f"error: {args.job}: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    return 0


def export_argv(args: argparse.Namespace) -> list[str]:
    """The runtime's exporter (``python -m phalanx_runtime.export``), run as a process of its own:
    this package never imports the runtime. Paths go as ``--flag=value`` and after ``--``, so
    one that starts with ``-`` is never read as an option."""
    argv = [sys.executable, "-m", "phalanx_runtime.export", f"--out={args.out}"]
    if args.step is not None:
        argv.append(f"--step={args.step}")
    if args.base:
        argv.append(f"--base={args.base}")
    if args.dtype:
        argv.append(f"--dtype={args.dtype}")
    if args.adapter_only:
        argv.append("--adapter-only")
    elif args.merge_lora:
        argv.append("--merge-lora")
    if args.max_shard_size:
        argv.append(f"--max-shard-size={args.max_shard_size}")
    return [*argv, "--", args.ckpt]


def _lacks_extra(command: str) -> bool:
    """Whether ``command`` misses an extra here (then it says which, phalanx.extras)."""
    from phalanx.extras import extra_problem

    problem = extra_problem(command)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
    return problem is not None


def cmd_export(args: argparse.Namespace) -> int:
    import subprocess

    if _lacks_extra("export"):
        return 1
    try:
        return subprocess.call(export_argv(args))
    except KeyboardInterrupt:
        return 130


def cmd_data(args: argparse.Namespace) -> int:
    """``phalanx data prepare``: the runtime's preparation (``python -m phalanx_runtime.data.prepare``,
    a separate process: this package never imports the runtime) with the same flags."""
    import subprocess

    if _lacks_extra("data prepare"):
        return 1
    argv = [sys.executable, "-m", "phalanx_runtime.data.prepare", f"--out={args.out}", f"--tokenizer={args.tokenizer}",
            f"--text-field={args.text_field}", f"--eval-fraction={args.eval_fraction}"]
    argv += [f"--input={path}" for path in args.inputs] + [f"--eval-input={path}" for path in args.eval_inputs]
    if args.format:
        argv.append(f"--format={args.format}")
    if args.messages_field:
        argv.append(f"--messages-field={args.messages_field}")
    return subprocess.run(argv, check=False).returncode


def cmd_watch(args: argparse.Namespace) -> int:
    if (code := _sweep_cli().watch(args)) is not None:  # a TrainingSweep (phalanx.sweep.cli)
        return code
    from kubernetes import client, config

    from phalanx.watch import watch

    config.load_kube_config(config_file=args.kubeconfig)
    return watch(client.CustomObjectsApi(), args.job, args.namespace, args.timeout, charts=not args.no_chart)


def cmd_plot(args: argparse.Namespace) -> int:
    from phalanx.plot import log_path, read_curves, summary, write_png

    if _lacks_extra("plot") or (is_object_uri(args.path) and _lacks_extra("plot <uri>")):
        return 1
    curves = read_curves(args.path)
    if not curves.records:
        print(f"error: {log_path(args.path)}: no steps logged", file=sys.stderr)
        return 1
    metrics = tuple(args.metric or ())
    for name in metrics:
        if not curves.series(name)[0]:
            print(f"warning: {log_path(args.path)}: no values of {name} logged", file=sys.stderr)
    where = log_path(args.path)
    default_title = where.resolve().parent.name if isinstance(where, Path) else where.rsplit("/", 2)[-2]
    out = write_png(curves, args.output, title=args.title or default_title,
                    metrics=metrics)
    print(f"wrote {out}: {summary(curves)}")
    return 0


def cmd_operator(args: argparse.Namespace) -> int:
    from phalanx.main import run_operator

    return run_operator(args)


JOB_FILE = "JOB.yaml"
OPCONFIG = "OPCONFIG.yaml"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phalanx", description="Distributed training on Kubernetes.")
    parser.add_argument("--version", action="version", version=f"phalanx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _offline_commands(sub)
    _data_commands(sub)
    _cluster_commands(sub)
    return parser


def _offline_commands(sub: Any) -> None:
    """render, validate, crd, plan, local, export: files in, no cluster."""
    p = sub.add_parser("render", help="print every object the operator would create for a job (before placement)",
                       description="Print every object the operator would create for a job (a YAML stream, before "
                       "placement), or a sweep's trial TrainingJobs; an invalid one exits 1 naming the field and rule.")
    p.add_argument("job", metavar=JOB_FILE, help="TrainingJob or TrainingSweep YAML file ('-' for stdin)")
    p.add_argument("--config", metavar=OPCONFIG, help="operator config YAML (network profiles, topology)")
    p.add_argument("--attempt", type=int, default=0, metavar="N", help="restart attempt to render")
    p.set_defaults(fn=cmd_render)

    p = sub.add_parser("validate", help="check a job against the schema and the operator's rules",
                       description="The API server's verdict (schema and CEL rules) and the operator's rules on a "
                       "job or sweep, offline; exit 1 naming the field and the rule.")
    p.add_argument("job", metavar=JOB_FILE, help="TrainingJob or TrainingSweep YAML file ('-' for stdin)")
    p.add_argument("--config", metavar=OPCONFIG, help="operator config YAML (network profiles, topology, policy)")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("crd", help="print the TrainingJob CRD (or, by flag, another generated file)",
                       description="Print the TrainingJob CRD, or by flag the Markdown API reference, the policy "
                       "reference, the chart's admission policy or values schema, or the TrainingSweep or NodeQuarantine CRD; "
                       "--docs-tables fills the generated tables of Markdown files. `make crds` runs them all.")
    p.add_argument("-o", "--output", metavar="FILE", help="write to this file instead of stdout")
    p.add_argument("--reference", action="store_true", help="the Markdown API reference instead of the CRD")
    p.add_argument("--policy-reference", action="store_true", help="the Markdown policy and limits reference (docs/policy.md) instead")
    p.add_argument("--admission-policy", action="store_true", help="the chart's ValidatingAdmissionPolicy template instead")
    p.add_argument("--values-schema", action="store_true", help="the chart's values.schema.json instead")
    p.add_argument("--sweep", action="store_true", help="the TrainingSweep CRD instead")
    p.add_argument("--quarantine", action="store_true", help="the NodeQuarantine CRD instead")
    p.add_argument("--docs-tables", nargs="+", metavar="FILE", help="instead, rewrite the `<!-- generated: NAME -->` "
                   "blocks of these Markdown files from the code (phalanx/docstables.py)")
    p.add_argument("--check", action="store_true", help="with --docs-tables: change nothing; exit 1 naming each "
                   "block that differs from the code")
    p.set_defaults(fn=cmd_crd)

    p = sub.add_parser("plan", help="plan a gang placement offline from `kubectl get nodes -o yaml`",
                       description="Offline placement on `kubectl get nodes -o yaml` output, after the operator's "
                       "verdict on the job: rank → node, span per topology level, the predicted ring and "
                       "hierarchical allreduce against the most compact placement, ZeRO model-state memory per GPU, "
                       "the topology detected from the nodes' labels and each toleration with its source; "
                       "exit 0 placed, 1 unschedulable, 2 bad input.")
    p.add_argument("job", metavar=JOB_FILE, help="TrainingJob YAML file (one job)")
    p.add_argument("--nodes", required=True, metavar="NODES.yaml", help="nodes YAML (a List, as kubectl prints it)")
    p.add_argument("--pods", metavar="PODS.yaml", help="running pods YAML (their requests are taken as used)")
    p.add_argument("--quarantine", metavar="NQ.yaml", help="`kubectl get nq -o yaml`: quarantined nodes are left out")
    p.add_argument("--levels", metavar="KEY,…", help="comma-separated topology level names or label keys, coarse to fine "
                   "(instead of the detected topology)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--config", metavar=OPCONFIG, help="operator config YAML (network profiles, topology, policy) for the checks and levels")
    p.set_defaults(fn=cmd_plan)

    p = sub.add_parser("local", help="run a job's runtime on this machine as local processes",
                       description="Run a job's runtime (or a sweep's trials) on this machine as local processes, "
                       "after the operator's verdict; --json ends with one JSON line: final_loss, steps, "
                       "tokens_per_s, world_size (command jobs: exit_codes, seconds, and step, loss, totalSteps, metrics when "
                       "rank 0 reported them).")
    p.add_argument("job", metavar=JOB_FILE, help="TrainingJob or TrainingSweep YAML file")
    p.add_argument("--json", action="store_true", help="end with one JSON line of results")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="give up after this many seconds (exit 124)")
    p.add_argument("--checkpoint-dir", metavar="DIR", help="keep checkpoints here, a directory or an s3:// or gs:// prefix "
                   "(a rerun resumes from them); default: a temporary dir")
    p.add_argument("--config", metavar=OPCONFIG, help="operator config YAML (network profiles, policy) for the checks")
    p.set_defaults(fn=cmd_local)
    _export_command(sub)


def _export_command(sub: Any) -> None:
    p = sub.add_parser("export", help="write a checkpoint as a Hugging Face model directory (or a PEFT adapter)",
                       description="Write a committed checkpoint of a built-in transformer job as a Hugging Face "
                       "model directory transformers loads as it is (safetensors shards, index, config.json, "
                       "tokenizer files), or its LoRA adapters as a PEFT adapter directory. Runs the runtime's "
                       "exporter (python -m phalanx_runtime.export: needs torch and safetensors) on this machine.")
    p.add_argument("ckpt", metavar="CKPT_DIR", help="the job's checkpoint directory (<mountPath>/<namespace>/<job> "
                   "on its checkpoint volume, or phalanx local's --checkpoint-dir), or one step-N directory in it; or "
                   "its s3:// or gs:// prefix (checkpoint.storage: <uri>/<namespace>/<job>), read with this machine's credentials")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (created; must be empty), or an "
                   "empty s3:// or gs:// prefix to upload to")
    p.add_argument("--step", type=int, metavar="N", help="export step-N (default: the newest valid checkpoint)")
    p.add_argument("--base", metavar="DIR", help="the pretrained model directory a LoRA checkpoint's base weights "
                   "are read from (default: the path the job recorded, model.pretrained.path as the pods saw it)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="dtype of the exported weights (default: the model's own, as its config.json names it)")
    lora = p.add_mutually_exclusive_group()
    lora.add_argument("--merge-lora", action="store_true", help="LoRA: the model with the adapters merged in (the default)")
    lora.add_argument("--adapter-only", action="store_true", help="LoRA: only the adapters, as a PEFT adapter directory")
    p.add_argument("--max-shard-size", metavar="SIZE", help="largest safetensors file, e.g. 2GB (default 5GB)")
    p.set_defaults(fn=cmd_export)


def _data_commands(sub: Any) -> None:
    """data prepare."""
    p = sub.add_parser("data", help="prepare training data: tokenize, pack, split (data.prepare, offline)",
                       description="Tokenize JSONL, Parquet, text files or a datasets directory with the model's "
                       "tokenizer, pack the documents and write the prepared directory a job reads as data.source "
                       "prepared (its data.path): train and eval token files, answer-token masks for chat data, "
                       "meta.json. Nothing to do when DIR already holds the same preparation; exit 1 naming the "
                       "flag at fault.")
    p.add_argument("action", choices=["prepare"], metavar="prepare", help="prepare (the only action)")
    p.add_argument("--input", dest="inputs", action="append", required=True, metavar="PATH",
                   help="a file, directory, glob or datasets save_to_disk directory (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="the prepared directory (the job's data.path)")
    p.add_argument("--tokenizer", required=True, metavar="DIR", help="a directory with tokenizer.json (the model's)")
    p.add_argument("--format", choices=["jsonl", "parquet", "text", "arrow"],
                   help="input format (default: from each file's name)")
    p.add_argument("--text-field", default="text", metavar="NAME", help="the documents' text field (default: text)")
    p.add_argument("--messages-field", metavar="NAME",
                   help="chat data: the field of {role, content} messages (loss on the answers only)")
    p.add_argument("--eval-fraction", type=float, default=0.0, metavar="F",
                   help="held-out share of the documents (chosen by a hash of each)")
    p.add_argument("--eval-input", dest="eval_inputs", action="append", default=[], metavar="PATH",
                   help="an input whose documents are all held out (repeatable)")
    p.set_defaults(fn=cmd_data)


def _cluster_commands(sub: Any) -> None:
    """watch, plot, operator."""
    p = sub.add_parser("watch", help="follow a TrainingJob's phase, step, loss and tokens/s until it finishes",
                       description="Follow a TrainingJob: a line per change of phase, nodes, step, loss, tokens/s, "
                       "restarts, checkpoint or latest condition, with loss and tokens/s charts on a terminal; a "
                       "TrainingSweep (tsw/NAME): its trials. Exit 0 Succeeded, 1 Failed, 3 timeout.")
    p.add_argument("job", metavar="NAME", help="TrainingJob name (tsw/NAME: a TrainingSweep)")
    p.add_argument("-n", "--namespace", default="default", metavar="NS", help="its namespace (default: default)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig path (default: $KUBECONFIG, then ~/.kube/config)")
    p.add_argument("--timeout", type=float, default=3600, metavar="SECONDS", help="give up after this many seconds (exit 3)")
    p.add_argument("--no-chart", action="store_true", help="lines only: no loss and tokens/s charts")
    p.add_argument("--sweep", action="store_true", help="NAME is a TrainingSweep (as is tsw/NAME): follow its trials")
    p.set_defaults(fn=cmd_watch)

    p = sub.add_parser("plot", help="write a PNG of a job's loss, tokens/s, MFU and step time from its metrics log",
                       description=f"Write a PNG of a job's loss, tokens/s, MFU and step time (those logged) and the "
                       f"reported metrics asked for from the {constants.METRICS_LOG_FILE} rank 0 appends to in the "
                       "job's checkpoint dir.")
    p.add_argument("path", help=f"the job's checkpoint dir (<mountPath>/<namespace>/<job> on its checkpoint volume, or "
                                f"phalanx local's --checkpoint-dir) or its {constants.METRICS_LOG_FILE}, or its s3:// or gs:// "
                                "prefix (checkpoint.storage: rank 0 copies the log there at each checkpoint); a job without "
                                "checkpoint.volume or checkpoint.storage writes none")
    p.add_argument("-o", "--output", default="curves.png", metavar="PNG", help="PNG to write (default: curves.png)")
    p.add_argument("--title", metavar="TITLE", help="figure title (default: the job's directory name)")
    p.add_argument("--metric", action="append", metavar="NAME",
                   help="also plot this reported metric (e.g. eval_loss; repeatable)")
    p.set_defaults(fn=cmd_plot)

    p = sub.add_parser("operator", help="run the operator (in-cluster, or given a kubeconfig)",
                       description=f"Run the operator (in-cluster, or given a kubeconfig): liveness on "
                       f":{constants.DEFAULT_LIVENESS_PORT}/healthz, Prometheus metrics on :{constants.DEFAULT_OPERATOR_METRICS_PORT}/metrics.")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig path (default: in-cluster, then $KUBECONFIG)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", action="append", default=[], metavar="NS", help="watch this namespace (repeatable)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace")
    p.add_argument("--config", metavar=OPCONFIG, help="operator config YAML (network profiles, topology)")
    p.add_argument("--liveness-port", type=int, default=constants.DEFAULT_LIVENESS_PORT, metavar="PORT",
                   help="serve /healthz here (0: not at all)")
    p.add_argument("--metrics-port", type=int, default=constants.DEFAULT_OPERATOR_METRICS_PORT, metavar="PORT",
                   help="serve Prometheus /metrics here (0: not at all)")
    p.add_argument("--verbose", action="store_true", help="debug logging")
    p.add_argument("--leader-elect", action="store_true", help="run as one of several replicas: only the Lease holder reconciles")
    p.add_argument("--leader-elect-lease-name", default=constants.LEADER_LEASE_NAME, metavar="NAME",
                   help=f"the Lease's name (default: {constants.LEADER_LEASE_NAME})")
    p.add_argument("--leader-elect-namespace", metavar="NS", help=f"the Lease's namespace (default: ${constants.ENV_OPERATOR_POD_NAMESPACE}, then the in-cluster one)")
    p.add_argument("--leader-elect-lease-duration", type=float, default=constants.LEADER_LEASE_DURATION_SECONDS, metavar="SECONDS",
                   help="a standby takes over this long after the Lease last changed")
    p.add_argument("--leader-elect-renew-deadline", type=float, default=constants.LEADER_RENEW_DEADLINE_SECONDS, metavar="SECONDS",
                   help="a holder that has not renewed for this long stops")
    p.add_argument("--leader-elect-retry-period", type=float, default=constants.LEADER_RETRY_PERIOD_SECONDS, metavar="SECONDS",
                   help="how often to try to acquire or renew the Lease")
    p.add_argument("--shutdown-grace", type=float, default=constants.SHUTDOWN_GRACE_SECONDS, metavar="SECONDS",
                   help="after SIGTERM, exit within this long whatever is still running")
    p.set_defaults(fn=cmd_operator)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        print(f"error: {exc.filename}: no such file", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        print(f"error: invalid YAML: {exc}", file=sys.stderr)
        return 2
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - the kubernetes client's "no kubeconfig" and its kin: one line
        if type(exc).__module__.startswith("kubernetes.config"):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
