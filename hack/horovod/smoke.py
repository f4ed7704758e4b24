#!/usr/bin/env python3
"""Horovod (gloo, no MPI) without horovodrun and without ssh: the recipe a pod would run.

Run it with the horovod venv's python (hack/horovod/venv.sh prints its dir):

    $(hack/horovod/venv.sh)/bin/python hack/horovod/smoke.py            # 2 "pods" x 1 process
    $(hack/horovod/venv.sh)/bin/python hack/horovod/smoke.py --hosts pod-0:2   # 1 "pod" x 2
    $(hack/horovod/venv.sh)/bin/python hack/horovod/smoke.py --hosts pod-0:2,pod-1:2

Three roles, the same ones a Kubernetes operator would render:

  serve   the rendezvous server: horovod's own RendezvousHTTPServer (an HTTP key/value store,
          pure Python, from horovod.runner.http.http_server) bound to a FIXED port (horovodrun's
          RendezvousServer.start() picks a random one, which a Service cannot name), initialised
          with the host allocation plan so that each gloo scope is cleared once all its members
          have finished connecting (needed for a second hvd.init() against the same server).
  worker  hvd.init() from HOROVOD_* env only, allreduce, a few DistributedOptimizer steps.
  (none)  the local driver: starts `serve` and one `worker` process per slot with the env that
          horovodrun's gloo launcher would have put on its ssh command line, and checks results.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time


def plan(hosts: str):
    """'pod-0:1,pod-1:1' -> horovod's SlotInfo list (rank, local/cross rank and sizes)."""
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

    parsed = parse_hosts(hosts)
    return get_host_assignments(parsed, sum(h.slots for h in parsed))


def slot_env(slot, addr: str, port: int) -> dict[str, str]:
    """Everything horovod needs per process: horovodrun's create_run_env_vars +
    create_slot_env_vars, minus HOROVOD_GLOO_IFACE (unset: gloo listens on the address the
    machine's own hostname resolves to, a pod's IP in Kubernetes; see docs/horovod.md)."""
    return {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_HOSTNAME": slot.hostname,
        "HOROVOD_RANK": str(slot.rank),
        "HOROVOD_SIZE": str(slot.size),
        "HOROVOD_LOCAL_RANK": str(slot.local_rank),
        "HOROVOD_LOCAL_SIZE": str(slot.local_size),
        "HOROVOD_CROSS_RANK": str(slot.cross_rank),
        "HOROVOD_CROSS_SIZE": str(slot.cross_size),
    }


def serve(hosts: str, port: int, ready_file: str | None) -> None:
    import threading

    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    httpd = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
    httpd.init(plan(hosts))
    print(f"[rendezvous] listening on :{httpd.server_address[1]} for {hosts}", flush=True)
    if ready_file:
        with open(ready_file, "w") as f:
            f.write(str(httpd.server_address[1]))
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    t.join()


def worker(steps: int) -> None:
    import horovod.torch as hvd
    import torch

    t0 = time.time()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    tag = (f"[rank {rank}/{size} local {hvd.local_rank()}/{hvd.local_size()} "
           f"cross {hvd.cross_rank()}/{hvd.cross_size()}]")
    print(f"{tag} hvd.init() {time.time() - t0:.2f}s, gloo_built={hvd.gloo_built()} "
          f"mpi_built={hvd.mpi_built()} gloo_enabled={hvd.gloo_enabled()}", flush=True)

    s = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="ones")
    assert s.item() == size, s
    a = hvd.allreduce(torch.tensor([float(rank)]), name="avg")  # default op: Average
    assert abs(a.item() - (size - 1) / 2) < 1e-6, a
    g = hvd.allgather(torch.tensor([rank]), name="gather")
    assert g.tolist() == list(range(size)), g
    print(f"{tag} allreduce(ones, Sum)={s.item()} allreduce(rank, Average)={a.item()} "
          f"allgather={g.tolist()}", flush=True)

    # Data-parallel training, horovod-style: broadcast initial state, DistributedOptimizer.
    torch.manual_seed(1234 + rank)  # different init per rank: broadcast must fix it
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    gen = torch.Generator().manual_seed(7)
    full_x = torch.randn(8 * size, 4, generator=gen)
    full_y = full_x.sum(dim=1, keepdim=True)
    x, y = full_x[rank::size], full_y[rank::size]
    for _step in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    ws = hvd.allgather(w.unsqueeze(0), name="weights")
    assert all(torch.allclose(ws[0], ws[i]) for i in range(size)), "replicas diverged"
    # Parity: the averaged gradient of equal shards is the full batch's gradient, so one process
    # with rank 0's initial weights on the full batch must end at the same weights.
    torch.manual_seed(1234)
    ref = torch.nn.Linear(4, 1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _step in range(steps):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(full_x), full_y).backward()
        ref_opt.step()
    wr = torch.cat([p.detach().flatten() for p in ref.parameters()])
    assert torch.allclose(w, wr, atol=1e-6), (w, wr)
    print(f"{tag} {steps} DistributedOptimizer steps: loss={loss.item():.4f}, replicas equal, "
          f"= 1-process full batch; total {time.time() - t0:.2f}s", flush=True)
    hvd.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drive(hosts: str, steps: int, timeout: float) -> int:
    import tempfile

    port = free_port()
    tmp = tempfile.mkdtemp(prefix="hvd-rdzv-")
    ready = os.path.join(tmp, "port")
    me = os.path.abspath(__file__)
    server = subprocess.Popen([sys.executable, me, "serve", "--hosts", hosts, "--port", str(port),
                               "--ready-file", ready])
    try:
        deadline = time.time() + 30
        while not os.path.exists(ready):
            if server.poll() is not None or time.time() > deadline:
                print("rendezvous server did not start", file=sys.stderr)
                return 1
            time.sleep(0.05)
        procs = []
        for slot in plan(hosts):
            env = dict(os.environ, PYTHONUNBUFFERED="1", **slot_env(slot, "127.0.0.1", port))
            procs.append(subprocess.Popen([sys.executable, me, "worker", "--steps", str(steps)],
                                          env=env))
        rc = 0
        end = time.time() + timeout
        for p in procs:
            try:
                rc = rc or p.wait(timeout=max(1.0, end - time.time()))
            except subprocess.TimeoutExpired:
                print("worker timed out", file=sys.stderr)
                rc = 124
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        print(f"[driver] {hosts}: {'OK' if rc == 0 else f'FAILED rc={rc}'}", flush=True)
        return rc
    finally:
        server.terminate()
        server.wait()
        if os.path.exists(ready):
            os.unlink(ready)
        os.rmdir(tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("role", nargs="?", choices=["serve", "worker"], default=None)
    ap.add_argument("--hosts", default="pod-0:1,pod-1:1",
                    help="horovodrun -H syntax: HOST:SLOTS,... (HOST = HOROVOD_HOSTNAME)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ready-file")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    if a.role == "serve":
        serve(a.hosts, a.port, a.ready_file)
        return 0
    if a.role == "worker":
        worker(a.steps)
        return 0
    return drive(a.hosts, a.steps, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
