"""Who is who in a parameter-server job, and joining ``torch.distributed.rpc``.

RPC rendezvous: TensorPipe over ``tcp://$MASTER_ADDR:$PHALANX_PS_PORT`` (default
``$MASTER_PORT + 1``: under torchrun the agent's store already listens on ``$MASTER_PORT``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from phalanx_common.contract import ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_WORLD_SIZE
from phalanx_runtime.env import ENV_RANK

ENV_PS_PORT = "PHALANX_PS_PORT"
RPC_TIMEOUT_S = 600.0
RPC_THREADS = 32


def server_name(i: int) -> str:
    return f"ps{i}"


def worker_name(j: int) -> str:
    return f"worker{j}"


@dataclass(frozen=True)
class Role:
    rank: int
    world_size: int
    servers: int

    @property
    def is_server(self) -> bool:
        return self.rank < self.servers

    @property
    def workers(self) -> int:
        return self.world_size - self.servers

    @property
    def index(self) -> int:
        """Server index, or worker index (the worker's data-parallel rank)."""
        return self.rank if self.is_server else self.rank - self.servers

    @property
    def name(self) -> str:
        return server_name(self.index) if self.is_server else worker_name(self.index)


def role_from_env(servers: int, env=None) -> Role:
    env = os.environ if env is None else env
    world = int(env.get(ENV_WORLD_SIZE, 1))
    if world <= servers:
        raise SystemExit(f"parallelism.parameterServer.servers {servers} needs a world size above it, got {world}")
    return Role(rank=int(env.get(ENV_RANK, 0)), world_size=world, servers=servers)


def rpc_init_method(env=None) -> str:
    env = os.environ if env is None else env
    addr = env.get(ENV_MASTER_ADDR, "127.0.0.1")
    port = env.get(ENV_PS_PORT) or str(int(env.get(ENV_MASTER_PORT, 29500)) + 1)
    return f"tcp://{addr}:{port}"


def init_rpc(role: Role) -> None:
    from torch.distributed import rpc

    opts = rpc.TensorPipeRpcBackendOptions(init_method=rpc_init_method(), num_worker_threads=RPC_THREADS,
                                           rpc_timeout=RPC_TIMEOUT_S)
    rpc.init_rpc(role.name, rank=role.rank, world_size=role.world_size, rpc_backend_options=opts)
