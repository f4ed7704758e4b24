"""``phalanx local``: a TrainingJob as local processes, no Kubernetes — ``run`` (the processes,
their supervision and the summary) and ``env`` (each process's environment and command, as the
operator renders its pod). It starts the runtime (``phalanx_runtime``) by command line and never
imports it."""
