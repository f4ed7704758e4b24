"""RPC calls that count the tensor bytes they send and receive (payload tensors only: the
pickled envelope and TensorPipe's framing are not counted)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(v) for v in obj)
    return 0


@dataclass
class Traffic:
    sent: int = 0
    received: int = 0

    def call_async(self, to: str, fn, *args):
        """``rpc_async(to, fn, args)`` whose result's bytes count when ``wait`` returns it."""
        from torch.distributed import rpc

        self.sent += tensor_bytes(args)
        return rpc.rpc_async(to, fn, args=args)

    def wait(self, fut):
        out = fut.wait()
        self.received += tensor_bytes(out)
        return out

    def call(self, to: str, fn, *args):
        return self.wait(self.call_async(to, fn, *args))

    def snapshot(self) -> tuple[int, int]:
        return self.sent, self.received
