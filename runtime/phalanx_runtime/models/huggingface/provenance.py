"""What model a checkpoint directory holds, so that an export needs nothing but the directory.

Rank 0 writes ``<checkpoint dir>/model/`` at a run's first save (``Checkpointer(model_files=…)``):

* ``config.json``: the Hugging Face config — a pretrained model's own (copied), or for a preset one
  synthesized from its :class:`ModelShape` (``LlamaForCausalLM`` and its kin);
* the tokenizer files of a pretrained model (and its ``generation_config.json``), copied as they are;
* ``phalanx-model.json``: what the exporter must know beyond that — the RoPE layout the weights are
  in (``interleaved``: the preset transformer's, whose wq/wk rows the export permutes; ``half``: a
  model loaded from Hugging Face, exported by renaming only), the shape, tied embeddings, the
  LoRA adapters' rank, alpha and targets (their scaling, and the PEFT adapter config), and the
  pretrained model's directory (absolute): the base weights an export of a checkpoint that holds
  LoRA adapters only reads from there, and that base's fingerprint (each safetensors file's name
  and size, the index's sha256), which a resume and an export compare with the directory they
  read, refusing another model.

An export runs on whatever machine the operator chooses and reads files the job wrote: it opens
them without following symlinks (a planted ``tokenizer.json -> ~/.kube/config`` is refused, not
copied into the export) and parses JSON of at most ``MAX_JSON_BYTES``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from phalanx_common.presets import ModelShape

MODEL_DIR = "model"
RECORD_FILE = "phalanx-model.json"
CONFIG_FILE = "config.json"
# Copied from a pretrained model directory when present (and from model/ into an export).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json",
                   "generation_config.json")
RECORD_FORMAT = 1
MAX_JSON_BYTES = 2**20  # config.json and phalanx-model.json are a few KiB
SAFETENSORS_SUFFIX = ".safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
ROPE_INTERLEAVED, ROPE_HALF = "interleaved", "half"
# family → (architecture, model_type) of a synthesized config.
ARCHITECTURES: dict[str, tuple[str, str]] = {
    "llama": ("LlamaForCausalLM", "llama"),
    "mistral": ("MistralForCausalLM", "mistral"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3"),
}
# family → the (qkv_bias, o_bias, qk_norm) its Hugging Face model can have: Llama's and Qwen3's
# attention_bias puts biases on q/k/v/o, Qwen2 always has q/k/v biases, Qwen3 always q/k norms.
FAMILY_ATTENTION: dict[str, tuple[tuple[bool, bool, bool], ...]] = {
    "llama": ((False, False, False), (True, True, False)),
    "mistral": ((False, False, False),),
    "qwen2": ((True, False, False),),
    "qwen3": ((False, False, True), (True, True, True)),
}


def attention_fields(shape: ModelShape) -> dict[str, Any]:
    """The config keys that give ``shape``'s biases and q/k norms in its family's model;
    ValueError when that family's model cannot have them."""
    if shape.family not in ARCHITECTURES:
        raise ValueError(f"model family {shape.family!r} has no Hugging Face architecture "
                         f"(known: {', '.join(ARCHITECTURES)})")
    attention = (shape.qkv_bias, shape.o_bias, shape.qk_norm)
    if attention not in FAMILY_ATTENTION[shape.family]:
        raise ValueError(f"a {shape.family} model cannot have qkv_bias {shape.qkv_bias}, o_bias {shape.o_bias}, "
                         f"qk_norm {shape.qk_norm} (Hugging Face's {ARCHITECTURES[shape.family][0]})")
    if shape.family == "llama":
        return {"attention_bias": shape.qkv_bias, "mlp_bias": False}
    if shape.family == "qwen3":
        return {"attention_bias": shape.qkv_bias}
    return {}  # Mistral and Qwen2 fix theirs


def hf_config_for_shape(shape: ModelShape) -> dict[str, Any]:
    """A Hugging Face ``config.json`` for the built-in transformer with ``shape`` (the weights as
    exported: RoPE in half layout), every field of the shape in it (``shape_from_hf_config`` reads
    the shape back, but for the RoPE layout). RoPE theta and scaling in the form transformers 4
    and 5 read."""
    attention = attention_fields(shape)
    architecture, model_type = ARCHITECTURES[shape.family]
    doc: dict[str, Any] = {
        "architectures": [architecture], "model_type": model_type, "hidden_act": "silu",
        "hidden_size": shape.dim, "intermediate_size": shape.ffn_hidden, "num_hidden_layers": shape.n_layers,
        "num_attention_heads": shape.n_heads, "num_key_value_heads": shape.n_kv_heads,
        "head_dim": shape.head_dim, "vocab_size": shape.vocab_size, "max_position_embeddings": shape.max_seq_len,
        "rms_norm_eps": shape.norm_eps, "rope_theta": shape.rope_theta,
        "rope_scaling": dict(shape.rope_scaling) or None,
        "tie_word_embeddings": shape.tie_embeddings, "attention_dropout": 0.0, "initializer_range": 0.02,
        "use_cache": True,
    }
    doc.update(attention)
    if shape.family == "mistral":
        doc["sliding_window"] = None
    elif shape.family in ("qwen2", "qwen3"):
        doc.update(use_sliding_window=False, sliding_window=None)
    return doc


