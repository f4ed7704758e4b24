"""Environment names the runtime reads or sets that the operator does not render.

The operator's contract with the pods (``PHALANX_*``, the Kubeflow ``PET_*`` and torchrun names it
renders) lives in ``phalanx.constants`` and is imported from there, never re-spelled. This module
holds the rest: torchrun's worker environment, Slurm's, torch elastic's knobs the launcher sets, and
the runtime's own names (set by the launcher, ``phalanx local``, tests or benchmarks). Torch-free.
"""

from __future__ import annotations

# torchrun → each worker (the launcher sets them itself in Slurm direct mode and in spawn.run_ranks).
ENV_RANK = "RANK"
ENV_LOCAL_RANK = "LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
ENV_GROUP_RANK = "GROUP_RANK"
# torch elastic's agent, set by the launcher before it runs torchrun.
ENV_AGENT_SIGNALS = "PET_SIGNALS_TO_HANDLE"
ENV_AGENT_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
ENV_OMP_NUM_THREADS = "OMP_NUM_THREADS"

# Slurm (read by the launcher when it runs under srun).
SLURM_NTASKS = "SLURM_NTASKS"
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
ENV_RESULT_FILE = "PHALANX_RESULT_FILE"  # rank 0 writes its TrainResult summary here (phalanx local)
ENV_DEBUG_FULL_STATE = "PHALANX_DEBUG_FULL_STATE"  # rank 0 dumps the full state at the end (tests)
ENV_CHECKPOINT_TEST_WRITE_DELAY = "PHALANX_CHECKPOINT_TEST_WRITE_DELAY"  # seconds, kill tests only
ENV_CPU_PEAK_FLOPS = "PHALANX_CPU_PEAK_FLOPS"  # MFU denominator on CPU instead of measuring it
ENV_CORPUS_MAX_BYTES = "PHALANX_CORPUS_MAX_BYTES"  # size of the built-in text corpus
