"""Tables in the Markdown docs that are generated from the code, so they cannot drift.

A doc marks a block with two lines of their own::

    <!-- generated: reasons -->
    <!-- end generated -->

and ``phalanx crd --docs-tables FILE...`` (``make crds``) rewrites what is between them from the
code; with ``--check`` (``make crds-check``) it changes nothing and fails naming each file and
block whose body differs. The blocks (``BLOCKS``): reasons and sweep-reasons (phalanx/reasons.py),
node-exclusions, conditions and sweep-conditions (the same), phase-reasons (lifecycle/status.py), cli (the argparse parser of phalanx/cli.py, passed
in: this module imports no command), rbac (the rules of the chart's rbac.yaml with the ``# why:``
comment above each), printer-columns and sweep-printer-columns (the CRDs' additionalPrinterColumns), defaults (the spec
defaults of DEFAULT_SECTIONS, from the CRD's schema), topology-presets (gang/topology_presets.py), modules (every
module of the Python packages with the first sentence of its docstring: the code map).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phalanx import reasons

OPEN = re.compile(r"^<!-- generated: ([a-z][a-z0-9-]*) -->$")
CLOSE = "<!-- end generated -->"
REPO = Path(__file__).resolve().parents[2]
RBAC_TEMPLATE = REPO / "charts" / "phalanx" / "templates" / "rbac.yaml"
# The Python packages the code map lists, relative to the repository root.
PACKAGE_DIRS = ("operator/phalanx", "common/phalanx_common", "runtime/phalanx_runtime")


class DocsTableError(ValueError):
    """A doc's markers are malformed, name no known block, or a source lacks what a table needs."""


@dataclass(frozen=True)
class Sources:
    """What the tables are made from, beyond modules: the CLI's parser and the chart's RBAC."""

    parser: argparse.ArgumentParser
    rbac_template: Path = RBAC_TEMPLATE
    repo: Path = REPO


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def _code(items: Iterable[str]) -> str:
    return ", ".join(f"`{x}`" for x in items)


# --- reasons and conditions (phalanx/reasons.py) ---------------------------------------------

GROUP_TITLES = {
    reasons.PENDING: "**Waiting** (the {kind} waits to be created, placed, admitted or to start more; the reason says for what):",
    reasons.FAILED: "**Failed** (the {kind} ended Failed; the reason is on `Failed=True` and in an Event):",
    reasons.OTHER: "**Other** (progress, success, suspension, restarts):",
}


def _reason_rows(tables: Sequence[tuple[type, dict, str]], group: str) -> list[list[str]]:
    rows = []
    for enum, docs, source in tables:
        for member in enum:
            doc = docs.get(member)
            if doc is None:
                raise DocsTableError(f"{enum.__name__}.{member.name} has no entry in phalanx/reasons.py")
            if doc.group == group:
                rows.append([f"`{member.value}`", source, _code(doc.on), doc.meaning, doc.fix or "—"])
    return rows


def reasons_block(tables: Sequence[tuple[type, dict, str]], kind: str, footer: str = "") -> str:
    lines: list[str] = []
    for group in reasons.GROUPS:
        rows = _reason_rows(tables, group)
        if rows:
            title = GROUP_TITLES[group].format(kind=kind)
            lines += [title, "", *_table(["reason", "set by", "on", "meaning", "what to do"], rows), ""]
    return "\n".join(lines + ([footer] if footer else [])).rstrip("\n")


PASS_THROUGH = ("`Restarting=True` also carries a failed pod's own reason as Kubernetes reports it (e.g. "
                "`Evicted`); with the kueue and workload backends, "
                "`Schedulable` and `Suspended` carry Kueue's or kube-scheduler's own reason where they give one.")


def node_exclusions_block() -> str:
    rows = [[f"`{member.value.format(resource='RESOURCE', level='LEVEL')}`", doc.meaning, doc.fix]
            for member, doc in reasons.NODE_EXCLUSIONS.items()]
    return "\n".join(_table(["excluded", "meaning", "what to do"], rows))


def _on_condition(tables: Sequence[tuple[type, dict, str]], cond: str) -> list[str]:
    found = []
    for enum, docs, _ in tables:
        found += [m.value for m in enum if m in docs and any(o.split("=")[0] == cond for o in docs[m].on)]
    return list(dict.fromkeys(found))


