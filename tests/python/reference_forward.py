# An f32 reference forward for the real checkpoints (llama and gemma3 architectures), written from the models'
# published definitions in plain numpy over the weights that the `gguf` package dequantizes: no canvas code
# and no llama.cpp code, so that canvas and llama.cpp can each be measured against it.
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


class GgufWeights:
    def __init__(self, path):
        self.reader = GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.arch = self.field("general.architecture")
        self.dequantized = {}  # name -> f32 array, each tensor dequantized once

    def field(self, key, default=None):
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def has(self, name):
        return name in self.tensors

    def __getitem__(self, name):
        """The tensor as f32 in numpy's row-major shape (GGUF's ne reversed: rows x columns)."""
        if name not in self.dequantized:
            t = self.tensors[name]
            self.dequantized[name] = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(
                [int(n) for n in reversed(t.shape)])
        return self.dequantized[name]


def rms_norm(x, weight, eps):
    x = x.astype(np.float64)
    return (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight).astype(np.float32)


def rope(x, pos, theta, neox):
    """x: [tokens, heads, dim]. neox: the two halves of a head are rotated together (Gemma); otherwise
    consecutive pairs (llama's GGUF layout, whose converter permutes Q and K for it)."""
    dim = x.shape[-1]
    inv = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x = x.astype(np.float64)
    if neox:
        a, b = x[..., : dim // 2], x[..., dim // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1).astype(np.float32)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out.astype(np.float32)


def attention(q, k, v, scale, window=0):
    """Causal attention, GQA; q [T, H, D], k/v [T, KV, D]; window > 0: key j visible from q when q - j < window."""
    T, H, _ = q.shape
    group = H // k.shape[1]
    qi, kj = np.arange(T)[:, None], np.arange(T)[None, :]
    visible = kj <= qi
    if window > 0:
        visible &= (qi - kj) < window
    out = np.empty((T, H, v.shape[-1]), np.float32)
    for h in range(H):
        s = (q[:, h, :].astype(np.float64) @ k[:, h // group, :].T.astype(np.float64)) * scale
        s = np.where(visible, s, -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        out[:, h, :] = p @ v[:, h // group, :]
    return out


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def silu(x):
    return x / (1 + np.exp(-x))


def logits(w: GgufWeights, ids):
    """Every row's logits [len(ids), vocab] of a causal pass over ids."""
    a = w.arch
    hidden = w.field(f"{a}.embedding_length")
    layers = w.field(f"{a}.block_count")
    heads = w.field(f"{a}.attention.head_count")
    kv_heads = w.field(f"{a}.attention.head_count_kv")
    eps = w.field(f"{a}.attention.layer_norm_rms_epsilon")
    head_dim = w.field(f"{a}.attention.key_length", hidden // heads)
    embd = w["token_embd.weight"]
    out_w = w["output.weight"] if w.has("output.weight") else embd
    ids = np.asarray(ids)
    pos = np.arange(len(ids))
    x = embd[ids].astype(np.float32)
    gemma = a == "gemma3"
    if gemma:
        x *= np.float32(np.sqrt(hidden))
    for l in range(layers):
        b = f"blk.{l}."
        h = rms_norm(x, w[b + "attn_norm.weight"], eps)
        q = (h @ w[b + "attn_q.weight"].T).reshape(len(ids), heads, head_dim)
        k = (h @ w[b + "attn_k.weight"].T).reshape(len(ids), kv_heads, head_dim)
        v = (h @ w[b + "attn_v.weight"].T).reshape(len(ids), kv_heads, head_dim)
        if gemma:
            # Five sliding layers (RoPE base 10000, a 512-token window here), then a full one.
            full = (l + 1) % 6 == 0
            q = rms_norm(q, w[b + "attn_q_norm.weight"], eps)
            k = rms_norm(k, w[b + "attn_k_norm.weight"], eps)
            theta = w.field(f"{a}.rope.freq_base") if full else 10000.0
            window = 0 if full else w.field(f"{a}.attention.sliding_window")
            q, k = rope(q, pos, theta, True), rope(k, pos, theta, True)
            o = attention(q, k, v, 1 / np.sqrt(head_dim), window).reshape(len(ids), -1) @ w[b + "attn_output.weight"].T
            x = x + rms_norm(o, w[b + "post_attention_norm.weight"], eps)
            h = rms_norm(x, w[b + "ffn_norm.weight"], eps)
            f = (gelu_tanh(h @ w[b + "ffn_gate.weight"].T) * (h @ w[b + "ffn_up.weight"].T)) @ w[b + "ffn_down.weight"].T
            x = x + rms_norm(f, w[b + "post_ffw_norm.weight"], eps)
        else:
            theta = w.field(f"{a}.rope.freq_base", 10000.0)
            q, k = rope(q, pos, theta, False), rope(k, pos, theta, False)
            o = attention(q, k, v, 1 / np.sqrt(head_dim)).reshape(len(ids), -1) @ w[b + "attn_output.weight"].T
            x = x + o
            h = rms_norm(x, w[b + "ffn_norm.weight"], eps)
            x = x + (silu(h @ w[b + "ffn_gate.weight"].T) * (h @ w[b + "ffn_up.weight"].T)) @ w[b + "ffn_down.weight"].T
    return rms_norm(x, w["output_norm.weight"], eps) @ out_w.T
