"""Phalanx training runtime: config → launcher → process group → mesh → model → parallelize →
train loop. Layout as torchtitan's: ``components/`` (checkpoint, data, optimizer, loss, metrics,
progress), ``distributed/`` (process group, ParallelDims, FSDP/DDP, pipeline, precision, clipping),
``models/<family>/`` (a model and its parallelize); docs/runtime.md has the full table.

Built on torch-native pieces (DeviceMesh, FSDP2, DDP, ZeroRedundancyOptimizer, DTensor TP,
torch.distributed.pipelining, torchrun). From the operator package the pod path imports only
``phalanx.api``, ``phalanx.constants`` and ``phalanx.proc``; ``local.py`` also ``phalanx.render``
(the pod's env, for local nodes).
"""

__all__ = ["__version__"]
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("phalanx")  # pyproject.toml's: the version's one home
except PackageNotFoundError:  # run from a bare checkout on PYTHONPATH, not installed
    __version__ = "0+unknown"
