"""The trainer's building blocks: checkpoint, data, optimizer, loss, metrics, progress."""
