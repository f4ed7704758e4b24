"""A Llama-style decoder-only transformer (RMSNorm, RoPE, GQA, SwiGLU), torchtitan-shaped.

Parallelism-friendly by construction:

* layers live in a ``ModuleDict`` keyed by their global index, so a pipeline stage is made by
  deleting layers (and setting ``tok_embeddings``/``norm``/``output`` to None) while parameter
  names stay those of the full model (checkpoints stay interchangeable across layouts);
* attention infers the local head count from the projection output (``view(..., -1, head_dim)``),
  so tensor parallelism needs no model changes;
* RoPE uses real cos/sin buffers (no complex tensors, which DTensor handles poorly).

Presets rotate interleaved pairs of a head (Meta's layout); a model imported from Hugging Face
rotates its halves (``rope_style "half"``, transformers' ``rotate_half``) so its weights load by
renaming alone, and may scale the RoPE frequencies, add biases to the attention projections and
normalise each query and key head (Qwen3) — ``phalanx_common.presets.ModelShape`` says which.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from phalanx_common.presets import ModelShape


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def rope_inv_freq(head_dim: int, theta: float, scaling: tuple = (), device=None) -> torch.Tensor:
    """The rotation frequencies of each pair, [head_dim // 2] float32, scaled like transformers'
    RoPE init functions (``modeling_rope_utils``: linear, llama3)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    params = dict(scaling)
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        return inv_freq
    factor = float(params["factor"])
    if rope_type == "linear":
        return inv_freq / factor
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, factor, float(params["low_freq_factor"]),
                                float(params["high_freq_factor"]), float(params["original_max_position_embeddings"]))
    raise ValueError(f"rope_scaling: rope_type {rope_type!r} is not supported")


def _llama3_inv_freq(inv_freq: torch.Tensor, factor: float, low_freq_factor: float, high_freq_factor: float,
                     old_context_len: float) -> torch.Tensor:
    """Llama 3.1: long wavelengths divided by ``factor``, short ones kept, a smooth blend between."""
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cache(head_dim: int, max_seq_len: int, theta: float, device=None, scaling: tuple = ()) -> torch.Tensor:
    """[max_seq_len, head_dim // 2, 2] of (cos, sin), float32."""
    freqs = rope_inv_freq(head_dim, theta, scaling, device=device)
    t = torch.arange(max_seq_len, device=device, dtype=torch.float32)
    angles = torch.outer(t, freqs)
    return torch.stack([angles.cos(), angles.sin()], dim=-1)


def apply_rope(x: torch.Tensor, cache: torch.Tensor, style: str = "interleaved") -> torch.Tensor:
    """x: [bs, seq, heads, head_dim]; rotate pairs (x0, x1) — adjacent (interleaved) or one from
    each half of the head (half)."""
    seq = x.shape[1]
    cos = cache[:seq, :, 0].view(1, seq, 1, -1)
    sin = cache[:seq, :, 1].view(1, seq, 1, -1)
    if style == "half":
        x0, x1 = x.float().chunk(2, dim=-1)
        return torch.cat([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).type_as(x)
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        self.head_dim = shape.head_dim
        self.n_rep = shape.n_heads // shape.n_kv_heads
        self.rope_style = shape.rope_style
        self.wq = nn.Linear(shape.dim, shape.n_heads * self.head_dim, bias=shape.qkv_bias)
        self.wk = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=shape.qkv_bias)
        self.wv = nn.Linear(shape.dim, shape.n_kv_heads * self.head_dim, bias=shape.qkv_bias)
        self.wo = nn.Linear(shape.n_heads * self.head_dim, shape.dim, bias=shape.o_bias)
        # Per head, on the local heads under tensor parallelism (parallelize.py).
        self.q_norm = RMSNorm(self.head_dim, shape.norm_eps) if shape.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, shape.norm_eps) if shape.qk_norm else None

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        bs, seq, _ = x.shape
        q = self.wq(x).view(bs, seq, -1, self.head_dim)  # local heads under TP
        k = self.wk(x).view(bs, seq, -1, self.head_dim)
        v = self.wv(x).view(bs, seq, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, rope, self.rope_style), apply_rope(k, rope, self.rope_style)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.n_rep > 1 and q.device.type == "cuda":
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:  # CPU: the enable_gqa path is ~10x slower than expanding k/v
            if self.n_rep > 1:
                k, v = k.repeat_interleave(self.n_rep, dim=1), v.repeat_interleave(self.n_rep, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(bs, seq, -1))

    def reset_parameters(self, out_std: float) -> None:
        for lin in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=out_std)
        for lin in (self.wq, self.wk, self.wv, self.wo):
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)
        for norm in (self.q_norm, self.k_norm):
            if norm is not None:
                norm.reset_parameters()


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def reset_parameters(self, out_std: float) -> None:
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.w3.weight, mean=0.0, std=out_std)
        nn.init.trunc_normal_(self.w2.weight, mean=0.0, std=out_std)


