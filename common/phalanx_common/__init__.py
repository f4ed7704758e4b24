"""What the operator (``phalanx``), the training runtime (``phalanx_runtime``) and any user's
training script share: the operator↔runtime contract (env names, file paths, report keys, the
stopping rules: ``contract``), the built-in model shapes (``presets``), which parallel layouts a
job can run (``layout``), Linux process helpers (``proc``), free local ports (``net``), and rank
0's progress — the record and its endpoint (``progress``, ``termination``), the reporting client
of a user's script (``report``), the log collectors of a command job (``collect``) and ready-made
callbacks for transformers and Lightning (``integrations``).

Standard library only, but for ``integrations``' two modules (each imports the library it plugs
into): it imports neither kopf, the kubernetes client, pydantic nor torch, nor either package it
serves (tests/unit/test_structure.py), so the runtime image installs it without the operator's
dependencies and a user's image installs it alone (``pip install ./common``: ``phalanx-common``).
"""
