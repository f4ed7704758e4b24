"""hf_trainer.py at the pace of a real model: every optimizer step takes at least STEP_SECONDS.
The tiny test model trains at ~100 steps/s on a CPU, so a 30-step trial is over before any
controller polling its logs can act on its first evaluation; a real trial's steps take seconds.
Sleeping changes no number the script computes."""

from __future__ import annotations

import os
import time

import hf_trainer  # this script's directory is on sys.path: torchrun runs it as a file
from transformers import TrainerCallback

STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.1"))


class Pace(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):  # noqa: ARG002 - Trainer's callback signature
        time.sleep(STEP_SECONDS)


if __name__ == "__main__":
    hf_trainer.main(callbacks=[Pace()])
