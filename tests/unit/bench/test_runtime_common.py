"""A benchmark run replaces its own result in docs/benchmarks.md (a page of current results)."""

from bench.runtime_common import write_result

PAGE = """# Benchmarks

## Runtime

### Runtime (a): x

<!-- bench: overhead -->
old figures
<!-- end bench -->

Prose about the figures stays.

## Checkpoints
"""


def test_a_run_replaces_its_previous_result_and_keeps_the_prose(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(PAGE)
    write_result("overhead", "### Runtime (a): x", "new figures", doc=doc)
    write_result("overhead", "### Runtime (a): x", "newer figures", doc=doc)
    text = doc.read_text()
    assert "old figures" not in text and "new figures" not in text
    assert text.count("newer figures") == 1 and "Prose about the figures stays." in text
    assert text.index("newer figures") < text.index("## Checkpoints")


def test_a_missing_block_goes_under_its_heading_made_when_missing(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(PAGE)
    write_result("chaos-kills", "## Checkpoints", "kills table", doc=doc)
    write_result("cpu", "### Runtime (d): y", "tokens table", parent="## Runtime", doc=doc)
    text = doc.read_text()
    assert text.index("## Checkpoints") < text.index("<!-- bench: chaos-kills -->\nkills table\n<!-- end bench -->")
    assert text.count("## Runtime\n") == 1 and "### Runtime (d): y\n\n<!-- bench: cpu -->\ntokens table" in text
    assert text.index("## Runtime") < text.index("### Runtime (d)") < text.index("## Checkpoints")  # under its parent
