"""``python -m phalanx_runtime``: the pod entrypoint, as ``phalanx-runtime`` (``launch.py``)."""

from phalanx_runtime.launch import main

raise SystemExit(main())
