"""``PhalanxCallback``: a PyTorch Lightning fit reports its step, loss, metrics and checkpoints
through phalanx_common.report. It subclasses the Callback of ``lightning.pytorch`` or
``pytorch_lightning``, whichever the script imported first (else ``lightning`` when installed). In
a script::

    from phalanx_common.integrations.lightning import PhalanxCallback
    from phalanx_common.report import latest_checkpoint
    trainer = Trainer(..., callbacks=[PhalanxCallback()])
    trainer.fit(model, ckpt_path=latest_checkpoint())

Every training batch reports the global step (no device sync); every ``log_every_n_steps``
steps, and after each validation, also the loss (the step's output) and ``trainer.callback_metrics``
(what the module logs: train_loss, val_loss, ...) as metrics. The total is
``trainer.estimated_stepping_batches`` when finite. A checkpoint a ModelCheckpoint saved is marked
as the latest at the next hook (its own save runs after the other callbacks'); a fit that starts
past step 0 (resumed) records its step as resumedStep. Global rank 0 reports; elsewhere the calls
are no-ops."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys

from phalanx_common.report import Reporter, reporter

if "lightning.pytorch" in sys.modules or ("pytorch_lightning" not in sys.modules
                                          and importlib.util.find_spec("lightning") is not None):
    from lightning.pytorch import Callback
else:
    from pytorch_lightning import Callback

CHECKPOINT_STEP = re.compile(r"step=(\d+)")  # ModelCheckpoint's default name: epoch=0-step=5.ckpt


def _saved_checkpoint(trainer) -> str | None:
    """The newest checkpoint any ModelCheckpoint of ``trainer`` saved, if any."""
    paths = []
    for callback in getattr(trainer, "checkpoint_callbacks", []):
        for name in ("_last_checkpoint_saved", "last_model_path", "best_model_path"):
            path = getattr(callback, name, None)
            if path and os.path.exists(path):
                paths.append(path)
    return max(paths, key=os.path.getmtime) if paths else None


class PhalanxCallback(Callback):
    def __init__(self, reporter_: Reporter | None = None):
        self.reporter = reporter_ or reporter()
        self._committed: str | None = None

    def _total(self, trainer) -> int | None:
        try:
            total = trainer.estimated_stepping_batches
        except Exception:  # noqa: BLE001 - no dataloader length yet: no total
            return None
        return int(total) if isinstance(total, int | float) and math.isfinite(total) and total > 0 else None

    def _report_metrics(self, trainer, loss=None) -> None:
        metrics = dict(trainer.callback_metrics)
        self.reporter.report(trainer.global_step, loss, total_steps=self._total(trainer),
                             epoch=trainer.current_epoch, metrics=metrics)

    def _commit_saved(self, trainer) -> None:
        path = _saved_checkpoint(trainer)
        if path and path != self._committed:
            self._committed = path
            found = CHECKPOINT_STEP.search(os.path.basename(path))
            self.reporter.commit_checkpoint(path, int(found.group(1)) if found else trainer.global_step)

    def on_train_start(self, trainer, pl_module):
        if not self.reporter.active:
            return
        if trainer.global_step > 0:
            self.reporter.resumed_from(trainer.global_step)
        self.reporter.report(trainer.global_step, total_steps=self._total(trainer))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.reporter.active:
            self._commit_saved(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self.reporter.active:
            return
        every = max(1, int(getattr(trainer, "log_every_n_steps", 1) or 1))
        if trainer.global_step % every:
            self.reporter.report(trainer.global_step)
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self._report_metrics(trainer, loss.detach() if hasattr(loss, "detach") else loss)

    def on_validation_end(self, trainer, pl_module):
        if self.reporter.active and not trainer.sanity_checking:
            self._report_metrics(trainer)

    def on_train_end(self, trainer, pl_module):
        if self.reporter.active:
            self._commit_saved(trainer)
            self._report_metrics(trainer)
