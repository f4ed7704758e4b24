"""Every reason the code can set has its meaning and fix (phalanx/reasons.py), and says truly
where it appears: the condition (and status) or Event each call of the code puts it on."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from phalanx import constants, reasons

PACKAGE = Path(__file__).resolve().parents[3] / "operator" / "phalanx"
ALL_TABLES = reasons.TABLES + reasons.SWEEP_TABLES


@pytest.mark.parametrize(("enum", "docs", "source"), ALL_TABLES, ids=[t[0].__name__ for t in ALL_TABLES])
def test_every_reason_has_its_meaning_and_fix(enum, docs, source):
    missing = [f"{enum.__name__}.{m.name}" for m in enum if m not in docs]
    assert not missing, (f"add an entry to the table of {enum.__name__} in operator/phalanx/reasons.py "
                         f"(meaning, what to do, where it appears) for: {', '.join(missing)}")
    for member in enum:
        doc = docs[member]
        assert doc.group in reasons.GROUPS and doc.meaning and doc.on, f"{enum.__name__}.{member.name}: {doc}"


def test_each_table_holds_only_its_own_enum():
    for enum, docs, _ in ALL_TABLES:
        assert all(type(key) is enum for key in docs), enum.__name__


def test_where_a_reason_appears_names_a_real_condition_status_or_an_event():
    types = set(reasons.condition_types())
    for enum, docs, _ in ALL_TABLES:
        for member, doc in docs.items():
            for where in doc.on:
                cond, _, status = where.partition("=")
                assert where in (reasons.EVENT, reasons.TRIAL) or (cond in types and status in ("", "True", "False", "Unknown")), \
                    f"{enum.__name__}.{member.name}: {where}"


def test_every_condition_type_is_explained():
    assert set(reasons.CONDITIONS) == set(reasons.condition_types())
    assert set(reasons.SWEEP_CONDITIONS) <= set(reasons.condition_types())


# --- what the code does with each reason, read from its calls -----------------------------------

def _aliases(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """{local name: enum name} of the reason enums a module imports; local names of constants
    (the module) and of ConditionType."""
    enums, consts = {}, {"constants"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "phalanx.constants":
            enums |= {a.asname or a.name: a.name for a in node.names if a.name in ("Reason", "SweepReason")}
            consts |= {a.asname or a.name for a in node.names if a.name == "ConditionType"}
        if isinstance(node, ast.ImportFrom) and node.module == "phalanx":
            consts |= {a.asname or a.name for a in node.names if a.name == "constants"}
    return enums, consts


def _member(node: ast.AST, enums: dict[str, str]) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in enums:
        return f"{enums[node.value.id]}.{node.attr}"
    return None


def _cond_type(node: ast.AST, consts: set[str]) -> str | None:
    """The condition type of ``constants.COND_X`` or ``ConditionType.X``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in consts:
        if node.attr.startswith("COND_"):
            return getattr(constants, node.attr, None)
        return constants.ConditionType[node.attr].value if node.attr in constants.ConditionType.__members__ else None
    return None


def _status(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return "True" if node.value else "False"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return ""  # decided at run time: any status of that type


def _uses(call: ast.Call, enums: dict[str, str], consts: set[str]) -> list[tuple[str, str]]:
    """(enum.MEMBER, where) for one call that sets a condition or records an Event."""
    name, args = getattr(call.func, "attr", None), call.args
    if name == "cond" and len(args) >= 3 and (m := _member(args[2], enums)) and (t := _cond_type(args[0], consts)):
        status = _status(args[1])
        return [(m, f"{t}={status}" if status else t)]
    if name == "finish" and len(args) >= 2 and (m := _member(args[1], enums)):
        return [(m, f"{constants.COND_FAILED if getattr(args[0], 'attr', '') == 'FAILED' else constants.COND_SUCCEEDED}=True"), (m, reasons.EVENT)]
    if name in ("phase", "event") and args:
        found = [_member(a, enums) for a in args[:2]]
        found += [_member(k.value, enums) for k in call.keywords if k.arg == "reason"]
        return [(m, reasons.EVENT) for m in found if m]
    if name == "append" and args and isinstance(args[0], ast.Tuple) and len(args[0].elts) == 3:
        return [(m, reasons.EVENT) for m in [_member(args[0].elts[1], enums)] if m]
    return []


def _code_uses() -> dict[str, set[str]]:
    uses: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        enums, consts = _aliases(tree)
        if not enums:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for member, where in _uses(node, enums, consts):
                    uses[member].add(where)
    return uses


def _declared(where: str, on: tuple[str, ...]) -> bool:
    return where in on or ("=" not in where and any(o.split("=")[0] == where for o in on))


def test_the_tables_say_where_the_code_puts_each_reason():
    uses = _code_uses()
    assert len(uses) > 20, "the walk found too few calls: it no longer reads the code"
    tables = {"Reason": reasons.REASONS, "SweepReason": reasons.SWEEP_REASONS}
    wrong = []
    for member, places in sorted(uses.items()):
        enum, _, name = member.partition(".")
        on = tables[enum][getattr(getattr(constants, enum), name)].on
        wrong += [f"{member}: the code sets it on {where}; reasons.py says {', '.join(on)}"
                  for where in sorted(places) if not _declared(where, on)]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("code", [
    "from phalanx.constants import Reason\nview.cond(constants.COND_SUSPENDED, True, Reason.HANG, '')\n",
    "from phalanx.constants import ConditionType, Reason\nview.cond(ConditionType.SUSPENDED, True, Reason.HANG, '')\n",
])
def test_the_walk_sees_a_condition_a_table_leaves_out(code):
    tree = ast.parse(code)
    enums, consts = _aliases(tree)
    (call,) = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    (use,) = _uses(call, enums, consts)
    assert use == ("Reason.HANG", "Suspended=True") and not _declared(use[1], reasons.REASONS[constants.Reason.HANG].on)


def test_the_condition_types_keep_their_wire_values_and_old_names():
    assert [str(t) for t in constants.ConditionType] == [
        "Valid", "Created", "Schedulable", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "Reconciled",
        "LossNotFinite", "ResumedFromPredecessor"]
    for member in constants.ConditionType:
        assert getattr(constants, f"COND_{member.name}") is member


def test_every_node_exclusion_has_its_meaning_and_fix():
    assert set(reasons.NODE_EXCLUSIONS) == set(constants.NodeExclusion)
    assert all(doc.meaning and doc.fix for doc in reasons.NODE_EXCLUSIONS.values())
