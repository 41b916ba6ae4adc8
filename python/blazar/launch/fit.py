"""Memory estimation and context fitting for llama.cpp children: KV cache bytes from GGUF metadata, plus weights
and a compute allowance, fitted to free VRAM or RAM.

The KV formula follows llama.cpp (``src/llama-kv-cache.cpp``, ``llama-kv-cache-iswa.cpp``, ``llama-context.cpp``):
the context is padded to 256 cells; with ``--parallel N`` (non-unified KV, llama-server's default when N is
given) each of the N streams holds ``pad256(ctx / N)`` cells, and with ``--kv-unified`` one stream of ``pad256(ctx)``
cells is shared by every slot (``KvSettings.streams``); each layer with a KV cache stores K and V rows of
``head_count_kv * key_length`` and ``head_count_kv * value_length`` elements per cell in the cache type (f16 2
bytes, q8_0 34/32, q4_0 18/32, ...); sliding-window layers hold only ``pad256(min(cells, window + n_ubatch))``
cells unless ``--swa-full``; MLA models (``key_length_mla``) keep no V. The compute buffer is an allowance, not a
measurement: it scales with the micro-batch, and without flash attention with the KQ matrix.

Pure: the caller passes the metadata dict, file sizes and a ``Hardware`` snapshot; nothing here reads files or
probes devices. A model that cannot fit is a ``ProfileUnfit`` (503) whose message names the levers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from blazar.errors import LaneError
from blazar.launch.hardware import Hardware, human_bytes

MIB = 1 << 20
CTX_GRAIN = 256
"""llama.cpp pads contexts (and each stream's share) to this many cells."""
FIT_MIN_CTX = 4096
"""Like llama.cpp's ``--fit-ctx``: the context is shrunk down to this before layers are moved off the GPU."""
N_UBATCH = 512
"""llama-server's default physical batch, which sizes the compute buffer and the SWA cache slack."""
DEFAULT_TRAINED_CTX = 4096
"""Used when a GGUF does not say its trained context."""

GGML_TYPE_SIZE: dict[str, tuple[int, int]] = {
    "f32": (1, 4), "f16": (1, 2), "bf16": (1, 2), "q8_0": (32, 34), "q5_1": (32, 24), "q5_0": (32, 22),
    "q4_1": (32, 20), "q4_0": (32, 18), "iq4_nl": (32, 18),
}  # fmt: skip
"""(elements per block, bytes per block) for each KV cache type (ggml's type traits)."""

SWA_PATTERNS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False), "gemma-embedding": (6, False),
    "cohere2": (4, False), "cohere2moe": (4, True), "exaone4": (4, False), "exaone-moe": (4, False),
    "llama4": (4, False), "olmo2": (4, False), "gpt-oss": (2, False), "afmoe": (4, False),
    "smallthinker": (4, True), "plamo3": (8, False), "mellum": (4, False), "laguna": (4, True),
    "modern-bert": (3, True), "muse-glimmer": (4, False),
}  # fmt: skip
"""Architectures llama.cpp gives sliding-window layers when ``<arch>.attention.sliding_window`` > 0: the default
pattern length and whether the dense layer comes first (``llama_hparams::set_swa_pattern``). A GGUF's own
``<arch>.attention.sliding_window_pattern`` wins."""

KV_FROM_START: dict[str, int] = {"gemma3n": 20}
"""Architectures whose later layers reuse earlier layers' KV (no cache of their own) by a fixed count."""


class ProfileUnfit(LaneError):
    """The model cannot be served within this machine's memory, or its KV settings cannot work together.

    The message names the levers: ctx_size, the KV cache types (KV quantization), gpu_layers.
    """

    status = 503


