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


def test_the_probe_handler_fails_once_a_watch_task_it_saw_is_gone():
    """handlers.serving over real asyncio tasks named as kopf names its watchers."""
    import asyncio

    import kopf

    from phalanx import handlers, startup

    async def main():
        memo = startup.new_memo()
        watch = asyncio.create_task(asyncio.Event().wait(), name=W + "trainingjobs.v1alpha1.phalanx.dev@None")
        await asyncio.sleep(0)
        assert await handlers.serving(memo=memo) == "ok"
        watch.cancel()
        await asyncio.sleep(0)
        with pytest.raises(kopf.PermanentError, match="trainingjobs.v1alpha1.phalanx.dev@None: its watch has stopped"):
            await handlers.serving(memo=memo)
        memo.decider.shutdown()

    asyncio.run(main())
