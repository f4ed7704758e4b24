"""The collector's process: ``python3 -m phalanx_common.collect -- <command...>``.

On a pod whose ``$NODE_RANK`` is set and not "0" it becomes the command (``os.execvp``): only node
rank 0 reports. On node rank 0 (or with no ``$NODE_RANK``: a single local process) it runs the
command as its child and:

- passes the child's stdout and stderr through byte for byte (its own stdout and stderr);
- splits them into lines on ``\\n`` and ``\\r`` (bounded: lines.MAX_LINE_BYTES) and feeds what the
  collector's parser reads from each to a reporter (phalanx_common.report) — or, for ``jsonl``,
  the lines appended to ``$PHALANX_PROGRESS_FILE``; a step lower than one already read (a bar
  reset, an evaluation's bar) is not taken;
- serves the record on ``$PHALANX_PROGRESS_PORT`` (the child's environment goes without it, so a
  script that also reports itself leaves the port to this process);
- forwards SIGTERM and SIGINT to the child, and exits with the child's code (128 + the signal when
  a signal ended it), after writing the final record to ``$PHALANX_TERMINATION_LOG``.

Nothing it reads can stop it or the child: a parser's exception, an unknown collector or invalid
patterns leave the output passed through and the progress unread (one line on stderr says why).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence

from phalanx_common.collect import CollectorError, LineParser, parser_for
from phalanx_common.collect.jsonl import Tail
from phalanx_common.collect.jsonl import parse as parse_jsonl
from phalanx_common.collect.lines import LineSplitter, Parsed
from phalanx_common.contract import (
    ENV_NODE_RANK,
    ENV_PROGRESS_COLLECTOR,
    ENV_PROGRESS_FILE,
    ENV_PROGRESS_PORT,
    ENV_PYTHONUNBUFFERED,
    EXIT_PREEMPTED,
    Collector,
    ProgressKey,
)
from phalanx_common.report import Reporter

USAGE = "usage: python3 -m phalanx_common.collect -- <command> [args...]"
READ_BYTES = 64 * 1024
TAIL_POLL_SECONDS = 1.0
DRAIN_SECONDS = 5.0  # after the child exits: a grandchild may still hold its output open
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_NOT_FOUND = 127  # as a shell exits for a command it cannot find
EXIT_NOT_EXECUTABLE = 126


def _warn(message: str) -> None:
    sys.stderr.write(f"phalanx collect: {message}\n")
    sys.stderr.flush()


class Feed:
    """Parsed lines → the reporter, in order, from both streams; a step below the highest one
    read is dropped with the total read with it (an evaluation's bar after training counts its own
    batches), the rest of that line's values are kept."""

    def __init__(self, reporter: Reporter, parse: LineParser | None):
        self.reporter, self.parse = reporter, parse
        self._lock = threading.Lock()
        self._step = -1

    def line(self, text: str, parse: LineParser | None = None) -> None:
        parse = parse or self.parse
        if parse is None:
            return
        try:
            parsed = parse(text)
            if parsed:
                self.apply(parsed)
        except Exception:  # noqa: BLE001 - a parser's bug (an exception, or no record) must not stop the output
            return

    def apply(self, parsed: Parsed) -> None:
        with self._lock:
            step = parsed.get(ProgressKey.STEP)
            total = parsed.get(ProgressKey.TOTAL_STEPS)
            if step is not None:
                if step < self._step:
                    step = total = None
                else:
                    self._step = step
            self.reporter.report(step, parsed.get(ProgressKey.LOSS), total_steps=total,
                                 epoch=parsed.get(ProgressKey.EPOCH), metrics=parsed.get(ProgressKey.METRICS))


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:  # our own output is gone: keep reading, so the child never blocks on it
            return False
        view = view[written:]
    return True


def pump(source: int, sink: int, feed: Feed) -> None:
    """Copy ``source`` to ``sink`` until EOF, handing each line to ``feed``."""
    lines = LineSplitter()
    passing = True
    while True:
        try:
            data = os.read(source, READ_BYTES)
        except InterruptedError:
            continue
        except OSError:
            break
        if not data:
            break
        passing = passing and _write_all(sink, data)
        for line in lines.feed(data):
            feed.line(line)
    for line in lines.flush():
        feed.line(line)


def tail(path: str, feed: Feed, done: threading.Event) -> None:
    """Feed the lines appended to ``path`` until ``done``, then once more."""
    follow = Tail(path)
    while True:
        stop = done.wait(TAIL_POLL_SECONDS)
        for line in follow.read():
            feed.line(line, parse_jsonl)
        if stop:
            return


def exit_code(returncode: int) -> int:
    """A child ended by signal N (``-N``) → 128 + N, as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


def final_phase(code: int) -> str:
    return "Succeeded" if code == 0 else "Preempted" if code == EXIT_PREEMPTED else "Failed"


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    out = {k: v for k, v in env.items() if k != ENV_PROGRESS_PORT}
    out.setdefault(ENV_PYTHONUNBUFFERED, "1")  # a Python child's lines arrive as printed, not per 8 KiB
    return out


def main(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    command = list(argv[1:] if argv and argv[0] == "--" else argv)
    if not command:
        _warn(USAGE)
        return 2
    if (env.get(ENV_NODE_RANK) or "0").strip() != "0":
        return become(command)  # only node rank 0 reports; the others run the command as it is
    try:
        parse = parser_for(env)
    except CollectorError as e:
        _warn(f"{e}; the command's progress is not read")
        parse = None
    progress_file = env.get(ENV_PROGRESS_FILE) if env.get(ENV_PROGRESS_COLLECTOR) == Collector.JSONL else None
    reporter = Reporter(env, active=True)
    reporter.start()  # the endpoint answers from the start, before any progress is read
    return run(command, Feed(reporter, parse), child_env(env), progress_file)


def _not_started(command: list[str], error: OSError) -> int:
    """The exit code of a command that could not start, as a shell's (one line on stderr says why)."""
    _warn(f"{command[0]}: {error.strerror or error}")
    return EXIT_NOT_FOUND if isinstance(error, FileNotFoundError) else EXIT_NOT_EXECUTABLE


def become(command: list[str]) -> int:
    """Replace this process with ``command``; returns only when it cannot start (its exit code)."""
    try:
        os.execvp(command[0], command)
    except OSError as e:
        return _not_started(command, e)


def run(command: list[str], feed: Feed, env: Mapping[str, str], progress_file: str | None = None) -> int:
    """Run ``command`` as described in the module's docstring; its exit code (128 + N for signal N)."""
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env))
    except OSError as e:
        return _not_started(command, e)
    previous = {sig: signal.signal(sig, lambda signum, _frame: _forward(child, signum)) for sig in FORWARDED_SIGNALS}
    done = threading.Event()
    workers = [threading.Thread(target=pump, args=(child.stdout.fileno(), 1, feed), daemon=True),
               threading.Thread(target=pump, args=(child.stderr.fileno(), 2, feed), daemon=True)]
    if progress_file:
        workers.append(threading.Thread(target=tail, args=(progress_file, feed, done), daemon=True))
    for worker in workers:
        worker.start()
    try:
        code = exit_code(child.wait())
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    done.set()
    for worker in workers:
        worker.join(DRAIN_SECONDS)
    feed.reporter.finish(final_phase(code))
    return code


def _forward(child: subprocess.Popen, signum: int) -> None:
    try:
        child.send_signal(signum)
    except ProcessLookupError:
        pass
