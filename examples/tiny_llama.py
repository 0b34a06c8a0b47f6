"""The model of the trainer -> engine example: Llama-3.1-8B's architecture at ferry's preset scale
1/64 (hidden 64, 32 query heads and 8 KV heads of head_dim 2, MLP 224, vocab 2016, 32 layers),
as plain torch functions over a dict of weights named as in Hugging Face checkpoints.

The trainer calls forward(..., fused=False) on separate q/k/v and gate/up weights; the engine calls
forward(..., fused=True) on vLLM's fused qkv_proj and gate_up_proj, one matmul each, split after.
Both compute in fp32 on weights rounded to bf16 (the dtype both layouts store)."""

from __future__ import annotations

import torch

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB, LAYERS = 64, 32, 8, 2, 224, 2016, 32
ROPE_THETA, EPS = 500000.0, 1e-5


def llama_shapes(hidden: int, heads: int, kv_heads: int, head_dim: int, mlp: int, vocab: int,
                 layers: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of a Llama model of these dims, by its Hugging Face checkpoint name."""
    shapes = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,),
              "lm_head.weight": (vocab, hidden)}
    for l in range(layers):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "mlp.gate_proj.weight": (mlp, hidden),
            p + "mlp.up_proj.weight": (mlp, hidden),
            p + "mlp.down_proj.weight": (hidden, mlp)})
    return shapes


def init_weights(seed: int) -> dict[str, torch.Tensor]:
    """Random fp32 weights of every tensor of the model, the same for the same seed."""
    g = torch.Generator().manual_seed(seed)
    shapes = llama_shapes(HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP, VOCAB, LAYERS)
    return {name: (1.0 + 0.1 * torch.randn(shape, generator=g)) if len(shape) == 1
            else torch.randn(shape, generator=g) * shape[-1] ** -0.5
            for name, shape in shapes.items()}


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [batch, heads, tokens, head_dim] (rotate-half convention)."""
    t, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    angles = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    b, t, _ = q.shape
    q = rope(q.view(b, t, HEADS, HEAD_DIM).transpose(1, 2))
    k = rope(k.view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2))
    v = v.view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
    k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    scores = q @ k.transpose(-1, -2) / HEAD_DIM ** 0.5
    causal = torch.ones(t, t, dtype=torch.bool).triu(1)
    probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
    return (probs @ v).transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM)


def forward(w: dict[str, torch.Tensor], tokens: torch.Tensor, fused: bool) -> torch.Tensor:
    """Logits [batch, tokens, VOCAB] of `tokens` [batch, tokens]. `w` maps names to fp32 weights:
    separate q/k/v/gate/up (fused=False) or vLLM's qkv_proj/gate_up_proj (fused=True)."""
    x = w["model.embed_tokens.weight"][tokens]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        h = rms_norm(x, w[p + "input_layernorm.weight"])
        if fused:
            q, k, v = (h @ w[p + "self_attn.qkv_proj.weight"].T).split(
                [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        else:
            q, k, v = (h @ w[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        x = x + attention(q, k, v) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"])
        if fused:
            gate, up = (h @ w[p + "mlp.gate_up_proj.weight"].T).split([MLP, MLP], dim=-1)
        else:
            gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    return rms_norm(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
