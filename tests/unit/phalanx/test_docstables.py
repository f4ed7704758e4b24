"""The docs' generated blocks: markers, fill and check modes, and each table from its source."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from phalanx import docstables, reasons
from phalanx.api.crd import PRINTER_COLUMNS
from phalanx.api.sweep import PRINTER_COLUMNS as SWEEP_PRINTER_COLUMNS
from phalanx.cli import build_parser, main
from phalanx.constants import KueueReason, NodeExclusion, Reason, UnschedulableReason

SOURCES = docstables.Sources(build_parser())


def doc(*names: str, body: str = "stale") -> str:
    blocks = "\n\n".join(f"<!-- generated: {n} -->\n{body}\n<!-- end generated -->" for n in names)
    return f"# Title\n\nProse `<!-- generated: cli -->` in a line is not a marker.\n\n{blocks}\n\nAfter.\n"


def test_fill_rewrites_every_block_and_nothing_else():
    text, changed = docstables.fill(doc("reasons", "cli"), SOURCES)
    assert changed == ["reasons", "cli"]
    assert text.startswith("# Title\n\nProse `<!-- generated: cli -->`") and text.endswith("\n\nAfter.\n")
    assert "stale" not in text and "| `phalanx render JOB.yaml" in text and "| `InvalidSpec` |" in text
    assert docstables.fill(text, SOURCES) == (text, [])  # idempotent


def test_check_names_the_file_and_the_block_that_drifted(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(docstables.fill(doc("conditions", "printer-columns"), SOURCES)[0])
    assert docstables.update([path], SOURCES, check=True, out=lambda _: None) == 0
    path.write_text(path.read_text().replace("| `Valid` |", "| `Valid` (edited) |"))
    before, lines = path.read_text(), []
    assert docstables.update([path], SOURCES, check=True, out=lines.append) == 1
    assert path.read_text() == before  # check mode writes nothing
    assert lines[0] == f"{path}: generated block 'conditions' differs from the code (run make crds)"
    assert len(lines) == 2 and "(edited)" in lines[1]  # then the diff


def test_the_cli_fills_and_checks(tmp_path, capsys):
    path, untouched = tmp_path / "a.md", tmp_path / "plain.md"
    path.write_text(doc("rbac"))
    untouched.write_text("no blocks\n")
    assert main(["crd", "--docs-tables", str(path), str(untouched), "--check"]) == 1
    assert f"{path}: generated block 'rbac' differs" in capsys.readouterr().out
    assert main(["crd", "--docs-tables", str(path), str(untouched)]) == 0
    assert main(["crd", "--docs-tables", str(path), str(untouched), "--check"]) == 0
    assert untouched.read_text() == "no blocks\n" and "| pods (core) |" in path.read_text()
    assert main(["crd", "--check"]) == 2


@pytest.mark.parametrize(("text", "words"), [
    ("<!-- generated: nosuch -->\n<!-- end generated -->\n", "unknown generated block 'nosuch'"),
    ("<!-- generated: cli -->\n", "block cli is never closed"),
    ("<!-- end generated -->\n", "without an opening"),
    ("<!-- generated: cli -->\n<!-- generated: rbac -->\n<!-- end generated -->\n", "opens inside block cli"),
])
def test_malformed_markers_are_refused_naming_the_line(text, words):
    with pytest.raises(docstables.DocsTableError, match=words) as exc:
        docstables.fill(text, SOURCES, "doc.md")
    assert str(exc.value).startswith("doc.md:")


def test_every_known_block_renders():
    for name in docstables.BLOCKS:
        text, changed = docstables.fill(doc(name), SOURCES)
        assert changed == [name] and text.count("\n| ") >= 3, name


# --- reasons and conditions ---------------------------------------------------------------------

def _rows(block: str) -> dict[str, list[str]]:
    """First cell → cells, for every table row."""
    rows = [[c.strip() for c in line.strip("|").split(" | ")] for line in block.splitlines() if line.startswith("| ")]
    return {r[0]: r for r in rows}


def test_the_reasons_table_has_every_reason_with_its_group_and_fix():
    block = docstables.reasons_block(reasons.TABLES, "job", docstables.PASS_THROUGH)
    for enum, _, source in reasons.TABLES:
        for member in enum:
            assert f"| `{member.value}` | {source} |" in block, member
    waiting, failed = block.split("**Failed**")[0], block.split("**Failed**")[1].split("**Other**")[0]
    assert "| `Insufficient` | native planner | `Schedulable=False` |" in waiting
    assert "| `GangTimeout` | operator | `Failed=True`, `Event` |" in failed and "`Insufficient`" not in failed
    assert reasons.REASONS[Reason.GANG_TIMEOUT].fix in failed


def test_a_reason_without_an_entry_fails_the_table(monkeypatch):
    monkeypatch.delitem(reasons.UNSCHEDULABLE, UnschedulableReason.QUEUED)
    with pytest.raises(docstables.DocsTableError, match="UnschedulableReason.QUEUED has no entry"):
        docstables.reasons_block(reasons.TABLES, "job")


def test_conditions_list_the_reasons_found_on_them():
    rows = _rows(docstables.conditions_block(reasons.CONDITIONS, reasons.TABLES))
    assert set(rows) == {"condition"} | {f"`{t}`" for t in reasons.CONDITIONS}
    assert f"`{KueueReason.DEACTIVATED.value}`" in rows["`Suspended`"][4]
    assert "`Insufficient`" in rows["`Schedulable`"][4] and "`Insufficient`" not in rows["`Failed`"][4]


def test_the_node_exclusions_table_has_every_exclusion_with_its_fix():
    block = docstables.node_exclusions_block()
    rows = _rows(block)
    assert set(rows) == {"excluded"} | {f"`{m.value.format(resource='RESOURCE', level='LEVEL')}`" for m in NodeExclusion}
    for member, doc in reasons.NODE_EXCLUSIONS.items():
        assert rows[f"`{member.value.format(resource='RESOURCE', level='LEVEL')}`"][1:] == [doc.meaning, doc.fix]
    assert "{" not in block  # every placeholder is filled


# --- printer columns, CLI, RBAC ------------------------------------------------------------------

def test_printer_columns_come_from_both_crds():
    tj, tsw = docstables.printer_columns_block(), docstables.printer_columns_block(sweep=True)
    assert tj.startswith("`kubectl get tj`") and tsw.startswith("`kubectl get tsw`")
    for columns, part in ((PRINTER_COLUMNS, tj), (SWEEP_PRINTER_COLUMNS, tsw)):
        rows = _rows(part)
        for column in columns:
            assert f"`{column['jsonPath']}`" in rows[column["name"]][1]
            assert rows[column["name"]][2] == ("yes" if column.get("priority") else "")


def test_the_cli_table_is_the_parsers_help():
    parser = argparse.ArgumentParser(prog="tool")
    sub = parser.add_subparsers()
    p = sub.add_parser("go", help="short", description="Longer words.")
    p.add_argument("file", metavar="FILE.yaml")
    p.add_argument("--nodes", required=True, metavar="N")
    group = p.add_mutually_exclusive_group()
    group.add_argument("-n", action="append", metavar="NS")
    group.add_argument("-A", action="store_true")
    sub.add_parser("stop", help="only a help line")
    rows = _rows(docstables.cli_block(parser))
    assert rows["`tool go FILE.yaml --nodes N [-n NS … \\| -A]`"][1] == "Longer words."
    assert rows["`tool stop`"][1] == "only a help line"


def test_every_phalanx_command_is_in_the_cli_table():
    block = docstables.cli_block(build_parser())
    for command in ("render", "validate", "crd", "plan", "local", "watch", "plot", "operator"):
        assert f"| `phalanx {command}" in block
    assert "[--docs-tables FILE …] [--check]" in block


def test_every_rbac_rule_of_the_chart_is_a_row_with_its_reason():
    lines = docstables.RBAC_TEMPLATE.read_text().splitlines()
    rules = docstables.rbac_rules(docstables.RBAC_TEMPLATE)
    assert len(rules) == sum(line.lstrip().startswith("- apiGroups:") for line in lines) > 10
    assert all(r.why and r.scope for r in rules)
    lease = [r for r in rules if "leases" in r.resources]
    assert [(r.verbs, r.named, r.scope) for r in lease] == [(("create",), False, "the release namespace"),
                                                             (("get", "update"), True, "the release namespace")]
    nodes = next(r for r in rules if r.resources == ("nodes",))
    assert nodes.scope == "cluster-wide" and nodes.verbs == ("list", "watch")


def test_a_rule_without_its_reason_fails(tmp_path):
    chart = tmp_path / "rbac.yaml"
    text = docstables.RBAC_TEMPLATE.read_text()
    chart.write_text(text.replace('- apiGroups: [""]\n  resources: ["nodes"]',
                                  '- apiGroups: [""]\n  resources: ["secrets"]\n  verbs: ["get"]\n'
                                  '- apiGroups: [""]\n  resources: ["nodes"]'))
    with pytest.raises(docstables.DocsTableError, match=r"rbac.yaml:\d+: an RBAC rule without a `# why:` comment"):
        docstables.rbac_block(chart)


def test_a_changed_rule_changes_the_table(tmp_path):
    chart = tmp_path / "rbac.yaml"
    chart.write_text(docstables.RBAC_TEMPLATE.read_text().replace('resources: ["nodes"]\n  verbs: ["list", "watch"]',
                                                         'resources: ["nodes"]\n  verbs: ["get", "list", "watch"]'))
    text = doc("rbac")
    filled, _ = docstables.fill(text, SOURCES)
    assert docstables.fill(filled, docstables.Sources(SOURCES.parser, Path(chart)))[1] == ["rbac"]


def test_the_code_map_lists_every_module_by_its_docstring(tmp_path):
    block = docstables.modules_block(docstables.REPO)
    listed = {line.split("`")[1] for line in block.splitlines()[2:]}
    on_disk = {str(p.relative_to(docstables.REPO)) for pkg in docstables.PACKAGE_DIRS for p in (docstables.REPO / pkg).rglob("*.py")
               if "__pycache__" not in p.parts}
    assert listed == on_disk and "operator/phalanx/docstables.py" in listed
    assert "| `operator/phalanx/docstables.py` | Tables in the Markdown docs that are generated from the code, so they cannot drift. |" in block
    package = tmp_path / "operator" / "phalanx"
    package.mkdir(parents=True)
    (package / "ok.py").write_text('"""Does one thing, e.g. this. And more."""\n')
    (package / "bare.py").write_text("x = 1\n")
    with pytest.raises(docstables.DocsTableError, match=r"bare\.py: the module has no docstring"):
        docstables.modules_block(tmp_path)
    (package / "bare.py").unlink()
    assert "| `operator/phalanx/ok.py` | Does one thing, e.g. this. |" in docstables.modules_block(tmp_path)


def test_phase_reasons_follow_the_deciding_conditions():
    rows = _rows(docstables.phase_reasons_block())
    assert rows["Pending"][1].startswith("`Reconciled=False`, else `Created=False`, else `Schedulable=False/Unknown`")
    assert rows["Failed"][1] == "`Failed=True`; else `Failed`"
