"""Pure builders: TrainingJob → Kubernetes manifests (dicts). No I/O, no kubernetes client."""

from phalanx.render.job import render_children

__all__ = ["render_children"]
