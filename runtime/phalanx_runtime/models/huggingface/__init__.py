"""Hugging Face checkpoints in and out of the built-in transformer: parameter names
(``keys.py``), loading a model directory into the sharded parts, writing one back."""
