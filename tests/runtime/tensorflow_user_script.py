"""A user's TensorFlow script, as a `framework: tensorflow` job runs it: one process per pod, the
cluster and this worker's task read by ``tf.distribute.MultiWorkerMirroredStrategy`` from the
TF_CONFIG Phalanx rendered. Trains a tiny MLP (plain tf.Variables, SGD, mean-squared error) with
synchronous data parallelism: every step takes the next ``GLOBAL_BATCH`` samples of a fixed
dataset, each worker the slice of its task index, gradients summed across workers by the
strategy's all-reduce. Each worker writes ``$OUT_DIR/worker-<index>.json``: the TF_CONFIG it
saw, its task id, the replicas in sync, the per-step global loss and the final weights.

Without TF_CONFIG it is one worker taking the whole global batch: the reference run.
Environment: OUT_DIR (required), STEPS (20), GLOBAL_BATCH (32), LR (0.05). Runs in the TF venv
(hack/tensorflow/venv.sh), not in the project's Python environment.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DIM, HIDDEN, SAMPLES = 16, 32, 4096


def dataset() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((SAMPLES, DIM)).astype(np.float32)
    return x, np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)


def initial_weights() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((DIM, HIDDEN)) * 0.3).astype(np.float32), np.zeros(HIDDEN, np.float32),
            (rng.standard_normal((HIDDEN, 1)) * 0.3).astype(np.float32), np.zeros(1, np.float32)]


def forward(w: list[tf.Variable], x: tf.Tensor) -> tf.Tensor:
    return tf.matmul(tf.tanh(tf.matmul(x, w[0]) + w[1]), w[2]) + w[3]


def train_step(strategy, weights: list[tf.Variable], global_batch: int, lr: float):
    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                # this worker's share of the mean over the global batch
                loss = tf.reduce_sum(tf.square(forward(weights, x) - y)) / global_batch
            grads = tape.gradient(loss, weights)
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
            for v, g in zip(weights, grads, strict=True):
                v.assign_sub(lr * g)  # the same summed gradient on every worker
            return loss

        per_replica = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return step


def main() -> None:
    out_dir = os.environ["OUT_DIR"]
    steps, global_batch = int(os.environ.get("STEPS", "20")), int(os.environ.get("GLOBAL_BATCH", "32"))
    lr = float(os.environ.get("LR", "0.05"))
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    resolver = strategy.cluster_resolver
    workers = len(resolver.cluster_spec().as_dict().get("worker", [])) or 1
    index = resolver.task_id or 0
    with strategy.scope():
        weights = [tf.Variable(w, aggregation=tf.VariableAggregation.MEAN) for w in initial_weights()]
    step = train_step(strategy, weights, global_batch, lr)
    x, y = dataset()
    local = global_batch // workers
    losses = []
    for s in range(steps):
        lo = s * global_batch + index * local
        losses.append(float(step(tf.constant(x[lo:lo + local]), tf.constant(y[lo:lo + local]))))
    result = {"tf_config": json.loads(os.environ.get("TF_CONFIG") or "null"), "task_id": index,
              "task_type": resolver.task_type, "workers": workers,
              "replicas_in_sync": strategy.num_replicas_in_sync, "tf_version": tf.__version__,
              "losses": losses, "weights": [w.numpy().tolist() for w in weights]}
    with open(os.path.join(out_dir, f"worker-{index}.json"), "w") as f:
        json.dump(result, f)
    print(f"worker {index}/{workers}: loss {losses[0]:.5f} -> {losses[-1]:.5f}", flush=True)


if __name__ == "__main__":
    main()
