"""A user's own training script for the command-job tests, started by torchrun: a gloo all_reduce
over every rank, then rank r writes what it saw (rank, world, the sum, its argv and environment)
to ``$OUT_DIR/rank-<r>.json``. With ``$SLEEP_AFTER`` it then sleeps that long (stop tests)."""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
out = {"rank": rank, "world": world, "sum": t.item(), "argv": sys.argv[1:], "env": dict(os.environ)}
with open(os.path.join(os.environ["OUT_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(out, f)
time.sleep(float(os.environ.get("SLEEP_AFTER", "0")))
dist.destroy_process_group()
