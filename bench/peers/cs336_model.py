"""The CS336 Transformer LM in plain PyTorch, as ktune's model/ runs it (docs/model.md):
token embedding; pre-norm blocks [RMSNorm -> causal MHA with RoPE (theta
10000, interleaved pairs) -> residual; RMSNorm -> SwiGLU -> residual]; final
RMSNorm; untied LM head; no biases; mean cross-entropy. Parameter names are
the state-dict names ktune's safetensors use. Shared by the CPU peer
(torch_cpu_e2e.py), the GPU peer (torch_e2e.py) and the golden-fixture
generator (tests/model/make_golden.py).
"""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.utils.checkpoint

SIZES = {  # name: (vocab, d_model, d_ff, layers, heads), the seed reports' sizes plus tiny
    "small": (10000, 768, 3072, 12, 12),
    "medium": (10000, 1024, 4096, 24, 16),
    "large": (10000, 1280, 5120, 36, 20),
    "xl": (10000, 1600, 6400, 48, 25),
    "2.7B": (10000, 2560, 10240, 32, 32),
    "tiny": (128, 64, 192, 2, 4),
}


class Linear(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        std = math.sqrt(2.0 / (d_in + d_out))
        self.weight = nn.Parameter(nn.init.trunc_normal_(torch.empty(d_out, d_in), 0.0, std, -3 * std, 3 * std))

    def forward(self, x):
        return x @ self.weight.T


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(context_length, head_dim, theta, dtype=torch.float32):
    """cos and sin (context_length, head_dim/2) of the angles p * theta^(-2i/head_dim), as ktune's
    rope_tables (templates/rope/reference.cpp) makes them: angles and their cos/sin in float64, then
    rounded to `dtype` (float32, the tables ktune's kernels read)."""
    inv = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.arange(context_length, dtype=torch.float64)[:, None] * inv[None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rope(x, cos, sin):
    """x (B, H, T, D): rotate pairs (x[2i], x[2i+1]) by the angles of cos, sin (at least T rows).

    The rotation runs in the tables' dtype (float32; ktune's kernels rotate bf16 activations in
    float32 too) and the result is x's dtype."""
    T = x.shape[-2]
    cos, sin = cos[:T], sin[:T]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.sdpa = False  # True: F.scaled_dot_product_attention (fused); False: the scores materialised
        self.q_proj, self.k_proj, self.v_proj, self.output_proj = (Linear(d, d) for _ in range(4))

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        q, k, v = (p(x).view(B, T, H, D).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.sdpa:
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.output_proj(out.transpose(1, 2).reshape(B, T, C))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        probs = torch.softmax(scores.masked_fill(~mask[:T, :T], float("-inf")), dim=-1)
        return self.output_proj((probs @ v).transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.w1, self.w2, self.w3 = Linear(d, d_ff), Linear(d_ff, d), Linear(d, d_ff)

    def forward(self, x):
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d, d_ff, heads):
        super().__init__()
        self.ln1, self.attn = RMSNorm(d), Attention(d, heads)
        self.ln2, self.ffn = RMSNorm(d), SwiGLU(d, d_ff)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.ln1(x), cos, sin, mask)
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    """The model for sequences of at most `context_length` tokens. The RoPE tables (float32, as ktune's)
    and the causal mask are built once, here, as buffers (not in the state dict): `model.to(device)`
    moves them with the parameters, and every forward reads slices of them, on the device, with no host
    work or copy. After a dtype change of the whole model (`model.double()`), `rebuild_tables()` makes
    the tables again from float64 in the new dtype instead of the float32 ones converted."""

    def __init__(self, vocab, d_model, d_ff, layers, heads, theta=10000.0, *, context_length):
        super().__init__()
        self.theta, self.context_length = theta, context_length
        self.token_embeddings = nn.Embedding(vocab, d_model)
        nn.init.trunc_normal_(self.token_embeddings.weight, 0.0, 1.0, -3.0, 3.0)
        self.layers = nn.ModuleList(Block(d_model, d_ff, heads) for _ in range(layers))
        self.ln_final = RMSNorm(d_model)
        self.lm_head = Linear(d_model, vocab)
        self.recompute = False  # each block under torch.utils.checkpoint when training
        cos, sin = rope_tables(context_length, d_model // heads, theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        mask = torch.ones(context_length, context_length, dtype=torch.bool).tril()
        self.register_buffer("causal_mask", mask, persistent=False)

    def rebuild_tables(self, device=None):
        """The RoPE tables again from float64, in the dtype they are now, and the causal mask, on `device`
        (default: where they are). A model built on the meta device (no initialisation, its weights loaded with
        `load_state_dict(..., assign=True)`) gets its real tables here."""
        device = self.rope_cos.device if device is None else torch.device(device)
        head_dim = 2 * self.rope_cos.shape[-1]
        cos, sin = rope_tables(self.context_length, head_dim, self.theta, self.rope_cos.dtype)
        self.rope_cos, self.rope_sin = cos.to(device), sin.to(device)
        n = self.context_length
        self.causal_mask = torch.ones(n, n, dtype=torch.bool).tril().to(device)

    def forward(self, tokens):
        if tokens.shape[-1] > self.context_length:
            raise ValueError(f"{tokens.shape[-1]} tokens in a sequence: the model was built for at most "
                             f"{self.context_length} (context_length)")
        x = self.token_embeddings(tokens)
        tables = (self.rope_cos, self.rope_sin, self.causal_mask)
        for block in self.layers:
            if self.recompute and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, *tables, use_reentrant=False)
            else:
                x = block(x, *tables)
        return self.lm_head(self.ln_final(x))


def loss_fn(model, tokens, targets):
    logits = model(tokens)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def save_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (float32 or int32) in the safetensors format."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        dtype = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32"}[t.dtype]
        raw = t.numpy().tobytes() if hasattr(t, "numpy") else bytes(t.untyped_storage())
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs))
