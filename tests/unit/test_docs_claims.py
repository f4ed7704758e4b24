"""What the docs claim, checked against the code: each example's header (its "Runs on kind" and
"Needs" lines) against its spec, every "`field` defaults to X" / "`field` (default X)" statement
in README.md and docs/*.md against the models' defaults, and every `phalanx …` and `make …`
command the docs show against the CLI's parser and the Makefile.

The header format and the kind half: tests/example_files.py and tests/unit/test_examples.py.
"""

from __future__ import annotations

import re
import shlex
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.api.crd import build_crd
from phalanx.api.sweep import build_sweep_crd
from phalanx.cli import build_parser
from phalanx.gang.inventory import parse_quantity
from tests.example_files import DOCS, EXAMPLES, ROOT, Header, documents, header, job_spec, ours

# --- example headers -----------------------------------------------------------------------------

JOB_FILES = [p for p in EXAMPLES if any(ours(d) for d in documents(p))]
WORD = r"(?<![\w/.-]){}(?![\w/-])"


def _spec_claims(path: Path) -> list[dict[str, Any]]:
    return [job_spec(d) | {"__kind": d["kind"], "__sweep": d.get("spec") or {}} for d in documents(path) if ours(d)]


def _claims(spec: dict[str, Any]) -> list[str]:
    """PVC names a spec mounts."""
    volumes = [(spec.get("checkpoint") or {}).get("volume") or {}, *spec.get("volumes", [])]
    return [v["persistentVolumeClaim"]["claimName"] for v in volumes if "persistentVolumeClaim" in v]


def _pods_gpus(spec: dict[str, Any]) -> int:
    workers = spec.get("nodes", 1) * ((spec.get("resources") or {}).get("gpus") or 0)
    return workers + sum(r.get("replicas", 1) * ((r.get("resources") or {}).get("gpus") or 0) for r in spec.get("roles", []))


def header_problems(h: Header, specs: list[dict[str, Any]]) -> list[str]:
    """Where an example's header and its TrainingJob / TrainingSweep documents disagree."""
    needs, lower, out = h.needs, h.needs.lower(), []
    first = specs[0]
    gpus = (first.get("resources") or {}).get("gpus") or 0
    if any(_pods_gpus(s) for s in specs) != ("gpu" in lower):
        out.append(f"Needs {'does not mention' if 'gpu' not in lower else 'mentions'} GPUs; the spec asks for "
                   f"{sum(_pods_gpus(s) for s in specs)}")
    said = re.search(r"(\d+) NVIDIA GPUs?", needs)
    if gpus and said and int(said.group(1)) != gpus:
        out.append(f"Needs says {said.group(1)} GPUs per node; resources.gpus is {gpus}")
    total = re.search(r"needs (\d+) GPUs", h.why)
    if total and int(total.group(1)) != _pods_gpus(first):
        out.append(f"'Runs on kind' says it needs {total.group(1)} GPUs; the job asks for {_pods_gpus(first)}")
    if first["__kind"] == constants.KIND:
        nodes = first.get("nodes", 1)
        count = re.search(r"(\d+) nodes", needs)
        if (int(count.group(1)) if count else 1 if re.search(r"\b(a|one) node\b", needs) else None) != nodes:
            out.append(f"Needs does not say {nodes} node{'s' if nodes > 1 else ''} (spec.nodes)")
    res = first.get("resources") or {}
    cpus = re.search(r"(\d+(?:\.\d+)?) CPUs?\b", needs)
    if ("cpu" in res) != bool(cpus) or (cpus and parse_quantity(cpus.group(1)) != parse_quantity(res["cpu"])):
        out.append(f"Needs says {cpus.group(0) if cpus else 'no CPUs'}; resources.cpu is {res.get('cpu')}")
    memory = re.search(r"\b(\d+[KMGT]i)\b", needs)
    if ("memory" in res) != bool(memory) or (memory and parse_quantity(memory.group(1)) != parse_quantity(res["memory"])):
        out.append(f"Needs says {memory.group(1) if memory else 'no memory'}; resources.memory is {res.get('memory')}")
    claims = sorted({c for s in specs for c in _claims(s)})
    if bool(claims) != ("pvc" in lower):
        out.append(f"Needs {'mentions a PVC' if 'pvc' in lower else 'names no PVC'}; the spec mounts {claims or 'none'}")
    out += [f"Needs does not name the PVC {c}" for c in claims if not re.search(WORD.format(re.escape(c)), needs)]
    frameworks = {s.get("framework") for s in specs}
    for framework in ("deepspeed", "horovod"):
        if (framework in frameworks) != (framework in lower):
            out.append(f"Needs {'mentions' if framework in lower else 'does not mention'} {framework}; "
                       f"framework is {sorted(f for f in frameworks if f) or 'unset'}")
    for s in specs:
        pc = (s.get("scheduling") or {}).get("priorityClassName")
        if pc and not re.search(WORD.format(re.escape(pc)), needs):
            out.append(f"Needs does not name the PriorityClass {pc}")
    return out


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.name)
def test_example_header_says_what_the_spec_needs(path):
    assert header_problems(header(path), _spec_claims(path)) == []


