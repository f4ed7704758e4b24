"""``spec.progress``: how a command job's progress is read (docs/your-code.md).

The built-in runtime reports its progress itself; a command job's script reports through
``phalanx_common.report`` (collector ``client``) or has its output read by
``python3 -m phalanx_common.collect`` (every other collector), which the operator wraps around the
workers' command. Either way rank 0 serves the same record the runtime does, so the job gets the
status, metrics, hang detection and sweeps the built-in runtime gets.

CEL cannot compile a Python regular expression: the patterns' compile check is an operator-only
rule (``cel`` None), the rest has its CEL twin. This module imports no other API model
(api/types.py imports it).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from phalanx import constants
from phalanx.api import patterns as formats
from phalanx.api.base import Model, bounded_str
from phalanx.api.rules import Rule

MAX_PATTERNS = 8
MAX_PATTERN_LENGTH = 512
# Named groups the collector reads as the record's own fields; any other group name is a metric's.
PATTERN_FIELDS = ("step", "loss", "total_steps", "epoch")
_METRIC_NAME = re.compile(constants.METRIC_NAME_PATTERN)


def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a regex collector's pattern (None: it can): it must compile as a
    Python regular expression and have a named group, each named step, loss, total_steps, epoch or
    a metric name."""
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        return f"does not compile: {str(exc)[:80]}"
    if not compiled.groupindex:
        return "has no named group such as (?P<step>\\d+) or (?P<loss>[0-9.e+-]+)"
    bad = [name for name in compiled.groupindex if name not in PATTERN_FIELDS and not _METRIC_NAME.fullmatch(name)]
    return f"group name {bad[0][:40]!r} is not a metric name (ASCII, at most 64 characters)" if bad else None


def patterns_compile(patterns: list[str] | None) -> bool:
    return all(pattern_problem(p) is None for p in patterns or ())


class ProgressSpec(Model):
    """Command jobs: where rank 0's progress comes from (the built-in runtime reports its own)."""

    collector: constants.Collector = Field(
        ..., description="client: the script reports through phalanx_common.report (or a ready-made callback); "
        "huggingface, lightning, torchtitan, deepspeed: the workers' command runs under python3 -m "
        f"{constants.COLLECT_MODULE}, which reads that library's log lines on node 0; regex: the same, with the "
        "job's own patterns; jsonl: the same, reading the JSON-lines file the script appends to.")
    patterns: list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_LENGTH)]] | None = Field(
        None, min_length=1, max_length=MAX_PATTERNS,
        description="Collector regex: Python regular expressions matched against each log line; named groups "
        "step, loss, total_steps and epoch fill those fields, any other named group is a metric of its name, "
        "e.g. 'step (?P<step>\\d+) .* loss (?P<loss>[0-9.e+-]+)'.")
    file: str | None = bounded_str(formats.ABSOLUTE_PATH, 1024, default=None,
                                   description="Collector jsonl: the file the script appends one JSON object per line "
                                   "to (keys step, loss, total_steps, epoch; other numeric keys are metrics).")

    checks = (
        Rule(f"(self.collector == '{constants.Collector.REGEX}') == has(self.patterns)",
             "progress.patterns is required with collector regex and allowed with it only",
             lambda p: (p.collector == constants.Collector.REGEX) == (p.patterns is not None), ".patterns"),
        Rule(f"(self.collector == '{constants.Collector.JSONL}') == has(self.file)",
             "progress.file is required with collector jsonl and allowed with it only",
             lambda p: (p.collector == constants.Collector.JSONL) == (p.file is not None), ".file"),
        Rule(None, "progress.patterns: each must compile as a Python regular expression and have a named group, "
             f"each named {', '.join(PATTERN_FIELDS)} or a metric name (ASCII, at most 64 characters)",
             lambda p: patterns_compile(p.patterns), ".patterns"),
    )


PROGRESS_RULES = (
    Rule("!has(self.progress) || !has(self.model)",
         "spec.progress is for command jobs (spec.command without spec.model): the built-in runtime reports "
         "its progress itself",
         lambda s: s.progress is None or s.model is None, ".progress"),
)


def wraps_command(progress: ProgressSpec | None) -> bool:
    """The workers' command runs under the log collector (every collector but client)."""
    return progress is not None and progress.collector != constants.Collector.CLIENT


def collected(command: list[str], python: str = "python3") -> list[str]:
    """``command`` run under the log collector: ``python -m phalanx_common.collect -- command``."""
    return [python, "-m", constants.COLLECT_MODULE, "--", *command]
