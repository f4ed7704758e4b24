"""Zero-code progress for a command job: ``python3 -m phalanx_common.collect -- <command...>`` runs
the command, passes its output through unchanged and reads its progress from it (``run``), with
the parser ``$PHALANX_PROGRESS_COLLECTOR`` names — one module per format, each a pure function
line → partial record: ``huggingface``, ``lightning``, ``torchtitan``, ``deepspeed``, ``regex``
(``$PHALANX_PROGRESS_PATTERNS``), ``jsonl`` (``$PHALANX_PROGRESS_FILE``, a file rather than the
output). What it reads feeds the reporter of phalanx_common.report, so the record, the endpoint
and the final write are those of every other job."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from phalanx_common.collect import deepspeed, huggingface, lightning, regex, torchtitan
from phalanx_common.collect.lines import Parsed
from phalanx_common.contract import ENV_PROGRESS_COLLECTOR, ENV_PROGRESS_PATTERNS, Collector

LineParser = Callable[[str], Parsed]
LINE_PARSERS: dict[str, LineParser] = {
    Collector.HUGGINGFACE: huggingface.parse,
    Collector.LIGHTNING: lightning.parse,
    Collector.TORCHTITAN: torchtitan.parse,
    Collector.DEEPSPEED: deepspeed.parse,
}


class CollectorError(ValueError):
    """The collector's env names no collector this module runs, or its patterns are invalid."""


def parser_for(env: Mapping[str, str]) -> LineParser | None:
    """The line parser of ``$PHALANX_PROGRESS_COLLECTOR``; None for ``jsonl`` (it reads a file,
    not the output)."""
    name = (env.get(ENV_PROGRESS_COLLECTOR) or "").strip()
    if name in LINE_PARSERS:
        return LINE_PARSERS[name]
    if name == Collector.REGEX:
        try:
            patterns = regex.compile_patterns(env.get(ENV_PROGRESS_PATTERNS) or "")
        except regex.PatternError as e:
            raise CollectorError(f"${ENV_PROGRESS_PATTERNS}: {e}") from None
        return lambda line: regex.parse(line, patterns)
    if name == Collector.JSONL:
        return None
    known = ", ".join(sorted([*LINE_PARSERS, Collector.REGEX, Collector.JSONL]))
    raise CollectorError(f"${ENV_PROGRESS_COLLECTOR}={name!r}: not one of {known}")