BASE = {"__kind": constants.KIND, "__sweep": {}, "nodes": 2, "resources": {"cpu": "1", "memory": "2Gi"},
        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}}}}
GOOD = "2 nodes with 1 CPU and 2Gi free each; a ReadWriteMany PVC ckpt (checkpoints)."


@pytest.mark.parametrize(("why", "needs", "spec", "words"), [
    ("(kind)", GOOD, {}, None),
    ("(kind)", GOOD, {"resources": {"cpu": "1", "memory": "2Gi", "gpus": 8}}, "does not mention GPUs"),
    ("— it needs 16 GPUs", "2 nodes with 4 NVIDIA GPUs, 1 CPU and 2Gi free each; a PVC ckpt.",
     {"resources": {"cpu": "1", "memory": "2Gi", "gpus": 4}}, "needs 16 GPUs"),
    ("— x", "2 nodes with 8 NVIDIA GPUs, 1 CPU and 2Gi free each; a PVC ckpt.",
     {"resources": {"cpu": "1", "memory": "2Gi", "gpus": 4}}, "8 GPUs per node"),
    ("(kind)", GOOD.replace("2 nodes", "3 nodes"), {}, "say 2 nodes"),
    ("(kind)", GOOD.replace("1 CPU", "2 CPUs"), {}, "resources.cpu"),
    ("(kind)", GOOD.replace("2Gi", "4Gi"), {}, "resources.memory"),
    ("(kind)", GOOD, {"checkpoint": {}}, "mentions a PVC"),
    ("(kind)", GOOD, {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}, "PVC data"),
    ("(kind)", GOOD.replace("PVC ckpt", "PVC ckpt; an image with DeepSpeed"), {}, "mentions deepspeed"),
    ("(kind)", GOOD, {"framework": "deepspeed"}, "does not mention deepspeed"),
    ("(kind)", GOOD, {"scheduling": {"priorityClassName": "high"}}, "PriorityClass high"),
])
def test_header_problems_each_rule(why, needs, spec, words):
    problems = header_problems(Header(True, why, needs, 1), [BASE | spec])
    assert (problems == []) if words is None else (len(problems) == 1 and words in problems[0]), problems


# --- documented defaults -------------------------------------------------------------------------

NAME = r"`(?P<path>[A-Za-z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)`"
VALUE = r"(?P<value>`[^`\n]+`|-?\d+(?:\.\d+)?|true|false)"
STATEMENTS = (
    re.compile(NAME + r" defaults to " + VALUE),  # `field` defaults to X
    re.compile(NAME + r"[^`()\n]{0,40}\(default:? " + VALUE + r"[,;)]"),  # `field` … (default X)
    re.compile(r"`(?P<path>[A-Za-z][A-Za-z0-9_.]*): (?P<value>[^`\n]+)` \(the default\)"),  # `field: X` (the default)
)
GENERATED_DOCS = ("api.md", "policy.md")  # the models' own words
MISSING = object()


