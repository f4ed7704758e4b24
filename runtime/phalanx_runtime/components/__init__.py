"""The trainer's building blocks: checkpoint, data, evaluation, optimizer, loss, metrics, progress."""