def conditions_block(conditions: dict[str, reasons.ConditionDoc], tables: Sequence[tuple[type, dict, str]]) -> str:
    rows = [[f"`{t}`", d.true, d.false, d.unknown or "—", _code(_on_condition(tables, t))] for t, d in conditions.items()]
    return "\n".join(_table(["condition", "True", "False", "Unknown", "reasons"], rows))


def phase_reasons_block() -> str:
    """Which condition gives a job's status.reason in each phase (lifecycle/status.py DECIDING)."""
    from phalanx.lifecycle.status import DECIDING

    def state(cond: str, states: frozenset[str]) -> str:
        return f"`{cond}={'/'.join(sorted(states, key=('True', 'False', 'Unknown').index))}`"

    rows = [[f"{phase}", ", else ".join(state(c, st) for c, st in deciding) + f"; else `{phase}`"]
            for phase, deciding in DECIDING.items()]
    return "\n".join(_table(["phase", "status.reason is the reason of the first that holds"], rows))


# --- printer columns (the CRDs) ---------------------------------------------------------------

def _field_description(schema: dict[str, Any], json_path: str) -> str:
    node: dict[str, Any] | None = schema
    for part in json_path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(part)
    return (node or {}).get("description", "")


def _column_meaning(column: dict[str, Any], schema: dict[str, Any]) -> str:
    return column.get("description") or _field_description(schema, column["jsonPath"])


def printer_columns_block(sweep: bool = False) -> str:
    """``kubectl get tj``'s columns (``sweep``: ``kubectl get tsw``'s)."""
    from phalanx.api.crd import build_crd
    from phalanx.api.sweep import build_sweep_crd

    spec = (build_sweep_crd() if sweep else build_crd())["spec"]
    version = spec["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    rows = [[c["name"], " — ".join(x for x in (f"`{c['jsonPath']}`", _column_meaning(c, schema)) if x),
             "yes" if c.get("priority", 0) > 0 else ""]
            for c in version["additionalPrinterColumns"]]
    return "\n".join([f"`kubectl get {spec['names']['shortNames'][0]}` ({spec['names']['kind']}; `-o wide` adds the "
                      "columns marked wide):", "", *_table(["column", "shows", "wide"], rows)])


# --- spec defaults (the CRD's schema, as the API server applies them) ---------------------------

# The spec sections whose defaults decide how a job restarts, hangs, fails and checkpoints: the
# ones prose gets wrong when it states them from memory.
DEFAULT_SECTIONS = ("failurePolicy", "checkpoint")


def _default_text(value: Any) -> str:
    return "—" if value is None else f"`{json.dumps(value)}`"


def defaults_block() -> str:
    from phalanx.api.crd import build_crd

    spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rows = []
    for section in DEFAULT_SECTIONS:
        node = spec["properties"][section]
        for name, field in node["properties"].items():
            value = field.get("default", (node.get("default") or {}).get(name))
            rows.append([f"`{section}.{name}`", _default_text(value), field.get("description", "")])
    return "\n".join(_table(["field", "default", "what it does"], rows))


# --- the CLI (argparse) -----------------------------------------------------------------------

def _option(action: argparse.Action) -> str:
    flag = action.option_strings[0]
    if action.nargs == 0:
        return flag
    metavar = action.metavar or action.dest.upper()
    if action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction):
        return f"{flag} {metavar} …"
    return f"{flag} {metavar}"


def synopsis(prog: str, parser: argparse.ArgumentParser) -> str:
    """``prog POSITIONAL [--opt VALUE] [-a | -b X …]`` from the parser's actions."""
    groups = {id(a): g for g in parser._mutually_exclusive_groups for a in g._group_actions}
    parts, done = [], set()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or id(action) in done:
            continue
        if not action.option_strings:
            parts.append(action.metavar or action.dest.upper())
            continue
        group = groups.get(id(action))
        members = group._group_actions if group is not None else [action]
        done |= {id(a) for a in members}
        text = " | ".join(_option(a) for a in members)
        parts.append(text if action.required else f"[{text}]")
    return " ".join([prog, *parts])


