"""Phalanx: gang-scheduled, topology-aware distributed training on Kubernetes.

Nothing in this package's import path may import kopf or the kubernetes client at the top level:
the runtime image imports ``phalanx.api`` and ``phalanx.constants`` only.
"""

__version__ = "0.1.0"
