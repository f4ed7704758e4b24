"""Set-up of the workers' forkserver (``phalanx_runtime.workers``): the first module it imports,
and imported nowhere else, since importing it changes the process. It makes the forkserver die
with the launcher that started it, and gives each worker it forks what torchrun's subprocess
workers have: a session of its own (a terminal's ^C reaches only the launcher, which stops the
workers with SIGTERM so that they checkpoint) and death with its parent, now the forkserver
(``$PHALANX_PARENT_PID``, which the worker's ``train.main`` ties itself to).

What the forkserver imports after this must neither start threads nor initialise CUDA: a fork
copies only the forking thread, and a child cannot use CUDA initialised before the fork. Torch
starts its CPU thread pools at the first parallel operation and CUDA at the first use, not on
import.
"""

from __future__ import annotations

import contextlib
import os
import signal

from phalanx_common.contract import ENV_PARENT_PID
from phalanx_runtime.lifetime import die_with_parent, parent_pid_from_env


def _own_session() -> None:
    with contextlib.suppress(OSError):  # already a session leader: nothing to do
        os.setsid()


def become_the_workers_parent() -> None:
    """Die with the launcher (``$PHALANX_PARENT_PID``), and be the parent the workers die with."""
    die_with_parent(signal.SIGKILL, parent_pid_from_env())
    os.environ[ENV_PARENT_PID] = str(os.getpid())
    os.register_at_fork(after_in_child=_own_session)


become_the_workers_parent()
