#!/usr/bin/env bash
# A virtual environment with tensorflow-cpu for `framework: tensorflow` jobs' tests
# (tests/runtime/test_tensorflow.py), kept apart from the project's Python environment:
# tensorflow pins its own numpy/protobuf/ml_dtypes, which must not fight torch's.
#
#   hack/tensorflow/venv.sh              # create it if missing, print the dir
#   hack/tensorflow/venv.sh --print-dir  # only print the dir
#
# Keyed by version: ${PHALANX_CACHE:-$HOME/.cache/phalanx}/venvs/tensorflow-cpu-<version>
# (PHALANX_TF_VENV overrides it). Idempotent: a venv counts only once `.complete` is written after
# `import tensorflow` worked in it; a half-made one (an interrupted install) is made again.
set -euo pipefail

TF_VERSION=2.21.0
CACHE="${PHALANX_CACHE:-$HOME/.cache/phalanx}"
DIR="${PHALANX_TF_VENV:-$CACHE/venvs/tensorflow-cpu-${TF_VERSION}}"
PY="${PYTHON:-python3}"

log() { echo "[tf-venv] $*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$DIR"
  exit 0
fi

mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9   # one install at a time (a developer's make test and another session's)

if [[ -f "$DIR/.complete" && -x "$DIR/bin/python" ]]; then
  log "have tensorflow-cpu $TF_VERSION"
  echo "$DIR"
  exit 0
fi
start=$SECONDS
log "installing tensorflow-cpu $TF_VERSION into $DIR ($("$PY" --version))"
rm -rf "$DIR"
"$PY" -m venv "$DIR"
"$DIR/bin/python" -m pip install -q --disable-pip-version-check "tensorflow-cpu==${TF_VERSION}"
"$DIR/bin/python" - <<PYEOF
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
assert tf.__version__ == "${TF_VERSION}", tf.__version__
PYEOF
touch "$DIR/.complete"
log "done in $((SECONDS - start))s, $(du -sh "$DIR" | cut -f1)"
echo "$DIR"
