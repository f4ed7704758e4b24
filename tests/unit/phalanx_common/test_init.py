"""The shared package installs on its own (``pip install ./common``): its pyproject names no
dependency, packages every subpackage and keeps the repository's version."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_standalone_distribution():
    own = tomllib.loads((ROOT / "common" / "pyproject.toml").read_text())
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert own["project"]["name"] == "phalanx-common" and own["project"]["dependencies"] == []
    assert own["project"]["version"] == repository["project"]["version"]
    assert own["tool"]["setuptools"]["packages"]["find"] == {"where": ["."], "include": ["phalanx_common*"]}
    packages = {p.parent.name for p in (ROOT / "common" / "phalanx_common").rglob("__init__.py")}
    assert {"phalanx_common", "collect", "integrations"} <= packages
