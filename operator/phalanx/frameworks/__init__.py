"""Framework plugins: one per ``spec.framework``, each in its own module (validate, render,
observe: ``frameworks/base.py``). Callers ask :func:`plugin_for` instead of comparing names.

Layer: above ``api`` (a plugin's rules are the API's, api/<framework>.py, so the CRD carries them
as CEL), below ``render`` (which adds what the job's plugin renders to its pods, ConfigMap and
Service).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from phalanx.api.types import Framework, TrainingJobSpec
from phalanx.frameworks import deepspeed, horovod, none, tensorflow
from phalanx.frameworks.base import FrameworkPlugin

__all__ = ["PLUGINS", "FrameworkPlugin", "plugin_for"]

PLUGINS: Mapping[Framework, FrameworkPlugin] = MappingProxyType(
    {module.PLUGIN.framework: module.PLUGIN for module in (none, deepspeed, tensorflow, horovod)})


def plugin_for(spec: TrainingJobSpec) -> FrameworkPlugin:
    """The plugin of ``spec.framework``."""
    return PLUGINS[Framework(spec.framework)]