def _schema_defaults(node: dict[str, Any], prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    parent = node.get("default") if isinstance(node.get("default"), dict) else {}
    for name, sub in (node.get("properties") or {}).items():
        value = sub.get("default", parent.get(name, MISSING))
        if value is not MISSING:
            out[prefix + name] = value
        _schema_defaults(sub, f"{prefix}{name}.", out)
    return out


def _flat(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flat(sub, f"{prefix}{key}.", out)
    if prefix:
        out[prefix[:-1]] = value
    return out


def _spec_schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def model_defaults() -> dict[str, dict[str, Any]]:
    """Wire path → default, per model: the TrainingJob and TrainingSweep specs (as the API server
    fills them in) and the operator config."""
    return {"TrainingJob spec": _schema_defaults(_spec_schema(build_crd()), "", {}),
            "TrainingSweep spec": _schema_defaults(_spec_schema(build_sweep_crd()), "", {}),
            "operator config": _flat(OperatorConfig().model_dump(by_alias=True, mode="json"), "", {})}


def resolve(path: str, defaults: dict[str, dict[str, Any]]) -> list[tuple[str, Any]]:
    """(model and path, default) of the field ``path`` names: exactly, else by a unique suffix."""
    path = path.removeprefix("spec.")
    exact = [(f"{model} {path}", d[path]) for model, d in defaults.items() if path in d]
    if exact:
        return exact
    suffix = [(f"{model} {key}", d[key]) for model, d in defaults.items() for key in d if key.endswith("." + path)]
    return suffix if len({v.__repr__() for _, v in suffix}) == 1 else []


def literal(text: str) -> Any:
    text = text.strip("`")
    if text in ("true", "false"):
        return text == "true"
    try:
        return Decimal(text)
    except ArithmeticError:
        return text


def _same(documented: Any, default: Any) -> bool:
    if isinstance(documented, Decimal) and isinstance(default, int | float) and not isinstance(default, bool):
        return documented == Decimal(str(default))
    return documented == default


def default_statements() -> list[tuple[str, str, str]]:
    """(where, field, value) of every default statement in README.md and docs/*.md."""
    out = []
    for path in DOCS:
        if path.name in GENERATED_DOCS:
            continue
        text = path.read_text()
        for pattern in STATEMENTS:
            out += [(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", m.group("path"), m.group("value"))
                    for m in pattern.finditer(text)]
    return out


def default_problems(statements: list[tuple[str, str, str]], defaults: dict[str, dict[str, Any]]) -> tuple[list[str], int]:
    """(the statements that disagree with the models, how many could be checked). A statement
    whose field is unknown or ambiguous, or whose value names another field, cannot be."""
    problems, checked = [], 0
    for where, field, value in statements:
        found = resolve(field, defaults)
        if not found or (value.startswith("`") and resolve(value.strip("`"), defaults)):
            continue
        checked += 1
        documented = literal(value)
        wrong = [f"{name} is {default!r}" for name, default in found if not _same(documented, default)]
        if wrong:
            problems.append(f"{where}: says `{field}` defaults to {value}, but {'; '.join(wrong)}")
    return problems, checked


def test_documented_defaults_are_the_models_defaults():
    problems, checked = default_problems(default_statements(), model_defaults())
    assert problems == []
    assert checked >= 8, "the default statements are no longer found: the patterns or the docs changed"


@pytest.mark.parametrize(("text", "problem"), [
    ("`failurePolicy.hangTimeoutSeconds` defaults to 0", None),
    ("`hangTimeoutSeconds` defaults to 600", "failurePolicy.hangTimeoutSeconds is 0"),
    ("`checkpoint.resume: false` (the default)", "checkpoint.resume is True"),
    ("`health.quarantineSeconds` (default 60)", "health.quarantineSeconds is 3600"),
    ("`preflightTimeoutSeconds` of the check (default 60)", None),
    ("`intervalSteps` (default `graceSteps`)", "unchecked"),  # ambiguous field, and a reference
    ("`NOT_A_FIELD` defaults to 1", "unchecked"),
])
def test_default_statements_are_checked(text, problem):
    statements = [("doc.md:1", m.group("path"), m.group("value")) for p in STATEMENTS for m in p.finditer(text)]
    assert len(statements) == 1
    problems, checked = default_problems(statements, model_defaults())
    if problem == "unchecked":
        assert (problems, checked) == ([], 0)
    else:
        assert checked == 1 and (problems == [] if problem is None else problem in problems[0]), problems


# --- commands ------------------------------------------------------------------------------------

SHELL_FENCE = re.compile(r"^```(?:sh|bash|console)[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"(?<!`)`((?:phalanx|make) [^`\n]+)`(?!`)")
TARGET = re.compile(r"^([a-z][a-z0-9-]*):", re.M)
MAKEFILES = (ROOT / "Makefile", ROOT / "hack" / "cluster" / "cluster.mk")


def _logical_lines(block: str, first: int) -> list[tuple[int, str]]:
    """(line number, command) of a shell block, lines ending in a backslash joined to the next."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for i, line in enumerate(block.split("\n"), first):
        start, text = pending if pending else (i, "")
        text += line.rstrip("\\") + " "
        pending = (start, text) if line.endswith("\\") else None
        if pending is None:
            out.append((start, text.strip()))
    return out


def shown_commands() -> list[tuple[str, str, bool]]:
    """(where, command line, whole) of every `phalanx …` and `make …` the docs show: the commands
    of their shell blocks (whole), and inline code (a command or a bare name; a synopsis with
    [optional] parts is the generated CLI table's, made from the parser)."""
    out = []
    for path in DOCS:
        text, name = path.read_text(), str(path.relative_to(ROOT))
        for m in SHELL_FENCE.finditer(text):
            for number, line in _logical_lines(m.group(1), text.count("\n", 0, m.start()) + 2):
                line = line.removeprefix("$ ")
                if re.match(r"(phalanx|make|python3? -m phalanx)\s", line):
                    out.append((f"{name}:{number}", line, True))
        out += [(f"{name}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1), False)
                for m in INLINE.finditer(text) if not re.search(r"[\[…]", m.group(1))]
    return out


def command_problem(line: str, whole: bool) -> str | None:
    """Why ``line`` is not a command the CLI or the Makefile has (None: it is)."""
    try:
        words = shlex.split(re.sub(r"<\([^)]*\)", "FILE", line), comments=True)  # <(kubectl …): a file
    except ValueError as exc:
        return f"cannot be split into words: {exc}"
    if words[0] == "make":
        targets = {t for f in MAKEFILES for t in TARGET.findall(f.read_text())}
        missing = [w for w in words[1:] if "=" not in w and not w.startswith("-") and w not in targets]
        return f"no make target {missing[0]}" if missing else None
    argv = words[3:] if words[0].startswith("python") else words[1:]
    if whole:
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            return "the CLI refuses it"
        return None
    if argv and "|" in argv[0]:  # `phalanx validate|render|local`: each of them
        return next(filter(None, (command_problem(f"phalanx {name} {' '.join(argv[1:])}", False)
                                  for name in argv[0].replace("\\|", "|").split("|"))), None)
    parser = build_parser()
    while argv and (sub := next((a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"), None)):
        if argv[0] not in sub.choices:
            return f"no command {argv[0]!r} (`phalanx --help`)"
        parser, argv = sub.choices[argv[0]], argv[1:]
    unknown = [w.split("=")[0] for w in argv if w.startswith("-") and w.split("=")[0] not in parser._option_string_actions]
    return f"no option {unknown[0]}" if unknown else None


def test_every_command_the_docs_show_exists():
    shown = shown_commands()
    problems = [f"{where}: `{line}`: {why}" for where, line, whole in shown if (why := command_problem(line, whole))]
    assert problems == []
    assert sum(1 for _, line, whole in shown if whole and line.startswith("phalanx")) >= 5


@pytest.mark.parametrize(("line", "whole", "words"), [
    ("phalanx plan JOB.yaml --nodes NODES.yaml", True, None),
    ("phalanx plan JOB.yaml", True, "refuses"),  # --nodes is required
    ("phalanx plan JOB.yaml --nodse N.yaml", True, "refuses"),
    ("phalanx validate", False, None),  # inline: a name, not a whole command
    ("phalanx data prepare --input X", False, None),
    ("phalanx deploy JOB.yaml", False, "no command 'deploy'"),
    ("phalanx validate|render|local", False, None),
    ("phalanx validate\\|deploy", False, "no command 'deploy'"),
    ("phalanx local JOB.yaml --gpus 8", False, "no option --gpus"),
    ("make crds-check", True, None),
    ("make images REGISTRY=r", True, None),
    ("make deploy", True, "no make target deploy"),
])
def test_command_problem(line, whole, words):
    why = command_problem(line, whole)
    assert (why is None) if words is None else (why is not None and words in why), why
