"""Phalanx training runtime: config → launcher → mesh → model → parallelize → train loop.

Built on torch-native pieces (DeviceMesh, FSDP2, DDP, ZeroRedundancyOptimizer, DTensor TP,
torch.distributed.pipelining, torchrun). Imports only ``phalanx.api`` and ``phalanx.constants``
from the operator package.
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
