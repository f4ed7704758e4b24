"""Rank 0's progress record, its endpoint and its final write, for the trainer: the one
implementation is the shared package's (phalanx_common.progress), which the reporting client and
the log collectors serve too."""

from __future__ import annotations

from phalanx_common.progress import Progress, ProgressServer, write_final

__all__ = ["Progress", "ProgressServer", "write_final"]
