"""Parameter-server training (``spec.parallelism.parameterServer``) on ``torch.distributed.rpc``.

The first ``servers`` ranks are parameter servers, the rest workers. Dense parameters live whole
on one server each (largest first onto the least loaded), embedding tables are sharded by rows
(row ``i`` on server ``i % servers``). A worker pulls the dense parameters and, on demand, only
the embedding rows its batch looks up; computes forward/backward locally; pushes dense gradients
and sparse row gradients. The servers apply the optimizer on their shards.

* ``roles``: rank → server or worker, RPC names, joining RPC.
* ``sharding``: which server owns which parameter (rows).
* ``optim``: the servers' optimizer (SGD, Adam, AdamW: torch.optim on the shard tensors).
* ``server``: shard state, sync barrier / async staleness bound, and the RPC entry points.
* ``shardckpt``: a server's shard (parameters + optimizer state) to and from disk.
* ``comm``: RPC calls that count the tensor bytes they move.
* ``worker``: the worker's step (pull, compute, push).
* ``run``: one rank's whole run, returning the ``TrainResult`` (server 0 holds the job's).
"""
