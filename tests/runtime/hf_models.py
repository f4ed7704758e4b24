"""Tiny Hugging Face model directories made locally (nothing downloaded): ``make_hf_model(tmp,
family, **overrides)`` writes config.json + model.safetensors with transformers' ``save_pretrained``
and a tiny tokenizer (tests/tiny_tokenizer.py: tokenizer.json trained here with ``tokenizers``,
tokenizer_config.json with a chat template). Every parameter is perturbed from transformers' init
(norms ones, biases zeros), so a weight that fails to load shows in the outputs."""

from __future__ import annotations

from pathlib import Path

from tests.tiny_tokenizer import make_tokenizer_dir

# Shared by every family: GQA (4 heads, 2 kv heads), 2 layers, divisible by tensor 2.
BASE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128, "rms_norm_eps": 1e-6}
# What each family's tiny model exercises beyond the base.
FAMILY = {
    "llama": ("LlamaConfig", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 4.0,
                                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 32}}),
    "mistral": ("MistralConfig", {"sliding_window": 4096}),  # longer than any sequence: no mask
    "qwen2": ("Qwen2Config", {"tie_word_embeddings": True}),  # q/k/v biases
    "qwen3": ("Qwen3Config", {"head_dim": 32}),  # q/k norms, head_dim != hidden / heads
}
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}<|assistant|>{% generation %}{{ message['content'] }}</s>{% endgeneration %}"
    "{% else %}<|{{ message['role'] }}|>{{ message['content'] }}</s>{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
TOKENIZER_TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "a tiny model reads a tiny corpus and answers a tiny question",
    "hello world, this is phalanx training a transformer on a few sentences",
]


def make_tokenizer(out: Path, vocab_size: int) -> None:
    """A byte-level BPE tokenizer of at most ``vocab_size`` tokens, saved with its chat template."""
    make_tokenizer_dir(out, chat_template=CHAT_TEMPLATE, eos="</s>", bos="<s>", unk="<unk>", pad="<pad>",
                       special_tokens=SPECIAL_TOKENS, vocab_size=vocab_size, corpus=TOKENIZER_TEXT,
                       alphabet_size=vocab_size // 2)


def make_hf_model(tmp: str | Path, family: str = "llama", *, seed: int = 0, tokenizer: bool = True,
                  **overrides) -> Path:
    """``<tmp>/<family>``: a tiny ``<Family>ForCausalLM`` directory; ``overrides`` are config fields."""
    import torch
    import transformers

    config_cls, extra = FAMILY[family]
    config = getattr(transformers, config_cls)(**{**BASE, **extra, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    out = Path(tmp) / family
    model.save_pretrained(out)
    if tokenizer:
        make_tokenizer(out, config.vocab_size)
    return out