def cli_block(parser: argparse.ArgumentParser) -> str:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for c in sub._choices_actions}
    rows = []
    for name, command in sub.choices.items():
        what = command.description or helps.get(name) or ""
        rows.append([f"`{synopsis(f'{parser.prog} {name}', command)}`", what])
    return "\n".join(_table(["command", "what"], rows))


# --- RBAC (charts/phalanx/templates/rbac.yaml, read as text: no helm needed) --------------------

RULE = re.compile(r"^- apiGroups: \[(.*)\]\s*$")
FIELD = re.compile(r"^  (resources|verbs|resourceNames): \[(.*)\]\s*$")
WHY = "# why:"
NAMESPACED_DEFINE = '{{- define "phalanx.namespacedRules" }}'


@dataclass(frozen=True)
class RbacRule:
    line: int
    scope: str
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    named: bool  # resourceNames limits it to named objects
    why: str


def _items(text: str) -> tuple[str, ...]:
    return tuple(x.strip().strip('"') for x in text.split(",") if x.strip())


def _why(lines: list[str], index: int, where: str) -> str:
    """The ``# why:`` comment lines right above line ``index`` (continuations start with ``#``)."""
    comment: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].startswith("#"):
        comment.insert(0, lines[i])
        i -= 1
    if not comment or not comment[0].startswith(WHY):
        raise DocsTableError(f"{where}:{index + 1}: an RBAC rule without a `{WHY}` comment above it (say why the "
                             "operator needs it; the docs' rbac table is made from it)")
    return " ".join(c.lstrip("#").strip() for c in comment).removeprefix(WHY.lstrip("# ")).strip()


def _scope(line: str, scope: str) -> str:
    if line.startswith(NAMESPACED_DEFINE):
        return "each watched namespace (with `watch.allNamespaces`: cluster-wide)"
    if line.startswith("{{- end }}") and scope.startswith("each watched"):
        return ""
    if line == "kind: ClusterRole":
        return "cluster-wide"
    if line == "kind: Role":
        return "the release namespace"
    return scope


def rbac_rules(path: Path) -> list[RbacRule]:
    """Every rule of the chart's RBAC template, with its scope and the reason written above it."""
    lines = path.read_text().splitlines()
    rules, scope = [], ""
    for i, line in enumerate(lines):
        scope = _scope(line, scope)
        match = RULE.match(line)
        if not match:
            continue
        fields: dict[str, str] = {}
        for follow in lines[i + 1:]:
            if not (m := FIELD.match(follow)):
                break
            fields[m.group(1)] = m.group(2)
        if "resources" not in fields or "verbs" not in fields:
            raise DocsTableError(f"{path}:{i + 1}: an RBAC rule whose resources and verbs are not one-line lists")
        rules.append(RbacRule(i + 1, scope, _items(match.group(1)), _items(fields["resources"]),
                              _items(fields["verbs"]), "resourceNames" in fields, _why(lines, i, str(path))))
    return rules


def _resource(rule: RbacRule) -> str:
    groups = [g or "core" for g in rule.groups]
    text = f"{', '.join(rule.resources)} ({', '.join(groups)})"
    return text + (", named ones only" if rule.named else "")


def rbac_block(path: Path) -> str:
    rows = [[_resource(r), ", ".join(r.verbs), r.scope, r.why] for r in rbac_rules(path)]
    return "\n".join(_table(["resources (API groups)", "verbs", "where", "why"], rows))


# --- the code map -------------------------------------------------------------------------------

def summary(path: Path) -> str:
    """The first sentence of a module's docstring; a module without one is an error (the map
    would have a blank row)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path)))
    if not doc:
        raise DocsTableError(f"{path}: the module has no docstring (the code map lists every module by its first sentence)")
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    match = re.match(r"(.+?(?<!e\.g)(?<!i\.e)(?<!vs)[.!?])(\s|$)", paragraph)
    return match.group(1) if match else paragraph


def modules_block(repo: Path) -> str:
    rows = []
    for package in PACKAGE_DIRS:
        root = repo / package
        for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).parts):
            if "__pycache__" not in path.parts:
                rows.append([f"`{path.relative_to(repo)}`", summary(path)])
    return "\n".join(_table(["module", "what it is"], rows))


def topology_presets_block() -> str:
    """Each built-in topology preset's levels (gang/topology_presets.py) with their default figures."""
    from phalanx.api.topology_levels import preset_levels

    rows = []
    for preset in ("gke", "aws", "phalanx", "none"):
        for lvl in preset_levels(preset):
            rows.append([f"`{preset}`", lvl.name, f"`{lvl.label}`", f"{lvl.bandwidth_gbps:g}", f"{lvl.latency_us:g}",
                         f"{lvl.oversubscription:g}"])
    return "\n".join(_table(["preset", "level", "node label", "Gb/s per node", "latency µs", "oversubscription"], rows))