def _sac_policy(ctx, op, *args, **kwargs):
    """Selective activation checkpointing (op level, like torchtitan): keep matmul and
    attention outputs, recompute the cheap element-wise ops."""
    from torch.utils.checkpoint import CheckpointPolicy

    save = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
            torch.ops.aten._scaled_dot_product_efficient_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention.default,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
            torch.ops.aten._scaled_dot_product_cudnn_attention.default}
    return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, shape: ModelShape):
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.attention = Attention(shape)
        self.ffn_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.feed_forward = FeedForward(shape.dim, shape.ffn_hidden)
        self.out_std = 0.02 / math.sqrt(2 * (layer_id + 1))
        self.ac_mode = "none"  # none | selective | full; set by parallelize

    def _forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope)
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        if self.ac_mode == "none" or not torch.is_grad_enabled():
            return self._forward(x, rope)
        if self.ac_mode == "full":
            return checkpoint(self._forward, x, rope, use_reentrant=False)
        from torch.utils.checkpoint import create_selective_checkpoint_contexts

        return checkpoint(self._forward, x, rope, use_reentrant=False,
                          context_fn=partial(create_selective_checkpoint_contexts, _sac_policy))

    def reset_parameters(self) -> None:
        self.attention_norm.reset_parameters()
        self.ffn_norm.reset_parameters()
        self.attention.reset_parameters(self.out_std)
        self.feed_forward.reset_parameters(self.out_std)


class Transformer(nn.Module):
    """Full model or one pipeline stage of it (missing parts are None / deleted layers).

    Input: token ids [bs, seq] (first stage) or hidden states [bs, seq, dim] (later stages).
    Output: logits [bs, seq, vocab] (last stage) or hidden states.
    """

    def __init__(self, shape: ModelShape):
        super().__init__()
        self.shape = shape
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(shape.vocab_size, shape.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, shape) for i in range(shape.n_layers)})
        self.norm: RMSNorm | None = RMSNorm(shape.dim, shape.norm_eps)
        self.output: nn.Linear | None = nn.Linear(shape.dim, shape.vocab_size, bias=False)
        self.tie_weights()
        self.register_buffer("rope", self.rope_table(), persistent=False)

    def rope_table(self, device: torch.device | None = None) -> torch.Tensor:
        shape = self.shape
        return rope_cache(shape.head_dim, shape.max_seq_len, shape.rope_theta, device=device,
                          scaling=shape.rope_scaling)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            h = layer(h, self.rope)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            h = self.output(h)
        return h

    def tie_weights(self) -> None:
        """With tied embeddings the output layer shares the embedding table (when this part holds
        both); ``to_empty`` gives every module a tensor of its own, so it is tied again after."""
        if self.shape.tie_embeddings and self.tok_embeddings is not None and self.output is not None:
            self.output.weight = self.tok_embeddings.weight

    @torch.no_grad()
    def init_rope(self, buffer_device: torch.device | None = None) -> None:
        """(Re)compute the RoPE buffer (after ``to_empty`` left it uninitialised)."""
        self.rope = self.rope_table(buffer_device or self.rope.device)

    @torch.no_grad()
    def init_weights(self, buffer_device: torch.device | None = None) -> None:
        """(Re)initialise every parameter and the RoPE buffer; works on meta-materialised and
        on DTensor-sharded parameters."""
        self.init_rope(buffer_device)
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.reset_parameters()
        if self.norm is not None:
            self.norm.reset_parameters()
        if self.output is not None and not self.shape.tie_embeddings:
            final_std = self.shape.dim ** -0.5
            nn.init.trunc_normal_(self.output.weight, mean=0.0, std=final_std,
                                  a=-3 * final_std, b=3 * final_std)


def build_transformer(shape: ModelShape, *, seed: int | None = None, device: str | torch.device = "cpu") -> Transformer:
    """Deterministic construction: every rank (and the single-process reference) with the same
    seed gets identical full weights."""
    if seed is not None:
        torch.manual_seed(seed)
    with torch.device(device):
        model = Transformer(shape)
    if str(device) != "meta":
        model.init_weights()
    return model
