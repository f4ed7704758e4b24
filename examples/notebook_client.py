"""Phalanx from a notebook, with the Python client (phalanx.client; docs/python-client.md).

Each ``# %%`` line starts a cell (VS Code, PyCharm and Jupytext read them; in Jupyter, paste each
cell). The first cells need no cluster: build a job from the API's own models, check it as
`phalanx validate` does, run it on this machine as `phalanx local` does (the unit tests run them:
tests/unit/phalanx/test_client.py). The rest submit it, follow it, read rank 0's log, wait for it
and delete it; they need a cluster with the operator, 2 pods' room (500m CPU, 512Mi each) and the
runtime image where its nodes can pull it.
"""

# %% Build a job from the API's own models
from phalanx.client import (
    Client,
    InvalidJob,
    JobFailed,
    manifest,
    run_local,
    training_job,
    validate,
)

SCRIPT = """
import math, os, time
steps = int(os.environ["STEPS"])
for step in range(1, steps + 1):
    print(f"rank {os.environ['NODE_RANK']} step {step}/{steps} loss {4.0 * math.exp(-step / 8):.4f}", flush=True)
    time.sleep(0.05)
"""

job = training_job(
    "notebook-demo",
    # no image: the operator's runtimeImage (chart value runtime.image)
    command=["python3", "-c", SCRIPT],
    nodes=2,
    env=[{"name": "STEPS", "value": "20"}],
    resources={"cpu": "500m", "memory": "512Mi"},
    failure_policy={"max_restarts": 1},
)
print(manifest(job))  # what is sent: the fields set, camelCase; the API server fills in the defaults

# %% The verdict of `phalanx validate`, before anything is sent: each problem names its field
try:
    validate(training_job("wrong", model={"preset": "debug"}, nodes=2,
                          procs_per_node=4, parallelism={"data": 3}))
except InvalidJob as refused:
    for problem in refused.problems:
        print(problem)

# %% Run it on this machine first: one process per pod, with the pods' environment
summary = run_local(job, timeout=120)
print(summary["exit_codes"], f"{summary['seconds']:.1f}s")

# %% On the cluster: the kubeconfig's current context and its namespace (in a pod: its own)
tj = Client()
tj.submit(job)
for progress in tj.watch("notebook-demo", timeout=600):
    print(progress)  # phase, nodes, step, loss, metrics: a line per change, until it finishes

# %% Rank 0's log (node-rank 0's pod of the current attempt; follow=True streams it)
print(tj.logs("notebook-demo", tail_lines=5))

# %% The final state: the job when it succeeded, JobFailed with the operator's message when not
try:
    finished = tj.wait("notebook-demo", timeout=600)
    print(finished.status.phase, finished.status.completion_time)
except JobFailed as failure:
    print(failure, failure.job.status.last_failure)

# %% Clean up: the job and its pods, so the name can be used again
tj.delete("notebook-demo", wait=True)
