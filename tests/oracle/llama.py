"""A reference forward pass of a llama-architecture GGUF in float64 numpy: the log-probability of each token of a
sequence given the ones before it, computed from the file's weights alone (read with the ``gguf`` package,
llama.cpp's own reader), independently of llama-server. The e2e test of a completion's ``echo`` compares the
engine's scores with it.

Only what SmolLM2 uses: RMSNorm, grouped-query attention with rotary positions (llama.cpp's "normal" mode:
adjacent pairs, the converted checkpoint's Q and K already permuted for it), a SwiGLU feed-forward, the output
projection tied to the token embeddings when the file has none. And the qwen3 architecture the reranker test
model has (``tests/oracle/reranker.py``): the same with per-head RMSNorm on Q and K and NeoX rotary positions
(the two halves of each head), scored by its rank head. Weights must be F32 (a ``llama-quantize`` F32 copy
of a quantized file holds the same dequantized values the engine computes with)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import gguf
import numpy as np

TOLERANCE = 1e-3
"""How far, per token or score, the engine may be from the reference: the issue's bound."""


def exact_engine(model: str) -> str:
    """config.toml for a daemon whose ``model`` engine computes as the reference does: one slot, an F32 KV
    cache, flash attention off (on, the engine's sums run in another order: 6.8e-4 per token, not 2.3e-4)."""
    return f"""parallel = 1
[models."{model}:latest"]
cache_type_k = "f32"
cache_type_v = "f32"
flash_attn = "off"
"""


def f32_copy(llama_quantize: Path, model: Path, out: Path) -> Path:
    """An F32 copy of ``model`` by llama.cpp's own ``llama-quantize``: the dequantized weights the engine computes
    with, which the reference reads."""
    subprocess.run(
        [str(llama_quantize), "--allow-requantize", str(model), str(out), "F32"],
        check=True,
        capture_output=True,
    )
    return out


class Llama:
    def __init__(self, path: Path) -> None:
        reader = gguf.GGUFReader(path)
        arch = str(reader.fields["general.architecture"].contents())
        if arch not in ("llama", "qwen3"):
            raise ValueError(f"the reference computes llama and qwen3 models, not {arch}")
        meta = {
            k[len(arch) + 1 :]: v.contents() for k, v in reader.fields.items() if k.startswith(arch + ".")
        }
        self.neox = arch == "qwen3"
        self.layers = int(meta["block_count"])
        self.heads = int(meta["attention.head_count"])
        self.kv_heads = int(meta["attention.head_count_kv"])
        self.eps = float(meta["attention.layer_norm_rms_epsilon"])
        self.theta = float(meta["rope.freq_base"])
        for t in reader.tensors:
            if t.tensor_type != gguf.GGMLQuantizationType.F32:
                raise ValueError(f"{t.name} is {t.tensor_type.name}: the reference reads F32 weights only")
        self.w: dict[str, Any] = {t.name: np.asarray(t.data, dtype=np.float64) for t in reader.tensors}

    def _norm(self, x: Any, weight: Any) -> Any:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * weight

    def _rope(self, x: Any) -> Any:
        """Rotary positions on ``x`` (tokens, heads, head size), rotating adjacent pairs (NeoX: element ``i``
        with ``i + size/2``)."""
        size = x.shape[-1]
        angle = np.arange(x.shape[0])[:, None] * self.theta ** (-np.arange(0, size, 2) / size)[None, :]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        a, b = (
            (slice(0, size // 2), slice(size // 2, size))
            if self.neox
            else (slice(0, None, 2), slice(1, None, 2))
        )
        first, second = x[..., a], x[..., b]
        out = np.empty_like(x)
        out[..., a] = first * cos - second * sin
        out[..., b] = first * sin + second * cos
        return out

    def _heads(self, h: Any, p: str, which: str, count: int) -> Any:
        """Q or K of every token, per head, normed per head where the model has the norm, rotated."""
        x = (h @ self.w[p + f"attn_{which}.weight"].T).reshape(h.shape[0], count, -1)
        norm = self.w.get(p + f"attn_{which}_norm.weight")
        return self._rope(x if norm is None else self._norm(x, norm))

    def logits(self, tokens: list[int]) -> Any:
        out = self.w.get("output.weight", self.w["token_embd.weight"])
        return self.hidden(tokens) @ out.T

    def rank(self, tokens: list[int]) -> float:
        """A reranker's score for one query-and-document prompt, as llama.cpp's rank pooling computes it for
        qwen3: the last token's hidden state through the classifier head, a softmax, the first label's share."""
        head = self.w["cls.output.weight"] @ self.hidden(tokens)[-1]
        shares = np.exp(head - head.max())
        return float(shares[0] / shares.sum())

    def hidden(self, tokens: list[int]) -> Any:
        """Every token's final hidden state, after the output norm."""
        w, n = self.w, len(tokens)
        x = w["token_embd.weight"][tokens]
        causal = np.triu(np.full((n, n), -np.inf), 1)
        group = self.heads // self.kv_heads
        for i in range(self.layers):
            p = f"blk.{i}."
            h = self._norm(x, w[p + "attn_norm.weight"])
            q = self._heads(h, p, "q", self.heads)
            k = self._heads(h, p, "k", self.kv_heads)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, self.kv_heads, -1)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(q.shape[-1]) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            x = x + np.einsum("hts,shd->thd", scores, v).reshape(n, -1) @ w[p + "attn_output.weight"].T
            h = self._norm(x, w[p + "ffn_norm.weight"])
            gate = h @ w[p + "ffn_gate.weight"].T
            x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        return self._norm(x, w["output_norm.weight"])

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
