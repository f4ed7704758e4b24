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

import functools
import re

# the parse tree of a pattern (class_cost): the re module has no public one
from re import _parser as regex_parser
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
# Compiling a character class walks every code point of its ranges (each case-folded under (?i):
# [\x00-\uffff] takes ~16 ms) and a class with a member past Latin-1 builds a 64 Ki-entry map
# (~0.6 ms): 512 characters of either would hold the operator for a second a pattern. The cost of
# a pattern's classes, in code points of a range, is bounded (CLASS_COST_LIMIT: ~16 ms at most).
WIDE_CLASS_COST = 2400  # a class with a member past U+00FF, in code points of a range
CLASS_COST_LIMIT = 1 << 16


def class_cost(parsed: regex_parser.SubPattern) -> int:
    """What compiling the character classes of a parsed pattern costs: the code points of its
    ranges, and WIDE_CLASS_COST for each class with a member past Latin-1."""
    cost, stack = 0, [parsed.data]
    while stack:  # a walk of the whole tree, without recursion (groups nest hundreds deep)
        node = stack.pop()
        if isinstance(node, regex_parser.SubPattern):
            stack.append(node.data)
        elif isinstance(node, tuple) and len(node) == 2 and node[0] is regex_parser.IN:
            members = [(av, av) if op is regex_parser.LITERAL else av for op, av in node[1]
                       if op in (regex_parser.LITERAL, regex_parser.RANGE)]
            cost += sum(high - low + 1 for low, high in members if low != high)
            cost += WIDE_CLASS_COST if any(high > 0xFF for _, high in members) else 0
        elif isinstance(node, list | tuple):
            stack.extend(node)
    return cost


@functools.lru_cache(maxsize=1024)  # every pass validates the job: its patterns are checked once
def pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be a regex collector's pattern (None: it can): it must compile as a
    Python regular expression, at a bounded cost (CLASS_COST_LIMIT), and have a named group, each
    named step, loss, total_steps, epoch or a metric name."""
    try:
        if class_cost(regex_parser.parse(pattern)) > CLASS_COST_LIMIT:
            return ("has character classes too wide to compile at once (a range such as [\\x00-\\uffff], or "
                    "many classes of characters past U+00FF): use \\S, . or a narrower class")
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
        Rule(None, "progress.patterns: each must compile as a Python regular expression (its character classes "
             "not too wide to compile at once) and have a named group, "
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
