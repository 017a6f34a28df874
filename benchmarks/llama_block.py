"""A self-contained Llama-style decoder stack (random weights) for the end-to-end benchmark.

Same projection shapes and module names as Hugging Face Llama (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
down_proj, all bias-free nn.Linear), RMSNorm, rotary position embedding, SwiGLU MLP, grouped-query attention via
F.scaled_dot_product_attention(enable_gqa=True) -- except a one-token decode step, which folds each kv head's group of
query heads into the query length (exact, no k/v repetition, any SDPA backend). No embedding or LM head: inputs are
hidden states [B, S, hidden].

Two phases:
- prefill: h [B, S, hidden], causal attention over the S new tokens, no cache.
- decode: h [B, S_new, hidden] with a static-shape KV cache per layer (k, v: [B, kv_heads, L, head_dim]) whose
  last S_new slots receive the new tokens (positions L-S_new..L-1, written in place) and whose first L-S_new slots
  hold the past; attention over all L slots. The position follows from tensor shapes, so a decode step has no
  integer arguments (CUDA-graph capturable; torch.compile sees shapes only).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cudal2_testing.measure.shapes import LLM_SHAPES_FILE

KVCache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class LlamaConfig:
    """Decoder dimensions. Defaults: Llama-3-8B projection shapes, 4 layers."""

    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    layers: int = 4
    rope_theta: float = 500000.0
    eps: float = 1e-5

    @classmethod
    def from_shapes(cls, model: str = "llama-3-8b", layers: int = 4) -> LlamaConfig:
        """Dimensions of `model` from cudal2_testing/measure/llm_shapes.json, with `layers` decoder layers."""
        spec = json.loads(LLM_SHAPES_FILE.read_text())["models"][model]
        return cls(hidden=spec["hidden"], intermediate=spec["intermediate"], heads=spec["heads"],
                   kv_heads=spec["kv_heads"], head_dim=spec["head_dim"], layers=layers)


class RMSNorm(nn.Module):
    """y = x / rms(x) * weight over the last dim, computed in fp32, returned in x.dtype."""

    def __init__(self, dim: int, eps: float, **factory):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rope_tables(cfg: LlamaConfig, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [S, head_dim] in `dtype` for integer positions [S] (device of `positions`)."""
    even = torch.arange(0, cfg.head_dim, 2, device=positions.device).float()
    inv_freq = 1.0 / cfg.rope_theta ** (even / cfg.head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, S, D] by cos/sin [S, D] (rotate-half convention, as HF Llama)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    """Grouped-query self-attention with q/k/v/o projections."""

    def __init__(self, cfg: LlamaConfig, **factory):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=False, **factory)
        self.k_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False, **factory)
        self.v_proj = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=False, **factory)
        self.o_proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """x [B, S, hidden] -> [B, S, hidden]. With `cache` (k, v [B, kv_heads, L, head_dim]): the S tokens are
        written to its last S slots and attend to all L."""
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            k_cache, v_cache = cache
            pos = k_cache.shape[2] - s
            k_cache[:, :, pos:] = k
            v_cache[:, :, pos:] = v
            if s == 1:  # one token: fold each kv head's query group into the query length, plain SDPA
                group = q.view(b, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
                out = F.scaled_dot_product_attention(group, k_cache, v_cache).view(b, self.heads, 1, self.head_dim)
            else:
                mask = torch.ones(s, pos + s, dtype=torch.bool, device=x.device).tril(pos)
                out = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, self.heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig, **factory):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False, **factory)
        self.up_proj = nn.Linear(cfg.hidden, cfg.intermediate, bias=False, **factory)
        self.down_proj = nn.Linear(cfg.intermediate, cfg.hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: h + attn(norm(h)), then + mlp(norm(.))."""

    def __init__(self, cfg: LlamaConfig, **factory):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden, cfg.eps, **factory)
        self.self_attn = Attention(cfg, **factory)
        self.post_attention_layernorm = RMSNorm(cfg.hidden, cfg.eps, **factory)
        self.mlp = MLP(cfg, **factory)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                cache: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


def run_layers(layers: Sequence[nn.Module], norm: nn.Module, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               caches: KVCache | None = None) -> torch.Tensor:
    """Apply `layers` (DecoderLayers, or compiled wrappers of them) then `norm`: [B, S, hidden] -> same."""
    for i, layer in enumerate(layers):
        h = layer(h, cos, sin, None if caches is None else caches[i])
    return norm(h)


class LlamaStack(nn.Module):
    """`cfg.layers` DecoderLayers and a final RMSNorm: hidden states [B, S, hidden] -> [B, S, hidden]."""

    def __init__(self, cfg: LlamaConfig, device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg, device=device, dtype=dtype) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.eps, device=device, dtype=dtype)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, caches: KVCache | None = None
                ) -> torch.Tensor:
        """h [B, S, hidden] -> [B, S, hidden]; `caches` as from `new_cache` (decode) or None (prefill)."""
        return run_layers(self.layers, self.norm, h, cos, sin, caches)

    def new_cache(self, batch: int, length: int, fill_std: float = 1.0, generator: torch.Generator | None = None
                  ) -> KVCache:
        """Per-layer (k, v) [batch, kv_heads, length, head_dim], N(0, fill_std^2): length - S_new past tokens plus
        the S_new slots a decode step overwrites."""
        p = self.norm.weight
        shape = (batch, self.cfg.kv_heads, length, self.cfg.head_dim)

        def rand() -> torch.Tensor:
            return (torch.randn(shape, device=p.device, generator=generator) * fill_std).to(p.dtype)

        return [(rand(), rand()) for _ in range(self.cfg.layers)]
