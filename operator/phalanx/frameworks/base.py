"""The interface of a framework plugin: what one ``spec.framework`` adds to a job.

A plugin validates (its own rules, the ones the CRD carries as CEL), renders (what the framework
adds to every pod, to the job's ConfigMap and to its Service) and observes (which pods decide that
the job succeeded). The base class is the framework that adds nothing; a plugin overrides what its
framework needs. Plugins are stateless; ``phalanx.frameworks.plugin_for`` picks one.
"""

from __future__ import annotations

from typing import Any, ClassVar

from phalanx.api.rules import Rule, broken
from phalanx.api.slots import Slot
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.problems import Problem


class FrameworkPlugin:
    framework: ClassVar[Framework]
    # The framework's own rules (api/<framework>.py), CEL in the CRD and Python in validate.
    rules: ClassVar[tuple[Rule, ...]] = ()

    # --- validate ------------------------------------------------------------------------
    def validate(self, spec: TrainingJobSpec) -> list[Problem]:
        """Every rule of this framework that ``spec`` breaks, named by its field (``spec.<field>``),
        as ``phalanx validate`` words it; the API server refuses the same (its CEL twin)."""
        return [Problem(field, message, "api" if enforced else "operator")
                for field, message, enforced in broken(self.rules, spec, "spec")]

    # --- render --------------------------------------------------------------------------
    def job_env(self, spec: TrainingJobSpec) -> list[dict[str, Any]]:
        """Env of every pod of the job, after the job's own (config paths)."""
        return []

    def slot_env(self, job: TrainingJob, slot: Slot, master_port: int) -> list[dict[str, Any]]:
        """Env of the pod of ``slot``, after its role's (the framework's cluster wiring)."""
        return []

    def container_ports(self, job: TrainingJob) -> list[dict[str, Any]]:
        """Ports the trainer container declares besides rendezvous, progress and metrics."""
        return []

    def service_ports(self, job: TrainingJob) -> list[dict[str, Any]]:
        """Ports the headless Service publishes besides rendezvous, progress and metrics."""
        return []

    def config_files(self, spec: TrainingJobSpec) -> dict[str, str]:
        """Files of the job's ConfigMap besides the runtime config (mounted at /etc/phalanx)."""
        return {}

    # --- observe -------------------------------------------------------------------------
    def success_roles(self, spec: TrainingJobSpec) -> tuple[str, ...]:
        """The roles whose pods must all exit 0 for the job to succeed."""
        return spec.success_roles
