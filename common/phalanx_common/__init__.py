"""What the operator (``phalanx``) and the training runtime (``phalanx_runtime``) share, and nothing
else: the operator↔runtime contract (env names, file paths, report keys, the stopping rules:
``contract``), the built-in model shapes (``presets``), which parallel layouts a job can run
(``layout``), Linux process helpers (``proc``) and free local ports (``net``).

Standard library only: it imports neither kopf, the kubernetes client, pydantic nor torch, nor
either package it serves (tests/unit/test_structure.py), so the runtime image installs it without
the operator's dependencies.
"""
