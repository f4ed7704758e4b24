"""TrainingSweep: hyperparameter sweeps and ensembles of TrainingJobs (docs/sweep.md).

params (sampling) → check (one verdict) → status/earlystop (pure records and rules) → decide
(pure: what to create, stop, and report) → loop (carries out the plan: the job loop's machinery,
``Kube``) → handlers (kopf wiring) | local (`phalanx local`)."""
