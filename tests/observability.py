"""Shared by the alert, dashboard and Prometheus tests: the chart's rule and dashboard sources,
the metric names we export, PromQL helpers, and the Debian promtool/prometheus binaries."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "phalanx"
RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD_FILE = CHART / "files" / "grafana-dashboard.json"
RELEASE = "phalanx"
OPERATOR_SCRAPE_JOB = f"{RELEASE}-operator-metrics"  # the ServiceMonitor's job label
PLACEHOLDER = re.compile(r"\$\{([A-Za-z]+)\}")


def binary(name: str) -> str:
    """promtool / prometheus from PATH (Debian's `prometheus` package); skipped when missing,
    failed when CI asks for everything (PHALANX_REQUIRE_PROMETHEUS or PHALANX_REQUIRE_CLUSTER)."""
    path = shutil.which(name)
    if path:
        return path
    msg = f"{name} not found: apt-get install prometheus (Debian ships promtool and the server)"
    if os.environ.get("PHALANX_REQUIRE_PROMETHEUS") or os.environ.get("PHALANX_REQUIRE_CLUSTER"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


# ---------------------------------------------------------------------------- alert rules


def default_params() -> dict[str, str]:
    """prometheusRule.params from values.yaml, operatorSelector as the chart fills it."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    params = {k: str(v) for k, v in values["prometheusRule"]["params"].items()}
    params["operatorSelector"] = params["operatorSelector"] or f'job="{OPERATOR_SCRAPE_JOB}"'
    return params


def render_rules(**overrides: object) -> str:
    """The rule file with its placeholders filled, as templates/prometheusrule.yaml does."""
    params = {**default_params(), **{k: str(v) for k, v in overrides.items()}}
    text = PLACEHOLDER.sub(lambda m: params[m.group(1)], RULES_FILE.read_text())
    assert not PLACEHOLDER.search(text), PLACEHOLDER.search(text)
    return text


def alert_rules(text: str | None = None) -> list[dict]:
    groups = yaml.safe_load(text or render_rules())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


# ---------------------------------------------------------------------------- dashboard

GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*\w+\)$")


def dashboard() -> dict:
    return json.loads(DASHBOARD_FILE.read_text())


def dashboard_queries(namespace: str = "default", trainingjob: str = "job") -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable's selector, with Grafana's
    variables replaced by real values."""
    out = []
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            match = LABEL_VALUES.match(var["definition"])
            assert match, f"variable {var['name']}: only label_values(selector, label) is supported"
            out.append((f"variable {var['name']}", match.group(1)))
    subs = {**GRAFANA_VARIABLES, "$namespace": namespace, "$trainingjob": trainingjob}
    return [(where, _substitute(expr, subs)) for where, expr in out]


def _substitute(expr: str, subs: dict[str, str]) -> str:
    for key in sorted(subs, key=len, reverse=True):
        expr = expr.replace(key, subs[key])
    return expr


# ---------------------------------------------------------------------------- PromQL and names

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][A-Za-z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
             "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (functions, keywords and labels left out)."""
    bare = _GROUPING.sub(" ", _BRACES.sub(" ", _STRINGS.sub('""', expr)))
    return {m for m in _IDENT.findall(bare) if m.lower() not in _KEYWORDS}


def selectors(expr: str) -> list[str]:
    """Each vector selector of an expression, with its matchers (to ask Prometheus for each)."""
    text = _STRINGS.sub(lambda m: m.group(0).replace("{", "\0").replace("}", "\1"), expr)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges
    found = re.findall(r"(?<![\w.:])([A-Za-z_:][A-Za-z0-9_:]*)(?![\w:])(\{[^}]*\})?(?!\s*\()", _GROUPING.sub(" ", text))
    out = []
    for name, matchers in found:
        if name.lower() in _KEYWORDS:
            continue
        out.append((name + matchers).replace("\0", "{").replace("\1", "}"))
    return out


def exported_names() -> set[str]:
    """Every sample name the operator and the runtime export."""
    from prometheus_client import REGISTRY

    import phalanx.jobmetrics  # noqa: F401 - registers the per-job collector
    import phalanx.metrics  # noqa: F401 - registers the fleet metrics
    from phalanx_runtime.components.metrics import exported_names as runtime_names

    names = set(runtime_names())
    for family in REGISTRY.collect():
        if not family.name.startswith("phalanx_"):
            continue
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
        else:
            names.add(family.name)
    return names