def model_record(shape: ModelShape, *, preset: str | None = None, pretrained: str | None = None,
                 lora: Any = None, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of ``phalanx-model.json`` (``base``: the pretrained model's :func:`base_fingerprint`)."""
    shape_doc = asdict(shape)
    shape_doc["head_dim"] = shape.head_dim
    return {"format": RECORD_FORMAT, "preset": preset, "pretrained": pretrained, "rope_style": shape.rope_style,
            "shape": shape_doc, "base": base,
            "lora": None if lora is None else {"rank": int(lora.rank), "alpha": float(lora.alpha),
                                               "dropout": float(lora.dropout), "targets": list(lora.targets)}}


def base_fingerprint(directory: str | os.PathLike) -> dict[str, Any]:
    """What identifies a pretrained model's weights without reading them: each safetensors file's
    name and size, and the sha256 of its index (None without one)."""
    d = Path(directory)
    files = {p.name: p.stat().st_size for p in sorted(d.glob("*" + SAFETENSORS_SUFFIX))}
    index = d / SAFETENSORS_INDEX
    digest = hashlib.sha256(index.read_bytes()).hexdigest() if index.is_file() else None
    return {"files": files, "index_sha256": digest}


def base_mismatch(recorded: dict[str, Any] | None, directory: str | os.PathLike) -> list[str]:
    """How the weights in ``directory`` differ from the fingerprint a run recorded ([] when they
    match, or when the record has none)."""
    if not recorded:
        return []
    now = base_fingerprint(directory)
    was, files = recorded.get("files") or {}, now["files"]
    problems = [f"{name}: {was[name]} bytes when the run trained, {files[name]} bytes now"
                for name in sorted(was.keys() & files.keys()) if was[name] != files[name]]
    problems += [f"{name}: missing (the run trained with it)" for name in sorted(was.keys() - files.keys())]
    problems += [f"{name}: not part of the model the run trained" for name in sorted(files.keys() - was.keys())]
    if recorded.get("index_sha256") != now["index_sha256"]:
        problems.append(f"{SAFETENSORS_INDEX}: its content differs from the one the run trained with")
    return problems


def write_model_dir(directory: str | os.PathLike, shape: ModelShape, *, preset: str | None = None,
                    pretrained: str | None = None, lora: Any = None, tokenizer: str | None = None) -> None:
    """Write ``config.json``, tokenizer files (from ``tokenizer``, default the pretrained model's
    directory) and ``phalanx-model.json`` into ``directory`` (created)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if pretrained:
        shutil.copyfile(Path(pretrained) / CONFIG_FILE, out / CONFIG_FILE)
    else:
        (out / CONFIG_FILE).write_text(json.dumps(hf_config_for_shape(shape), indent=2) + "\n")
    tokenizer_dir = tokenizer or pretrained
    for name in TOKENIZER_FILES if tokenizer_dir else ():
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copyfile(Path(tokenizer_dir) / name, out / name)
    base = base_fingerprint(pretrained) if pretrained else None
    record = model_record(shape, preset=preset, pretrained=pretrained, lora=lora, base=base)
    (out / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")


def model_files_writer(cfg: Any) -> Callable[[Path], None] | None:
    """For the Checkpointer: writes a run's ``model/`` directory, or None for a model that is not
    the built-in transformer (a user entrypoint: nothing an export could describe)."""
    model = cfg.spec.model
    if model is None or model.entrypoint:
        return None
    shape = cfg.shape
    if shape is None:
        return None
    pretrained = model.pretrained.path if model.pretrained is not None and model.pretrained.path else None
    if pretrained is not None:  # an export may run elsewhere than this process's working directory
        pretrained = os.path.abspath(pretrained)
    prepare = cfg.spec.data.prepare
    tokenizer = prepare.tokenizer if prepare is not None and prepare.tokenizer else None
    return lambda directory: write_model_dir(directory, shape, preset=model.preset, pretrained=pretrained,
                                             lora=model.lora, tokenizer=tokenizer)


def resumed_base_problems(checkpoint_dir: str | os.PathLike, pretrained: str | os.PathLike) -> list[str]:
    """How ``pretrained`` differs from the base the run that wrote ``checkpoint_dir``'s model record
    trained (:func:`base_mismatch`; [] without a record)."""
    try:
        record = read_json(Path(checkpoint_dir) / MODEL_DIR / RECORD_FILE)
    except FileNotFoundError:
        return []
    return base_mismatch(record.get("base") if isinstance(record, dict) else None, pretrained)


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of ``path``, which must be a regular file and no symlink (ValueError)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO does not block the open
    except OSError as e:
        if Path(path).is_symlink():
            raise ValueError(f"{path} is a symlink; an export reads only regular files the job wrote") from e
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError(f"{path} is not a regular file; an export reads only regular files the job wrote")
    return fd


def read_json(path: str | os.PathLike) -> Any:
    """A regular file's JSON (no symlink, at most MAX_JSON_BYTES)."""
    with os.fdopen(open_regular(path), "rb") as f:
        data = f.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ValueError(f"{path} is larger than {MAX_JSON_BYTES} bytes; not a model description")
    try:
        return json.loads(data)
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e})") from e


def copy_regular(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copy a regular file (no symlink) to ``target``."""
    with os.fdopen(open_regular(source), "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)


def read_model_dir(directory: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Hugging Face config, record) of a checkpoint's ``model/`` directory; a missing or foreign
    one raises ValueError saying what is missing."""
    d = Path(directory)
    try:
        config = read_json(d / CONFIG_FILE)
        record = read_json(d / RECORD_FILE)
    except FileNotFoundError as e:
        raise ValueError(f"{d}: no {Path(e.filename).name}; this checkpoint directory does not record its model "
                         "(written at the first save of a built-in transformer's run)") from e
    if not isinstance(config, dict) or not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValueError(f"{d / RECORD_FILE}: not a model record of format {RECORD_FORMAT}")
    return config, record
