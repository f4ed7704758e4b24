"""The job's own patterns (``$PHALANX_PROGRESS_PATTERNS``: a JSON list of Python regexes, as
Katib's StdOut collector takes them): each line is searched with every pattern, and the named
groups that matched give ``step``, ``total_steps``, ``loss``, ``epoch``; any other group name is a
metric of that name (``(?P<eval_accuracy>[0-9.]+)``). A group whose text is no number is
skipped."""

from __future__ import annotations

import json
import re

from phalanx_common.collect.lines import Parsed, count, number, partial, strip_ansi

MAX_PATTERNS = 16
MAX_PATTERN_CHARS = 1000
RECORD_GROUPS = ("step", "total_steps", "loss", "epoch")


class PatternError(ValueError):
    """``$PHALANX_PROGRESS_PATTERNS`` is no JSON list of at most MAX_PATTERNS valid regexes."""


def compile_patterns(text: str) -> list[re.Pattern]:
    try:
        patterns = json.loads(text)
    except ValueError as e:
        raise PatternError(f"not JSON: {e}") from None
    if not isinstance(patterns, list) or not patterns or len(patterns) > MAX_PATTERNS:
        raise PatternError(f"not a list of 1 to {MAX_PATTERNS} patterns")
    compiled = []
    for pattern in patterns:
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
            raise PatternError(f"{str(pattern)[:80]!r}: not a string of at most {MAX_PATTERN_CHARS} characters")
        try:
            compiled.append(re.compile(pattern))
        except (re.error, RecursionError, OverflowError, ValueError) as e:  # a{4294967296}, deep nesting
            raise PatternError(f"{pattern[:80]!r}: {str(e)[:80]}") from None
        if not compiled[-1].groupindex:
            raise PatternError(f"{pattern[:80]!r}: no named group")
    return compiled


def parse(line: str, patterns: list[re.Pattern]) -> Parsed:
    text = strip_ansi(line)
    groups: dict[str, str] = {}
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            groups.update({name: value for name, value in found.groupdict().items() if value is not None})
    if not groups:
        return {}
    metrics = {name: number(value) for name, value in groups.items() if name not in RECORD_GROUPS}
    return partial(step=count(groups.get("step")), total_steps=count(groups.get("total_steps")) or None,
                   loss=number(groups.get("loss")), epoch=number(groups.get("epoch")),
                   metrics={name: value for name, value in metrics.items() if value is not None})
