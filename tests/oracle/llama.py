"""A reference forward pass of a llama-architecture GGUF in float64 numpy: the log-probability of each token of a
sequence given the ones before it, computed from the file's weights alone (read with the ``gguf`` package,
llama.cpp's own reader), independently of llama-server. The e2e test of a completion's ``echo`` compares the
engine's scores with it.

Only what SmolLM2 uses: RMSNorm, grouped-query attention with rotary positions (llama.cpp's "normal" mode:
adjacent pairs, the converted checkpoint's Q and K already permuted for it), a SwiGLU feed-forward, the output
projection tied to the token embeddings when the file has none. Weights must be F32 (a ``llama-quantize`` F32 copy
of a quantized file holds the same dequantized values the engine computes with)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np


class Llama:
    def __init__(self, path: Path) -> None:
        reader = gguf.GGUFReader(path)
        meta = {k: v.contents() for k, v in reader.fields.items() if k.startswith("llama.")}
        self.layers = int(meta["llama.block_count"])
        self.heads = int(meta["llama.attention.head_count"])
        self.kv_heads = int(meta["llama.attention.head_count_kv"])
        self.eps = float(meta["llama.attention.layer_norm_rms_epsilon"])
        self.theta = float(meta["llama.rope.freq_base"])
        for t in reader.tensors:
            if t.tensor_type != gguf.GGMLQuantizationType.F32:
                raise ValueError(f"{t.name} is {t.tensor_type.name}: the reference reads F32 weights only")
        self.w: dict[str, Any] = {t.name: np.asarray(t.data, dtype=np.float64) for t in reader.tensors}

    def _norm(self, x: Any, weight: Any) -> Any:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * weight

    def _rope(self, x: Any) -> Any:
        """Rotary positions on ``x`` (tokens, heads, head size), rotating adjacent pairs."""
        size = x.shape[-1]
        angle = np.arange(x.shape[0])[:, None] * self.theta ** (-np.arange(0, size, 2) / size)[None, :]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        even, odd = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    def logits(self, tokens: list[int]) -> Any:
        w, n = self.w, len(tokens)
        x = w["token_embd.weight"][tokens]
        causal = np.triu(np.full((n, n), -np.inf), 1)
        group = self.heads // self.kv_heads
        for i in range(self.layers):
            p = f"blk.{i}."
            h = self._norm(x, w[p + "attn_norm.weight"])
            q = self._rope((h @ w[p + "attn_q.weight"].T).reshape(n, self.heads, -1))
            k = self._rope((h @ w[p + "attn_k.weight"].T).reshape(n, self.kv_heads, -1))
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, self.kv_heads, -1)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[-1]) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            x = x + np.einsum("hts,shd->thd", scores, v).reshape(n, -1) @ w[p + "attn_output.weight"].T
            h = self._norm(x, w[p + "ffn_norm.weight"])
            gate = h @ w[p + "ffn_gate.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        out = w.get("output.weight", w["token_embd.weight"])
        return self._norm(x, w["output_norm.weight"]) @ out.T

    def scores(self, tokens: list[int]) -> list[tuple[float, dict[int, float]]]:
        """For each token after the first: its logprob given those before it, and every token's logprob there
        (as a dict of the five likeliest, for comparing alternatives)."""
        logits = self.logits(tokens)
        top = logits.max(-1, keepdims=True)
        logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        out = []
        for i in range(1, len(tokens)):
            row = logp[i - 1]
            best = np.argsort(-row)[:5]
            out.append((float(row[tokens[i]]), {int(t): float(row[t]) for t in best}))
        return out
