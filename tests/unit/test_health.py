"""phalanx.health: what fails /healthz besides a loop that does not answer."""

import pytest

from phalanx import health
from phalanx.health import TaskView

W = health.WATCHER_PREFIX
SEEN = frozenset({W + "trainingjobs@None", W + "nodes@None"})


@pytest.mark.parametrize("tasks, problems", [
    ([TaskView(W + "trainingjobs@None", False), TaskView(W + "nodes@None", False)], []),
    ([TaskView(W + "nodes@None", False)], ["trainingjobs@None: its watch has stopped"]),
    ([TaskView(W + "trainingjobs@None", True), TaskView(W + "nodes@None", False)], ["trainingjobs@None: its watch has stopped"]),
    ([TaskView("other", False)], ["nodes@None: its watch has stopped", "trainingjobs@None: its watch has stopped"]),
])
def test_a_watch_that_ran_and_is_gone_fails_the_probe(tasks, problems):
    assert health.watcher_problems(tasks, SEEN) == problems


@pytest.mark.parametrize("alive, failing, deciding, words", [
    (True, None, None, []),
    (None, None, None, []),
    (False, None, None, ["thread has died"]),
    (True, health.REFLECTOR_STALE_SECONDS + 1, None, ["failed to list or watch"]),
    (True, 10.0, None, []),
    (True, None, health.DECIDE_STUCK_SECONDS + 1, ["decide thread is stuck"]),
    (True, None, 5.0, []),
])
def test_threads_the_job_loops_need(alive, failing, deciding, words):
    problems = health.thread_problems(alive, failing, deciding)
    assert len(problems) == len(words)
    assert all(w in p for w, p in zip(words, problems, strict=True))
