"""What to prepare (``PrepareOptions``) and the error that names the config field and CLI flag."""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

FORMATS = ("jsonl", "parquet", "text", "arrow")
MAX_EVAL_FRACTION = 0.5  # the API's limit (operator/phalanx/api/pretrained.py)

# attribute → (TrainingJob field, `phalanx data prepare` flag): every error names both.
FIELD_NAMES = {
    "inputs": ("data.prepare.inputs", "--input"),
    "out": ("data.path", "--out"),
    "tokenizer": ("data.prepare.tokenizer", "--tokenizer"),
    "format": ("data.prepare.format", "--format"),
    "text_field": ("data.prepare.textField", "--text-field"),
    "messages_field": ("data.prepare.messagesField", "--messages-field"),
    "eval_fraction": ("data.prepare.evalFraction", "--eval-fraction"),
    "eval_inputs": ("data.prepare.evalInputs", "--eval-input"),
}


class PrepareError(ValueError):
    """Bad input to data preparation; the message starts with the field and flag at fault."""


def field_error(attr: str, message: str) -> PrepareError:
    field, flag = FIELD_NAMES[attr]
    return PrepareError(f"{field} ({flag}): {message}")


@dataclass(frozen=True)
class PrepareOptions:
    inputs: tuple[str, ...]
    out: str
    tokenizer: str
    format: str | None = None  # None: each input's by its name
    text_field: str = "text"
    messages_field: str | None = None  # chat records: loss on the assistant answers only
    eval_fraction: float = 0.0  # of the inputs' documents, chosen by a hash of each document
    eval_inputs: tuple[str, ...] = ()  # every document of these goes to the eval split

    def check(self) -> None:
        if not self.inputs:
            raise field_error("inputs", "no input files")
        if not self.out:
            raise field_error("out", "no output directory")
        if not self.tokenizer:
            raise field_error("tokenizer", "no tokenizer directory (set it, or model.pretrained.path)")
        if self.format is not None and self.format not in FORMATS:
            raise field_error("format", f"{self.format!r} is not one of {', '.join(FORMATS)}")
        if not 0.0 <= self.eval_fraction <= MAX_EVAL_FRACTION:
            raise field_error("eval_fraction", f"{self.eval_fraction} is not in [0, {MAX_EVAL_FRACTION}]")
        if not self.text_field:
            raise field_error("text_field", "empty field name")
        if self.format == "text" and self.messages_field is not None:
            raise field_error("messages_field", "a text file holds no fields (chat data needs jsonl, parquet or arrow)")
        self._check_out_outside_inputs()

    def _check_out_outside_inputs(self) -> None:
        """Directory inputs are read recursively: an output inside one would be read as input at
        the next preparation (a glob's matches leave the output out when resolved instead)."""
        out = Path(self.out).resolve()
        for attr, patterns in (("inputs", self.inputs), ("eval_inputs", self.eval_inputs)):
            for pattern in patterns:
                if not glob.has_magic(pattern) and out.is_relative_to(Path(pattern).resolve()):
                    field, _ = FIELD_NAMES[attr]
                    raise field_error("out", f"{self.out} is inside the input {pattern} ({field}): choose a "
                                             "directory outside the inputs")


def options_from_spec(prepare, path: str | None, pretrained_path: str | None = None) -> PrepareOptions:
    """A job's ``data.prepare`` (config.DataPrepare) writing into ``data.path``; the tokenizer
    defaults to the pretrained model's directory."""
    return PrepareOptions(inputs=tuple(prepare.inputs), out=path or "", tokenizer=prepare.tokenizer or pretrained_path or "",
                          format=prepare.format, text_field=prepare.text_field, messages_field=prepare.messages_field,
                          eval_fraction=float(prepare.eval_fraction), eval_inputs=tuple(prepare.eval_inputs))
