"""phalanx_common.proc: what the process-tree helpers read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from phalanx_common import proc

pytestmark = pytest.mark.skipif(not proc.LINUX, reason="reads /proc")


def test_name_state_and_parent_of_a_child_and_of_a_gone_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert proc.parent(child.pid) == os.getpid()
        # a live state: running, sleeping, or D while it reads its modules from a busy disk
        assert proc.comm(child.pid).startswith("python") and proc.state(child.pid) in ("R", "S", "D")
        assert child.pid in proc.descendants(os.getpid()) and proc.alive(child.pid)
    finally:
        child.kill()
    child.wait()
    assert proc.state(child.pid) is None and proc.comm(child.pid) is None and proc.parent(child.pid) is None
