"""Phalanx training runtime: config → launcher → process group → mesh → model → parallelize →
train loop. Layout as torchtitan's: ``components/`` (checkpoint, data, optimizer, loss, metrics,
progress), ``distributed/`` (process group, ParallelDims, FSDP/DDP, pipeline, precision, clipping),
``models/<family>/`` (a model and its parallelize); docs/runtime.md has the full table.

Built on torch-native pieces (DeviceMesh, FSDP2, DDP, ZeroRedundancyOptimizer, DTensor TP,
torch.distributed.pipelining, torchrun). It never imports the operator package (``phalanx``): its
config is its own (``config.py``, read from the JSON the operator renders), and what both sides
share — the env contract, model presets, layout rules, process helpers — is ``phalanx_common``.
``phalanx local`` (the operator's ``phalanx.local``) starts it by command line.
"""

__all__ = ["__version__"]
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("phalanx")  # pyproject.toml's: the version's one home
except PackageNotFoundError:  # run from a bare checkout on PYTHONPATH, not installed
    __version__ = "0+unknown"