# --- blocks in files ----------------------------------------------------------------------------

BLOCKS: dict[str, Callable[[Sources], str]] = {
    "reasons": lambda _: reasons_block(reasons.TABLES, "job", PASS_THROUGH),
    "sweep-reasons": lambda _: reasons_block(reasons.SWEEP_TABLES, "sweep"),
    "node-exclusions": lambda _: node_exclusions_block(),
    "conditions": lambda _: conditions_block(reasons.CONDITIONS, reasons.TABLES),
    "phase-reasons": lambda _: phase_reasons_block(),
    "sweep-conditions": lambda _: conditions_block(reasons.SWEEP_CONDITIONS, reasons.SWEEP_TABLES),
    "cli": lambda s: cli_block(s.parser),
    "rbac": lambda s: rbac_block(s.rbac_template),
    "printer-columns": lambda _: printer_columns_block(),
    "sweep-printer-columns": lambda _: printer_columns_block(sweep=True),
    "defaults": lambda _: defaults_block(),
    "modules": lambda s: modules_block(s.repo),
    "topology-presets": lambda _: topology_presets_block(),
}


@dataclass(frozen=True)
class Block:
    name: str
    start: int  # index of the opening marker line
    end: int  # index of the closing marker line


def find_blocks(lines: list[str], where: str) -> list[Block]:
    blocks, open_at, name = [], None, ""
    for i, line in enumerate(lines):
        match = OPEN.match(line.strip())
        if match:
            if open_at is not None:
                raise DocsTableError(f"{where}:{i + 1}: block {match.group(1)} opens inside block {name} "
                                     f"(line {open_at + 1}); close it first with {CLOSE}")
            if match.group(1) not in BLOCKS:
                raise DocsTableError(f"{where}:{i + 1}: unknown generated block {match.group(1)!r} "
                                     f"(known: {', '.join(BLOCKS)})")
            open_at, name = i, match.group(1)
        elif line.strip() == CLOSE:
            if open_at is None:
                raise DocsTableError(f"{where}:{i + 1}: {CLOSE} without an opening <!-- generated: NAME -->")
            blocks.append(Block(name, open_at, i))
            open_at = None
    if open_at is not None:
        raise DocsTableError(f"{where}:{open_at + 1}: block {name} is never closed ({CLOSE})")
    return blocks


def fill(text: str, sources: Sources, where: str = "<text>") -> tuple[str, list[str]]:
    """The text with every block's body generated, and the names of the blocks that changed."""
    lines = text.split("\n")
    changed: list[str] = []
    cache: dict[str, list[str]] = {}
    for block in reversed(find_blocks(lines, where)):
        if block.name not in cache:
            cache[block.name] = ["", *BLOCKS[block.name](sources).split("\n"), ""]
        body = cache[block.name]
        if lines[block.start + 1:block.end] != body:
            changed.insert(0, block.name)
            lines[block.start + 1:block.end] = body
    return "\n".join(lines), changed


def update(paths: Sequence[str | Path], sources: Sources, check: bool, out: Callable[[str], None] = print) -> int:
    """Rewrite the blocks of ``paths`` (or, ``check``: report each that differs). 1 on drift."""
    drift = 0
    for path in map(Path, paths):
        old = path.read_text()
        new, changed = fill(old, sources, str(path))
        if not changed:
            continue
        if not check:
            path.write_text(new)
            out(f"{path}: regenerated {', '.join(changed)}")
            continue
        drift = 1
        for name in changed:
            out(f"{path}: generated block {name!r} differs from the code (run make crds)")
        out("".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(path), f"{path} (generated)")))
    return drift
