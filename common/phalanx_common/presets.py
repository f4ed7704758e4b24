"""Built-in decoder-only transformer shapes. Pure data, shared by the validator and the runtime.

A preset names a shape; a Hugging Face model directory gives one too (``hf_config.py``), which may
use the fields presets leave at their defaults: an explicit head dimension, biases on the attention
projections, RMSNorm on queries and keys (Qwen3), RoPE over halves of a head (``rope_style
"half"``: Hugging Face's ``rotate_half``; presets rotate interleaved pairs) and scaled RoPE
frequencies."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class ModelShape:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int
    ffn_hidden: int
    max_seq_len: int
    tie_embeddings: bool = False
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    head_dim_override: int | None = None  # None: dim // n_heads
    qkv_bias: bool = False  # biases on wq, wk, wv
    o_bias: bool = False  # a bias on wo (Llama's and Qwen3's attention_bias set both)
    qk_norm: bool = False  # RMSNorm over each query and key head before RoPE (Qwen3)
    rope_style: str = "interleaved"  # interleaved | half (ROPE_STYLES)
    rope_scaling: tuple[tuple[str, float | str], ...] = ()  # sorted Hugging Face rope_scaling items; () none
    family: str = "llama"  # llama | mistral | qwen2 | qwen3 (FAMILIES)

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.dim // self.n_heads

    def num_params(self, include_embedding: bool = True) -> int:
        """Exact parameter count of the built-in transformer with this shape."""
        q_dim, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        attn = self.dim * q_dim * 2 + self.dim * kv_dim * 2  # wq, wo, wk, wv
        attn += (q_dim + 2 * kv_dim) * self.qkv_bias + self.dim * self.o_bias + 2 * self.head_dim * self.qk_norm
        mlp = 3 * self.dim * self.ffn_hidden  # w1, w2, w3 (SwiGLU)
        norms = 2 * self.dim
        per_layer = attn + mlp + norms
        embed = self.vocab_size * self.dim
        output = 0 if self.tie_embeddings else self.vocab_size * self.dim
        body = self.n_layers * per_layer + self.dim  # + final norm
        return body + output + (embed if include_embedding else 0)

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (torchtitan): 6·N_nonembed + 6·L·H·d_head·seq."""
        n = self.num_params(include_embedding=False)
        return 6 * n + 6 * self.n_layers * self.n_heads * self.head_dim * seq_len

    def to_dict(self) -> dict:
        return asdict(self)


ROPE_STYLES = ("interleaved", "half")
FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
# Fields only a Hugging Face config sets (a TrainingJob has no override for them).
PRETRAINED_FIELDS = ("head_dim_override", "qkv_bias", "o_bias", "qk_norm", "rope_style", "rope_scaling", "family")

PRESETS: dict[str, ModelShape] = {
    # CPU-test sizes.
    "debug": ModelShape(dim=64, n_layers=4, n_heads=4, n_kv_heads=2, vocab_size=256,
                        ffn_hidden=192, max_seq_len=256),
    "tiny": ModelShape(dim=128, n_layers=8, n_heads=8, n_kv_heads=4, vocab_size=256,
                       ffn_hidden=384, max_seq_len=512),
    "small": ModelShape(dim=512, n_layers=8, n_heads=8, n_kv_heads=8, vocab_size=32768,
                        ffn_hidden=1536, max_seq_len=1024),
    # Real shapes (Llama-3 family proportions).
    "125m": ModelShape(dim=768, n_layers=12, n_heads=12, n_kv_heads=12, vocab_size=32768,
                       ffn_hidden=2048, max_seq_len=2048, tie_embeddings=True),
    "1b": ModelShape(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=128256,
                     ffn_hidden=8192, max_seq_len=8192, tie_embeddings=True,
                     rope_theta=500000.0),
    "8b": ModelShape(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256,
                     ffn_hidden=14336, max_seq_len=8192, rope_theta=500000.0),
    "70b": ModelShape(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, vocab_size=128256,
                      ffn_hidden=28672, max_seq_len=8192, rope_theta=500000.0),
}

# camelCase override keys (as written in a TrainingJob) → ModelShape fields.
OVERRIDE_KEYS: dict[str, str] = {
    "dim": "dim",
    "nLayers": "n_layers",
    "nHeads": "n_heads",
    "nKvHeads": "n_kv_heads",
    "vocabSize": "vocab_size",
    "ffnHidden": "ffn_hidden",
    "maxSeqLen": "max_seq_len",
    "tieEmbeddings": "tie_embeddings",
    "ropeTheta": "rope_theta",
    "normEps": "norm_eps",
}


def resolve_shape(preset: str, overrides: dict | None = None) -> ModelShape:
    """Preset + overrides → shape. Raises KeyError/ValueError naming the bad key."""
    if preset not in PRESETS:
        raise KeyError(f"unknown model preset {preset!r}; known: {', '.join(PRESETS)}")
    shape = PRESETS[preset]
    if not overrides:
        return shape
    changes = {}
    for key, value in overrides.items():
        if key not in OVERRIDE_KEYS:
            raise ValueError(f"unknown model override {key!r}; known: {', '.join(OVERRIDE_KEYS)}")
        changes[OVERRIDE_KEYS[key]] = value
    return replace(shape, **changes)