def row_bytes(cache_type: str, elements: int) -> int:
    """Bytes of one cache row of ``elements`` values in ``cache_type`` (rounded up to whole blocks)."""
    block, size = GGML_TYPE_SIZE[cache_type]
    return -(-elements // block) * size


def pad(n: int, grain: int = CTX_GRAIN) -> int:
    return -(-n // grain) * grain


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _per_layer(v: object, n_layer: int, default: int) -> list[int]:
    """A scalar or per-layer array metadata value as one int per layer."""
    if isinstance(v, list) and len(v) == n_layer and all(_int(x) is not None for x in v):
        return [int(x) for x in v]
    x = _int(v)
    if x is None and isinstance(v, list) and v and all(_int(y) is not None for y in v):
        x = max(int(y) for y in v)
    return [default if x is None else x] * n_layer


@dataclass(frozen=True, slots=True)
class KvLayer:
    """One layer's per-cell KV row widths (elements) and whether it is a sliding-window layer."""

    k: int
    v: int
    swa: bool


@dataclass(frozen=True, slots=True)
class KvShape:
    """What the KV and compute estimates need from a model's GGUF metadata."""

    architecture: str
    n_layer: int
    trained_ctx: int
    n_embd: int
    n_head: int
    n_ff: int
    n_vocab: int
    n_swa: int
    layers: tuple[KvLayer, ...]
    """Only the layers that own a KV cache."""

    @property
    def has_swa(self) -> bool:
        return self.n_swa > 0 and any(layer.swa for layer in self.layers)


def _swa_flags(md: Mapping[str, object], arch: str, n_layer: int, n_swa: int) -> list[bool]:
    pattern = md.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == n_layer and all(isinstance(x, bool) for x in pattern):
        return [bool(x) for x in pattern]
    if n_swa <= 0 or arch not in SWA_PATTERNS:
        return [False] * n_layer
    n_pattern, dense_first = SWA_PATTERNS[arch]
    explicit = _int(pattern)
    if explicit is not None:
        n_pattern = explicit
    if n_pattern == 0:
        return [True] * n_layer
    if dense_first:
        return [il % n_pattern != 0 for il in range(n_layer)]
    return [il % n_pattern < n_pattern - 1 for il in range(n_layer)]


def kv_shape(metadata: Mapping[str, object]) -> KvShape:
    """The KV geometry of a GGUF from its metadata dict (``read_gguf_metadata(...)["metadata"]``).

    Head dimensions come from ``key_length``/``value_length`` (per-layer ``head_count_kv`` arrays allowed; a layer
    with 0 KV heads, as in hybrid recurrent models, owns no cache), else ``embedding_length / head_count``.
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ValueError("GGUF metadata has no general.architecture")

    def get(key: str) -> object:
        return metadata.get(f"{arch}.{key}")

    n_layer = _int(get("block_count")) or 0
    if n_layer <= 0:
        raise ValueError(f"GGUF metadata has no {arch}.block_count")
    n_embd = _int(get("embedding_length")) or 0
    heads = _per_layer(get("attention.head_count"), n_layer, 0)
    n_head = max(heads) if heads else 0
    kv_heads = _per_layer(get("attention.head_count_kv"), n_layer, n_head)
    head_dim = n_embd // n_head if n_head else 0
    k_len = _int(get("attention.key_length")) or head_dim
    v_len = _int(get("attention.value_length")) or head_dim
    k_len_swa = _int(get("attention.key_length_swa")) or k_len
    v_len_swa = _int(get("attention.value_length_swa")) or v_len
    mla = _int(get("attention.key_length_mla")) is not None
    n_swa = _int(get("attention.sliding_window")) or 0
    swa = _swa_flags(metadata, arch, n_layer, n_swa)
    kv_layers = n_layer
    shared = _int(get("attention.shared_kv_layers"))
    if shared:
        kv_layers = n_layer - shared
    kv_layers = min(kv_layers, KV_FROM_START.get(arch, kv_layers))
    layers = []
    for il in range(kv_layers):
        if kv_heads[il] <= 0:
            continue
        k = (k_len_swa if swa[il] else k_len) * kv_heads[il]
        v = 0 if mla else (v_len_swa if swa[il] else v_len) * kv_heads[il]
        layers.append(KvLayer(k, v, swa[il]))
    ff = get("feed_forward_length")
    vocab = _int(get("vocab_size"))
    if vocab is None:
        tokens = metadata.get("tokenizer.ggml.tokens")
        vocab = len(tokens) if isinstance(tokens, list) else _int(getattr(tokens, "length", None))
    return KvShape(
        architecture=arch,
        n_layer=n_layer,
        trained_ctx=_int(get("context_length")) or DEFAULT_TRAINED_CTX,
        n_embd=n_embd,
        n_head=n_head,
        n_ff=max(_per_layer(ff, n_layer, 4 * n_embd)),
        n_vocab=vocab or 0,
        n_swa=n_swa,
        layers=tuple(layers),
    )


def effective_ctx(ctx: int, streams: int) -> int:
    """The total cells llama.cpp allocates for ``-c ctx`` over ``streams`` KV streams (``--parallel N`` without a
    unified cache: N; with ``--kv-unified``: 1)."""
    n_ctx = pad(max(ctx, 1))
    return pad(n_ctx // max(streams, 1) or 1) * max(streams, 1)


@dataclass(frozen=True, slots=True)
class KvSettings:
    """The launch settings the KV and compute estimates depend on."""

    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    swa_full: bool = False
    parallel: int = 1
    unified: bool = False
    """One KV cache shared by every slot (``--kv-unified``), each slot able to use all of it."""
    ubatch: int = N_UBATCH
    """The physical batch (``--ubatch-size``): a late-chunking engine's is ``late_chunking_max_tokens``."""

    @property
    def streams(self) -> int:
        """The KV streams llama.cpp allocates: one when unified, else one per slot."""
        return 1 if self.unified else max(self.parallel, 1)


def kv_bytes(shape: KvShape, ctx: int, s: KvSettings) -> int:
    """KV cache bytes llama.cpp allocates for ``-c ctx`` with these settings."""
    streams = s.streams
    cells = effective_ctx(ctx, streams) // streams
    swa_cells = cells if s.swa_full else pad(min(cells, shape.n_swa + s.ubatch))
    v_trans = s.flash_attn == "off"
    v_max = max((layer.v for layer in shape.layers), default=0)
    total = 0
    for layer in shape.layers:
        n = swa_cells if (layer.swa and shape.n_swa > 0) else cells
        v = v_max if (v_trans and layer.v) else layer.v
        total += n * (row_bytes(s.cache_type_k, layer.k) + (row_bytes(s.cache_type_v, v) if v else 0))
    return total * streams


def compute_bytes(shape: KvShape, ctx: int, s: KvSettings, *, on_gpu: bool) -> int:
    """An allowance for llama.cpp's compute buffer: activations for one micro-batch (plus the logits on a GPU),
    the f16 attention mask over a stream's cells, and without flash attention the f32 KQ matrix too."""
    cells = effective_ctx(ctx, s.streams) // s.streams
    per_token = 4 * (shape.n_embd + shape.n_ff) + (shape.n_vocab if on_gpu else 0)
    total = s.ubatch * 4 * per_token + s.ubatch * cells * 2
    if s.flash_attn == "off":
        total += s.ubatch * shape.n_head * cells * 4
    return total


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """What a launch needs (bytes) and what the machine offers, for one context size.

    ``placement`` is ``"cpu"`` (RAM only), ``"gpu"`` (everything in VRAM) or ``"gpu+cpu"`` (layers split);
    ``available`` is the free memory the fit used (VRAM, RAM, or both for a split) after ``headroom``.
    """

    ctx_size: int
    requested_ctx: int
    trained_ctx: int
    parallel: int
    weights: int
    kv: int
    compute: int
    mmproj: int
    placement: str
    available: int
    headroom: int
    settings: KvSettings

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.mmproj

    @property
    def ctx_per_slot(self) -> int:
        return self.ctx_size // self.settings.streams

    @property
    def reduced(self) -> bool:
        return self.ctx_size < effective_ctx(self.requested_ctx, self.settings.streams)

    def to_json(self) -> dict[str, object]:
        return {
            "ctx_size": self.ctx_size,
            "ctx_per_slot": self.ctx_per_slot,
            "requested_ctx": self.requested_ctx,
            "trained_ctx": self.trained_ctx,
            "parallel": self.parallel,
            "kv_unified": self.settings.unified,
            "weights_bytes": self.weights,
            "kv_bytes": self.kv,
            "compute_bytes": self.compute,
            "mmproj_bytes": self.mmproj,
            "total_bytes": self.total,
            "available_bytes": self.available,
            "headroom_bytes": self.headroom,
            "placement": self.placement,
            "cache_type_k": self.settings.cache_type_k,
            "cache_type_v": self.settings.cache_type_v,
            "flash_attn": self.settings.flash_attn,
            "swa_full": self.settings.swa_full,
        }


@dataclass(frozen=True, slots=True)
class FitRequest:
    """Everything ``fit`` needs about one launch besides the machine."""

    model: str
    shape: KvShape
    weights: int
    requested_ctx: int
    """Cells asked for (0 = the trained context)."""
    settings: KvSettings
    gpu_layers: int = -1
    mmproj: int = 0


def check_settings(req: FitRequest) -> None:
    """Settings llama.cpp refuses at start, refused here first with the fix."""
    s = req.settings
    if s.cache_type_v not in ("f16", "bf16", "f32") and s.flash_attn == "off":
        raise ProfileUnfit(
            f"model '{req.model}': a quantized V cache (cache_type_v = \"{s.cache_type_v}\") needs flash "
            'attention; set flash_attn = "auto" or "on", or cache_type_v = "f16"'
        )
    quantized = [t for t in (s.cache_type_k, s.cache_type_v) if GGML_TYPE_SIZE[t][0] > 1]
    odd = [layer for layer in req.shape.layers if layer.k % 32 or (layer.v and layer.v % 32)]
    if quantized and odd:
        raise ProfileUnfit(
            f"model '{req.model}': its KV rows ({odd[0].k} elements) are not a multiple of 32, so the cache "
            f'cannot be quantized ({quantized[0]}); use cache_type_k/cache_type_v = "f16"'
        )


@dataclass(frozen=True, slots=True)
class _Budget:
    placement: str
    gpu_fraction: float
    vram: int
    ram: int


def _budgets(req: FitRequest, hw: Hardware, headroom: int) -> list[_Budget]:
    """The placements to try, best first: all on GPU, then (for gpu_layers -1) a GPU/RAM split, else RAM."""
    ram = max(0, hw.ram_available - headroom)
    if not hw.gpus or req.gpu_layers == 0:
        return [_Budget("cpu", 0.0, 0, ram)]
    vram = max(0, sum(max(0, g.free_bytes - headroom) for g in hw.gpus))
    n = req.shape.n_layer
    if req.gpu_layers < 0 or req.gpu_layers >= n:
        out = [_Budget("gpu", 1.0, vram, ram)]
        if req.gpu_layers < 0:
            out.append(_Budget("gpu+cpu", -1.0, vram, ram))  # llama.cpp's --fit moves layers to RAM
        return out
    return [_Budget("gpu+cpu", req.gpu_layers / n, vram, ram)]


def _estimate(req: FitRequest, ctx: int, b: _Budget, headroom: int) -> tuple[MemoryEstimate, bool]:
    s = req.settings
    kv = kv_bytes(req.shape, ctx, s)
    on_gpu = b.placement != "cpu"
    compute = compute_bytes(req.shape, ctx, s, on_gpu=on_gpu)
    if b.placement == "cpu":
        fits = req.weights + kv + compute + req.mmproj <= b.ram
        available = b.ram
    elif b.gpu_fraction < 0:  # any split: compute and mmproj on the GPU, the rest wherever it fits
        fits = compute + req.mmproj <= b.vram and req.weights + kv + compute + req.mmproj <= b.vram + b.ram
        available = b.vram + b.ram
    else:
        f = b.gpu_fraction
        gpu_need = math.ceil(f * (req.weights + kv)) + compute + req.mmproj
        ram_need = math.ceil((1 - f) * (req.weights + kv))
        fits = gpu_need <= b.vram and ram_need <= b.ram
        available = b.vram if f == 1.0 else b.vram + b.ram
    est = MemoryEstimate(
        ctx_size=effective_ctx(ctx, s.streams),
        requested_ctx=req.requested_ctx or req.shape.trained_ctx,
        trained_ctx=req.shape.trained_ctx,
        parallel=s.parallel,
        weights=req.weights,
        kv=kv,
        compute=compute,
        mmproj=req.mmproj,
        placement=b.placement,
        available=available,
        headroom=headroom,
        settings=s,
    )
    return est, fits


@dataclass(frozen=True, slots=True)
class Fit:
    """The outcome: the estimate at the chosen context, or at the smallest one tried with ``refusal`` set."""

    estimate: MemoryEstimate
    refusal: str | None = None

    def require(self) -> MemoryEstimate:
        if self.refusal is not None:
            raise ProfileUnfit(self.refusal)
        return self.estimate


def fit(req: FitRequest, hw: Hardware, *, headroom: int) -> Fit:
    """The largest context up to the requested one (a multiple of 256 per slot) that fits the machine.

    On a GPU the context is first shrunk (not below ``FIT_MIN_CTX`` or the request) to keep every layer in VRAM;
    with ``gpu_layers = -1`` layers may then spill to RAM, as llama.cpp's own fitting does. Raises ``ProfileUnfit``
    for settings llama.cpp would refuse; returns a ``Fit`` with ``refusal`` when nothing fits.
    """
    check_settings(req)
    s = req.settings
    requested = effective_ctx(req.requested_ctx or req.shape.trained_ctx, s.streams)
    step = CTX_GRAIN * s.streams
    budgets = _budgets(req, hw, headroom)
    smallest: MemoryEstimate | None = None
    soft_floor = max(step, min(requested, effective_ctx(FIT_MIN_CTX, s.streams)))
    for i, b in enumerate(budgets):
        last = i == len(budgets) - 1
        floor = step if last else soft_floor
        top = requested
        if i > 0 and req.requested_ctx == 0:
            top = soft_floor  # spilling layers to RAM: an automatic context stays at the soft floor
        est, ok = _estimate(req, top, b, headroom)
        if ok:
            return Fit(est)
        lo, hi = floor // step, top // step - 1  # search k*step in [floor, top)
        best: MemoryEstimate | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            e, ok = _estimate(req, mid * step, b, headroom)
            if ok:
                best, lo = e, mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return Fit(best)
        if last:
            smallest = _estimate(req, floor, b, headroom)[0]
    assert smallest is not None
    return Fit(smallest, refusal(req, smallest, hw))


def refusal(req: FitRequest, est: MemoryEstimate, hw: Hardware) -> str:
    """Why ``est`` (the smallest context tried) does not fit, and the levers, in one line."""
    s = req.settings
    where = {
        "cpu": "RAM",
        "gpu": "GPU memory",
        "gpu+cpu": "GPU memory and RAM together",
    }[est.placement]
    if est.placement == "cpu" and hw.gpus:
        where = "RAM (gpu_layers = 0)"
    elif any(g.remote for g in hw.gpus):  # RPC workers lend their devices as GPUs
        where = where.replace("GPU memory", "the memory of the GPUs and RPC workers")
    parts = [
        f"weights {human_bytes(est.weights)}",
        f"KV cache {human_bytes(est.kv)} at ctx {est.ctx_size} ({s.cache_type_k}/{s.cache_type_v})",
        f"compute {human_bytes(est.compute)}",
    ]
    if est.mmproj:
        parts.append(f"mmproj {human_bytes(est.mmproj)}")
    weights_alone = est.weights + est.mmproj > est.available
    levers = (
        "a smaller quantization of the model, gpu_layers to split it between GPU and RAM, or rpc_workers to lend"
        " it other hosts' memory (`blazar worker` on each)"
        if weights_alone
        else 'a smaller ctx_size, a quantized KV cache (cache_type_k/cache_type_v = "q8_0" or "q4_0"), '
        + ("" if s.unified else f"fewer parallel slots (now {s.parallel}), ")
        + "or gpu_layers to split layers between GPU and RAM"
    )
    return (
        f"model '{req.model}' does not fit in memory: {' + '.join(parts)} = {human_bytes(est.total)}, but "
        f"{human_bytes(est.available)} of {where} is free after {human_bytes(est.headroom)} headroom "
        f'(memory_headroom_mib); levers: {levers}; set them under [models."{req.model}"] in config.toml'
    )
