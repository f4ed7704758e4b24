"""Ready-made callbacks that report a framework's training loop through phalanx_common.report:
``integrations.transformers.PhalanxCallback`` (a transformers TrainerCallback) and
``integrations.lightning.PhalanxCallback`` (a Lightning Callback). Each module imports its
library; they are the only modules of the shared package that import anything beyond the
standard library (tests/unit/test_structure.py), and nothing imports them but the user's script."""
