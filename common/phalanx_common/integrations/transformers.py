"""``PhalanxCallback``: a transformers Trainer (TRL's trainers too: its subclasses) reports its
step, loss, metrics and checkpoints through phalanx_common.report. In a script::

    from phalanx_common.integrations.transformers import PhalanxCallback
    from phalanx_common.report import latest_checkpoint
    trainer = Trainer(..., callbacks=[PhalanxCallback()])
    trainer.train(resume_from_checkpoint=latest_checkpoint())

Each log (``logging_steps``) reports the global step, ``max_steps``, the loss, the epoch and
every other numeric logged value as a metric (learning_rate, grad_norm, eval_loss, ...); each
save marks ``<output_dir>/checkpoint-<step>`` as the latest checkpoint (so ``output_dir`` belongs
on the job's checkpoint volume); a run that starts past step 0 (resumed) records its step as
resumedStep. Global rank 0 reports; elsewhere the calls are no-ops."""

from __future__ import annotations

import os

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from phalanx_common.report import Reporter, reporter


class PhalanxCallback(TrainerCallback):
    def __init__(self, reporter_: Reporter | None = None):
        self.reporter = reporter_ or reporter()

    def _total(self, state) -> int | None:
        return state.max_steps if state.max_steps and state.max_steps > 0 else None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0:
            self.reporter.resumed_from(state.global_step)
        self.reporter.report(state.global_step, total_steps=self._total(state))

    def on_log(self, args, state, control, logs=None, **kwargs):
        values = dict(logs or {})
        loss = values.pop("loss", None)
        epoch = values.pop("epoch", state.epoch)
        self.reporter.report(state.global_step, loss, total_steps=self._total(state), epoch=epoch, metrics=values)

    def on_save(self, args, state, control, **kwargs):
        path = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
        self.reporter.commit_checkpoint(path, state.global_step)
