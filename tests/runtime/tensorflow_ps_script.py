"""A user's TensorFlow ``ParameterServerStrategy`` script, as a ``framework: tensorflow`` job with
roles runs it: one process per pod, every task reading the cluster and its own task from the
TF_CONFIG Phalanx rendered (chief, workers, parameter servers).

* ``--serve`` (workers and ps): start this task's ``tf.distribute.Server`` and serve until stopped
  (``phalanx local`` / the operator stop them once the chief succeeded).
* ``--coordinate`` (the chief): ``ParameterServerStrategy`` + ``ClusterCoordinator``: the variables
  of a tiny MLP (plain ``tf.Variable``s, round-robin over the ps tasks), a per-worker dataset, and
  ``STEPS`` SGD steps scheduled on the workers (asynchronous: each step reads the variables from
  the ps tasks and writes its update back). Then it evaluates the whole dataset with the trained
  variables (read back from the ps tasks) and with the initial ones.

Every task writes ``$OUT_DIR/<task type>-<index>.json`` (the TF_CONFIG it saw, its argv, pid,
PHALANX_ROLE); the chief's ``chief-0.json`` adds the training: per-step losses and batch sizes,
the pid of the process each step ran in (a worker's: the step reads ``/proc/self/stat``), the
devices of the variables, and the initial and final full-dataset loss.
Environment: OUT_DIR (required), STEPS (40), BATCH (32), LR (0.05). Runs in the TF venv
(hack/tensorflow/venv.sh), not in the project's Python environment.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tensorflow_user_script import DIM, SAMPLES, forward, initial_weights  # noqa: E402 - the MWMS test's model


def dataset() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SAMPLES, DIM)).astype(np.float32)
    return x, np.sin(x.sum(axis=1, keepdims=True) / 4).astype(np.float32)


def full_loss(w) -> float:
    x, y = dataset()
    return float(tf.reduce_mean(tf.square(forward([tf.convert_to_tensor(v) for v in w], x) - y)))


def write(out_dir: str, name: str, record: dict) -> None:
    tmp = os.path.join(out_dir, f".{name}.json")
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, os.path.join(out_dir, f"{name}.json"))


def serve(resolver, record: dict, out_dir: str) -> None:
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    write(out_dir, f"{resolver.task_type}-{resolver.task_id}", {**record, "target": server.target})
    print(f"{resolver.task_type} {resolver.task_id}: serving at {server.target}", flush=True)
    server.join()  # until stopped


def make_step(strategy, weights, lr: float):
    @tf.function
    def step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(forward(weights, x) - y))
            for v, g in zip(weights, tape.gradient(loss, weights), strict=True):
                v.assign_sub(lr * g)
            return loss, tf.cast(tf.shape(x)[0], tf.int32)

        loss, n = strategy.run(replica_fn, args=(next(iterator),))
        # the pid of the process this step runs in (a worker's, which the test maps to its task)
        pid = tf.strings.split(tf.io.read_file("/proc/self/stat"), " ")[0]
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), n, pid

    return step


def coordinate(resolver, record: dict, out_dir: str) -> None:
    steps, batch = int(os.environ.get("STEPS", "40")), int(os.environ.get("BATCH", "32"))
    lr = float(os.environ.get("LR", "0.05"))
    t0 = time.monotonic()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weights = [tf.Variable(w) for w in initial_weights()]

    def dataset_fn():
        x, y = dataset()
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SAMPLES, seed=2).repeat().batch(batch)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    step = make_step(strategy, weights, lr)
    initial = full_loss(initial_weights())
    results = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps)]
    coordinator.join()
    fetched = [r.fetch() for r in results]
    losses = [float(f[0]) for f in fetched]
    record.update({
        "num_workers": strategy.extended._num_workers, "num_ps": strategy.extended._num_ps,
        "variable_devices": [v.device for v in weights], "steps": steps, "losses": losses,
        "samples_per_step": [int(f[1]) for f in fetched], "step_pids": [int(f[2]) for f in fetched], "initial_loss": initial,
        "final_loss": full_loss(weights), "seconds": round(time.monotonic() - t0, 3), "tf_version": tf.__version__,
    })
    write(out_dir, "chief-0", record)
    print(f"chief: {steps} steps on {record['num_workers']} workers / {record['num_ps']} ps, full-dataset loss "
          f"{initial:.5f} -> {record['final_loss']:.5f}", flush=True)


def main() -> None:
    out_dir = os.environ["OUT_DIR"]
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    record = {"tf_config": json.loads(os.environ.get("TF_CONFIG") or "null"), "argv": sys.argv[1:], "pid": os.getpid(),
              "task_type": resolver.task_type, "task_id": resolver.task_id,
              "role": os.environ.get("PHALANX_ROLE"), "role_index": os.environ.get("PHALANX_ROLE_INDEX")}
    if mode == "--serve" and resolver.task_type in ("worker", "ps"):
        serve(resolver, record, out_dir)
    elif mode == "--coordinate" and resolver.task_type == "chief":
        coordinate(resolver, record, out_dir)
    else:
        sys.exit(f"{resolver.task_type} {resolver.task_id}: unexpected mode {mode!r}")


if __name__ == "__main__":
    main()
