"""hf_trainer.py with Phalanx's Trainer callback: the "code" way in, for a user who adds one line
to their script instead of choosing a log collector. The callback reports every log (step, loss,
eval_loss, learning_rate...) and commits each checkpoint Trainer saves; elsewhere than on a
Phalanx pod (no $PHALANX_* env) it does nothing."""

from __future__ import annotations

import hf_trainer  # this script's directory is on sys.path: torchrun runs it as a file

from phalanx_common.integrations.transformers import PhalanxCallback

if __name__ == "__main__":
    hf_trainer.main(callbacks=[PhalanxCallback()])
