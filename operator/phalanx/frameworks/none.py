"""``framework: none``: the built-in runtime (``spec.model``), or a command that splits its world
itself (torchrun and the like). The torch rendezvous env every pod gets (render/pod.py) is all it
needs: no rules, env, files or ports of its own; the job succeeds as ``spec.success_roles`` says."""

from __future__ import annotations

from phalanx.api.types import Framework
from phalanx.frameworks.base import FrameworkPlugin


class NoFramework(FrameworkPlugin):
    framework = Framework.NONE


PLUGIN = NoFramework()
