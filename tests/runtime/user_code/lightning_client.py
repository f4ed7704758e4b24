"""lightning_script.py with Phalanx's Lightning callback (the "code" way in): it reports the global
step, the loss and the Trainer's callback metrics (train_loss, val_loss) from rank 0."""

from __future__ import annotations

import lightning_script  # this script's directory is on sys.path: torchrun runs it as a file

from phalanx_common.integrations.lightning import PhalanxCallback

if __name__ == "__main__":
    lightning_script.main(callbacks=[PhalanxCallback()])
