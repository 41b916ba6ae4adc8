"""The reranker test model, converted from SmolLM2 (no reranker GGUF ships in a PyPI package): a reranker
shaped as Qwen3-Reranker is, a causal model whose score is how much likelier it finds "yes" than "no" after a
prompt that asks whether the document answers the query.

llama.cpp's rank pooling reads a classifier head only in a few architectures (bert, modern-bert, neo-bert and the
qwen3 family), not in llama, so the copy is a qwen3 model: SmolLM2's weights (an F32 file, so that engine and
reference compute with the same values), its Q and K rows put back in the order NeoX rotary positions pair (the
llama converter permuted them for llama.cpp's adjacent pairs), the per-head Q and K norms qwen3 requires (ones: it
is therefore not SmolLM2, and its scores are checked against the reference, not for their relevance), the
classifier head ``cls.output`` made of the token embeddings of "yes" and "no", ``pooling_type`` 4 (rank) and the
``tokenizer.chat_template.rerank`` prompt llama-server fills with ``{query}`` and ``{document}``."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

LABELS = ["yes", "no"]
RERANK_PROMPT = (
    '<|im_start|>system\nJudge whether the document answers the query. Answer only "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\nQuery: {query}\nDocument: {document}<|im_end|>\n<|im_start|>assistant\n"
)


def _unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """Undo the llama converter's Q/K permutation (each head's two halves interleaved into adjacent pairs)."""
    return (
        rows.reshape(heads, rows.shape[0] // heads // 2, 2, *rows.shape[1:])
        .swapaxes(1, 2)
        .reshape(rows.shape)
    )


def make_reranker(llama_f32: Path, out: Path) -> Path:
    """Write the reranker converted from an F32 llama GGUF to ``out``."""
    src = gguf.GGUFReader(llama_f32)
    if str(src.fields["general.architecture"].contents()) != "llama":
        raise ValueError(f"{llama_f32} is not a llama model")
    heads = int(src.fields["llama.attention.head_count"].contents())
    kv_heads = int(src.fields["llama.attention.head_count_kv"].contents())
    head_size = int(src.fields["llama.embedding_length"].contents()) // heads
    tokens: list[str] = src.fields["tokenizer.ggml.tokens"].contents()
    w = gguf.GGUFWriter(out, "qwen3")
    for key, field in src.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        name = "qwen3." + key.removeprefix("llama.") if key.startswith("llama.") else key
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), kind)
    w.add_uint32("qwen3.pooling_type", int(gguf.PoolingType.RANK))
    w.add_array("qwen3.classifier.output_labels", LABELS)
    w.add_string("tokenizer.chat_template.rerank", RERANK_PROMPT)
    for t in src.tensors:
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            raise ValueError(f"{t.name} is {t.tensor_type.name}: convert an F32 copy")
        data = np.asarray(t.data, dtype=np.float32)
        if t.name.endswith(("attn_q.weight", "attn_k.weight")):
            data = _unpermute(data, heads if t.name.endswith("attn_q.weight") else kv_heads)
        w.add_tensor(t.name, np.ascontiguousarray(data))
        if t.name.endswith("attn_norm.weight"):
            block = t.name.split(".")[1]
            for which in ("q", "k"):
                w.add_tensor(f"blk.{block}.attn_{which}_norm.weight", np.ones(head_size, np.float32))
        if t.name == "token_embd.weight":
            w.add_tensor("cls.output.weight", np.ascontiguousarray(data[[tokens.index(x) for x in LABELS]]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
