"""Phalanx: gang-scheduled, topology-aware distributed training on Kubernetes.

Layers, low → high; a module imports only from layers below its own, function-local imports
included (tests/unit/test_structure.py builds the graph and refuses any cycle):

1. ``constants`` (names, keys, ``Reason``), ``problems``, ``decision`` (Observed, Plan,
   GangDecision: the types every layer shares; imports nothing of ours); ``reasons`` (what each
   reason means and what to do, for the docs)
2. ``api`` — the pydantic models (TrainingJob, OperatorConfig), CRD, manifest loading
3. ``policy`` (shared-cluster rules) and ``gang`` (placement: inventory, topology, planner, cost
   model, native admission)
4. ``backends`` (one per scheduling backend: PodGroup / Workload / Kueue shapes) and ``frameworks``
   (one plugin per spec.framework: its rules, env, files, ports) → ``render`` (the children's
   manifests, NCCL network wiring)
5. ``validate`` — the one verdict on a job
6. ``lifecycle`` — the reconcile: ``decide`` and its phases, status and phase machine, failures,
   elastic resizing, progress
7. I/O: ``kube`` (carries out a Plan; 404/409 as named outcomes), ``metrics``, ``jobmetrics``,
   ``podreflector``, ``leader`` → ``controlloop`` (what every per-object loop runs on: wake-ups,
   backoff, resync, status waits), ``offloop`` (decide() off the event loop, hops back onto it)
   → ``scheduler`` (the one gang queue: cycles plan every waiting gang once, job loops read their
   row), ``expectations`` (what the index must show after a pass) → ``gangstep`` (a job's decide()
   reading its row) → ``jobloop`` (one job's loop and the loops' shared ``Gangs``),
   ``startup`` (``memo``, kopf's settings, /healthz, cleanup); ``sweep.loop`` (one sweep's loop)
8. ``handlers`` (kopf wiring only, state in kopf's ``memo``), ``sweep.handlers`` → ``main`` (the
   operator process)
9. commands: ``cli`` (``phalanx ...``), ``local`` (``phalanx local``: a job as local processes),
   ``plan``, ``watch``, ``plot``, ``termchart``, ``docstables`` (the docs' generated tables);
   ``client`` (the Python client: jobs from the API models, submitted, followed, run locally)

Nothing in this package's import path may import kopf or the kubernetes client at the top level.
Below all of them, ``phalanx_common`` (common/, standard library only): the operator↔runtime
contract (``constants`` re-exports it), model presets, layout rules, process helpers. The runtime
(``phalanx_runtime``) is a package of its own: this one never imports it, nor it this one
(tests/unit/test_structure.py), and the runtime image installs neither kopf nor the kubernetes
client.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("phalanx")  # pyproject.toml's: the version's one home
except PackageNotFoundError:  # run from a bare checkout on PYTHONPATH, not installed
    __version__ = "0+unknown"
