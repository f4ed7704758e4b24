"""A model's tokenizer directory: ``tokenizer.json`` (the ``tokenizers`` library, no
transformers), the special tokens and chat template of ``tokenizer_config.json`` (or
``chat_template.jinja``), and a fingerprint of those files."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from phalanx_runtime.data.options import field_error

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def token_text(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def chat_template_of(config: dict, directory: Path) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if template is None and (directory / "chat_template.jinja").is_file():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    return template


@dataclass
class TokenizerDir:
    path: Path
    tokenizer: object  # tokenizers.Tokenizer
    config: dict
    eos_id: int
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos_token, eos_token, … → text
    chat_template: str | None = None
    fingerprint: str = ""

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)


def fingerprint(directory: Path) -> str:
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        file = directory / name
        if file.is_file():
            digest.update(name.encode() + b"\0")
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _eos_id(tokenizer, config: dict, directory: Path) -> int:
    eos = token_text(config.get("eos_token"))
    if eos is not None and tokenizer.token_to_id(eos) is not None:
        return tokenizer.token_to_id(eos)
    model_config = directory / "config.json"
    if model_config.is_file():
        eos_id = json.loads(model_config.read_text()).get("eos_token_id")
        eos_id = eos_id[0] if isinstance(eos_id, list) and eos_id else eos_id
        if isinstance(eos_id, int):
            return eos_id
    raise field_error("tokenizer", f"{directory}: no end-of-document token (eos_token in tokenizer_config.json "
                                   "naming a token of tokenizer.json, or eos_token_id in config.json)")


def load_tokenizer(directory: str) -> TokenizerDir:
    from tokenizers import Tokenizer

    path = Path(directory)
    if not (path / "tokenizer.json").is_file():
        raise field_error("tokenizer", f"{path}: no tokenizer.json")
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # the Rust library's own exception type
        raise field_error("tokenizer", f"{path / 'tokenizer.json'}: unreadable ({exc})") from None
    config_file = path / "tokenizer_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    special = {key: text for key in SPECIAL_TOKEN_KEYS if (text := token_text(config.get(key))) is not None}
    return TokenizerDir(path=path, tokenizer=tokenizer, config=config, eos_id=_eos_id(tokenizer, config, path),
                        special_tokens=special, chat_template=chat_template_of(config, path),
                        fingerprint=fingerprint(path))
