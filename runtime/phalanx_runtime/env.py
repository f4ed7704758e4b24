"""Environment names the runtime reads or sets that the operator does not render.

The operator's contract with the pods (``PHALANX_*``, the Kubeflow ``PET_*`` and torchrun names it
renders, and what ``phalanx local`` sets) lives in ``phalanx_common.contract`` and is imported from
there, never re-spelled. This module holds the rest: Slurm's, torch elastic's knobs the launcher
sets, and the runtime's own names (set by the launcher, tests or benchmarks). Torch-free.
"""

from __future__ import annotations

# torchrun's worker env, Slurm's task count, the thread count and the result file: `phalanx local`
# sets or scrubs them too, so they are the contract's (re-exported here).
from phalanx_common.contract import (  # noqa: F401
    ENV_GROUP_RANK,
    ENV_LOCAL_RANK,
    ENV_LOCAL_WORLD_SIZE,
    ENV_OMP_NUM_THREADS,
    ENV_RANK,
    ENV_RESULT_FILE,
    SLURM_NTASKS,
)

# torch elastic's agent, set by the launcher before it runs torchrun.
ENV_AGENT_SIGNALS = "PET_SIGNALS_TO_HANDLE"
ENV_AGENT_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"

# Slurm (read by the launcher when it runs under srun).
SLURM_NNODES = "SLURM_NNODES"
SLURM_JOB_NUM_NODES = "SLURM_JOB_NUM_NODES"
SLURM_NODEID = "SLURM_NODEID"
SLURM_PROCID = "SLURM_PROCID"
SLURM_LOCALID = "SLURM_LOCALID"
SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_NODELIST = "SLURM_NODELIST"

# The runtime's own.
ENV_BACKEND = "PHALANX_BACKEND"  # process-group backend the launcher chose for its workers
ENV_DEBUG_FULL_STATE = "PHALANX_DEBUG_FULL_STATE"  # rank 0 dumps the full state at the end (tests)
ENV_CHECKPOINT_TEST_WRITE_DELAY = "PHALANX_CHECKPOINT_TEST_WRITE_DELAY"  # seconds, kill tests only
ENV_EXPORT_MAX_SHARD_BYTES = "PHALANX_EXPORT_MAX_SHARD_BYTES"  # in-job Hugging Face export: bytes per shard file
ENV_CPU_PEAK_FLOPS = "PHALANX_CPU_PEAK_FLOPS"  # MFU denominator on CPU instead of measuring it
ENV_CORPUS_MAX_BYTES = "PHALANX_CORPUS_MAX_BYTES"  # size of the built-in text corpus
ENV_WORKER_START = "PHALANX_WORKER_START"  # how torchrun starts the workers: forkserver (default) or subprocess
