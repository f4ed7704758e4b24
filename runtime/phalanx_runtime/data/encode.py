"""Documents → token ids (and, for chat, the mask of answer tokens), a batch at a time.

Text is encoded as the tokenizer encodes it by default (its post-processor adds a BOS where the
model's tokenizer does); chat text as transformers' ``apply_chat_template`` tokenizes it (no
special tokens added: the template writes them). Every document ends with the end-of-document
token, appended unless it already ends with it; after chat it does not count as a label.
"""

from __future__ import annotations

import numpy as np

from phalanx_runtime.data.chat import ChatRenderer, answer_mask
from phalanx_runtime.data.options import field_error
from phalanx_runtime.data.tokenizer import TokenizerDir


class Encoder:
    def __init__(self, tok: TokenizerDir, chat: bool):
        self.tok = tok
        self.renderer = ChatRenderer(tok.chat_template, tok.special_tokens, str(tok.path)) if chat else None
        self.answers_found = self.answers_missing = 0  # assistant turns with / without a span

    def encode(self, documents: list) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """(ids, mask) per document; mask None: every token counts."""
        if self.renderer is None:
            encodings = self.tok.tokenizer.encode_batch(documents, add_special_tokens=True)
            return [(self._with_eos(np.asarray(e.ids, dtype=np.int64)), None) for e in encodings]
        texts, spans = [], []
        for messages in documents:
            text, answer_spans = self._render(messages)
            texts.append(text)
            spans.append(answer_spans)
        encodings = self.tok.tokenizer.encode_batch(texts, add_special_tokens=False)
        out = []
        for encoding, answer_spans in zip(encodings, spans, strict=True):
            ids = np.asarray(encoding.ids, dtype=np.int64)
            mask = answer_mask(encoding.offsets, answer_spans)
            full = self._with_eos(ids)
            out.append((full, np.concatenate([mask, np.zeros(len(full) - len(ids), bool)])))
        return out

    def _render(self, messages: list) -> tuple[str, list[tuple[int, int]]]:
        from jinja2.exceptions import TemplateError

        try:
            text, spans, missing = self.renderer.render_with_answers(messages)
        except TemplateError as exc:
            raise field_error("messages_field", f"the chat template refused a conversation ({exc}): "
                                                f"{str(messages)[:200]}") from None
        self.answers_found += len(spans)
        self.answers_missing += missing
        return text, spans

    def _with_eos(self, ids: np.ndarray) -> np.ndarray:
        eos = self.tok.eos_id
        return ids if len(ids) and ids[-1] == eos else np.append(ids, eos)
