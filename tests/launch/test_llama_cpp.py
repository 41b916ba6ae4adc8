"""The launch-profile compiler: the argv from config, overrides and GGUF metadata; ``prepare``; and the real
llama-server starting with a compiled argv that turns on every optional flag."""

from __future__ import annotations

import contextlib
import socket
import stat
import struct
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from blazar.catalog.models import ModelRow
from blazar.config import Config, load_config_text
from blazar.engines import argv as lane_argv
from blazar.engines.registry import EngineRow
from blazar.errors import LaneError
from blazar.launch.compilers import compile_profile
from blazar.launch.fit import ProfileUnfit
from blazar.launch.hardware import Gpu, Hardware
from blazar.launch.settings import embed_slots, find_mmproj, shard_paths
from blazar.launch.spec import LLAMA_SERVER, LaunchSpec, prepare, render_command, socket_in_use
from tests.conftest import Assets, free_port

GIB = 1 << 30
ROOMY = Hardware((), None, "test", "test CPU", 2, 2, 16 * GIB, 16 * GIB)


def write_gguf(path: Path, kv: dict[str, str | int]) -> Path:
    """A minimal GGUF v3 file with string/uint32 metadata and no tensors."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)))
    for key, value in kv.items():
        k = key.encode()
        out += struct.pack("<Q", len(k)) + k
        if isinstance(value, str):
            v = value.encode()
            out += struct.pack("<IQ", 8, len(v)) + v
        else:
            out += struct.pack("<II", 4, value)
    path.write_bytes(bytes(out))
    return path


def cfg_from(tmp_path: Path, text: str = "") -> Config:
    return load_config_text(
        f'data_dir = "{tmp_path / "data"}"\n' + text, tmp_path / "config.toml", env={"HOME": str(tmp_path)}
    )


def row(path: Path, name: str = "smollm2:latest") -> ModelRow:
    return ModelRow(name, path, "gguf", path.stat().st_size, "llama", 0, 8192, "Q4_1", True, "")


ENGINE = EngineRow("llama-cpp", "local", None, Path("engines/llama-server"), "local", "cpu", None, True)


def flag(argv: tuple[str, ...] | list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize(
    ("version", "build"),
    [
        ("version: 0.6.0-dev (build 11434, commit unknown)", 11434),  # llama-server --version, sdist build
        ("version: 4990 (a1b2c3d)", 4990),  # llama-server --version, git build
        ("11434", 11434),  # blazar engine build's own record
        ("b11434", 11434),  # a release tag
        ("version: 0.0.1", None),
        ("mistralrs 0.8.5", None),
        (None, None),
    ],
)
def test_build_number(version: str | None, build: int | None) -> None:
    assert lane_argv.build_number(version) == build


def test_a_llama_server_that_can_listens_on_a_unix_socket_in_the_data_directory(
    tmp_path: Path, model_file: Path
) -> None:
    cfg = cfg_from(tmp_path)
    new = replace(ENGINE, version="version: 0.6.0-dev (build 11434, commit unknown)")
    spec = compile_profile(cfg, row(model_file), new, hardware=ROOMY)
    sock = tmp_path / "data" / "run" / "smollm2--latest.sock"
    assert spec.socket_path == sock
    assert flag(spec.argv_template, "--host") == str(sock) and "--port" not in spec.argv_template
    embed = compile_profile(cfg, row(model_file), new, hardware=ROOMY, embeddings=True)
    assert embed.socket_path == tmp_path / "data" / "run" / "smollm2--latest--embed.sock"
    late = compile_profile(cfg, row(model_file), new, hardware=ROOMY, embeddings=True, tokens=True)
    assert late.socket_path == tmp_path / "data" / "run" / "smollm2--latest--tokens.sock"
    # Too old, unknown, or a socket path too long for sun_path: a TCP port on 127.0.0.1.
    deep = cfg_from(tmp_path / ("d" * 90))
    for engine, c in ((replace(ENGINE, version="b4800"), cfg), (ENGINE, cfg), (new, deep)):
        tcp = compile_profile(c, row(model_file), engine, hardware=ROOMY)
        assert tcp.socket_path is None
        assert (flag(tcp.argv_template, "--host"), flag(tcp.argv_template, "--port")) == (
            "127.0.0.1",
            "{port}",
        )


def test_defaults(tmp_path: Path, model_file: Path) -> None:
    spec = compile_profile(cfg_from(tmp_path), row(model_file), ENGINE, hardware=ROOMY)
    a = spec.argv_template
    assert a[0] == "engines/llama-server"
    assert flag(a, "--model") == str(model_file) and flag(a, "--alias") == "smollm2:latest"
    assert (flag(a, "--port"), flag(a, "--api-key-file")) == ("{port}", "{api_key_file}")
    # parallel = "auto": llama-server's own automatic slots, 4 over one unified KV cache
    assert (flag(a, "--ctx-size"), flag(a, "--parallel")) == ("4096", "4") and "--kv-unified" in a
    assert (flag(a, "--cache-type-k"), flag(a, "--cache-type-v"), flag(a, "--flash-attn")) == (
        "f16",
        "f16",
        "auto",
    )
    assert {"--jinja", "--no-webui", "--metrics"} <= set(a)
    assert flag(a, "--fit") == "off"  # RAM only: llama.cpp's own device fitting has nothing to do
    assert flag(a, "--slot-save-path") == str(tmp_path / "data" / "sessions" / "smollm2--latest")
    for absent in (
        "--threads",
        "--n-gpu-layers",
        "--swa-full",
        "--mmproj",
        "--lookup-cache-dynamic",
        "--embeddings",
    ):
        assert absent not in a
    assert (spec.ctx_size, spec.parallel, spec.ctx_per_slot, spec.kv_unified) == (4096, 4, 4096, True)
    assert spec.can == LLAMA_SERVER  # the gateway asks this, never the lane's name
    assert spec.estimate is not None and spec.estimate.kv == 90 << 20  # one stream of 4096 cells, as one slot
    assert (
        spec.lookup_cache is None and spec.slot_save_dir == tmp_path / "data" / "sessions" / "smollm2--latest"
    )
    argv = spec.argv(port=1234, api_key_file=tmp_path / "k")
    assert flag(argv, "--port") == "1234" and flag(argv, "--api-key-file") == str(tmp_path / "k")
    line = render_command(spec)
    assert "--port {port} --api-key-file {api_key_file}" in line and line.startswith(
        "engines/llama-server --model "
    )


def test_parallel_auto_shares_the_context_and_a_number_splits_it(tmp_path: Path, model_file: Path) -> None:
    """``parallel = "auto"`` (the default) is llama-server's own ``--parallel -1``: 4 slots over one unified KV
    cache, each able to use the whole context, costing the KV memory of one; a number N gives N slots of
    ``ctx_size / N`` each, and N times the streams."""
    cfg = cfg_from(tmp_path, 'parallel = 4\n[models.smollm2]\nparallel = "auto"\n')
    auto = compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY)
    four = compile_profile(cfg, row(model_file, "other:latest"), ENGINE, hardware=ROOMY)
    assert (flag(auto.argv_template, "--parallel"), "--kv-unified" in auto.argv_template) == ("4", True)
    assert (flag(four.argv_template, "--parallel"), "--kv-unified" in four.argv_template) == ("4", False)
    assert (auto.ctx_size, auto.ctx_per_slot, four.ctx_size, four.ctx_per_slot) == (4096, 4096, 4096, 1024)
    assert auto.estimate is not None and four.estimate is not None
    assert auto.estimate.kv == four.estimate.kv  # the same 4096 cells, shared or split
    assert auto.estimate.to_json()["kv_unified"] is True and four.estimate.to_json()["kv_unified"] is False
    # Ollama's num_ctx asks for one request's context: with shared slots that is the whole cache
    assert compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY, ctx_size=2048).ctx_per_slot == 2048


def test_overrides_win_over_defaults(tmp_path: Path, model_file: Path) -> None:
    cfg = cfg_from(
        tmp_path,
        'ctx_size = 2048\nthreads = 4\ncache_type_k = "q8_0"\nlookup_cache = true\n'
        '[models.smollm2]\nctx_size = 0\nparallel = 2\ngpu_layers = 0\ncache_type_v = "q4_0"\nflash_attn = "on"\n'
        'swa_full = true\nchat_template = "chatml"\nchat_template_file = "t.jinja"\nextra_args = ["--top-k", "5"]\n',
    )
    spec = compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY)
    a = spec.argv_template
    assert (flag(a, "--ctx-size"), flag(a, "--parallel"), spec.ctx_per_slot) == ("8192", "2", 4096)
    assert (flag(a, "--threads"), flag(a, "--n-gpu-layers")) == ("4", "0")
    assert (flag(a, "--cache-type-k"), flag(a, "--cache-type-v"), flag(a, "--flash-attn")) == (
        "q8_0",
        "q4_0",
        "on",
    )
    assert "--swa-full" in a
    assert (flag(a, "--chat-template"), flag(a, "--chat-template-file")) == (
        "chatml",
        str(tmp_path / "t.jinja"),
    )
    lookup = tmp_path / "data" / "speccache" / "smollm2--latest.bin"
    assert flag(a, "--spec-type") == "ngram-cache" and flag(a, "--lookup-cache-dynamic") == str(lookup)
    assert spec.lookup_cache == lookup
    assert a[-2:] == ("--top-k", "5")
    # other models keep the top-level values
    other = compile_profile(cfg, row(model_file, "other:latest"), ENGINE, hardware=ROOMY).argv_template
    assert (flag(other, "--ctx-size"), flag(other, "--parallel"), flag(other, "--cache-type-v")) == (
        "2048",
        "4",
        "f16",
    )
    assert "--kv-unified" in other and "--kv-unified" not in a  # a number of slots splits the context
    # an explicit ctx (Ollama's num_ctx) replaces the configured one
    assert compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY, ctx_size=1024).ctx_size == 1024


def test_a_requested_context_is_capped_at_the_trained_one(tmp_path: Path, model_file: Path) -> None:
    cfg = cfg_from(tmp_path, "parallel = 2\n")
    spec = compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY, ctx_size=1 << 40)
    assert spec.ctx_size == 2 * 8192  # SmolLM2 was trained on 8192 per sequence; each of 2 slots gets that
    assert compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY, ctx_size=4096).ctx_size == 4096


def test_a_spec_reads_images_only_with_a_vision_projector(tmp_path: Path, model_file: Path) -> None:
    assert not compile_profile(cfg_from(tmp_path), row(model_file), ENGINE, hardware=ROOMY).reads_images
    given = cfg_from(tmp_path, '[models."smollm2:latest"]\nextra_args = ["--mmproj", "/models/proj.gguf"]\n')
    assert compile_profile(given, row(model_file), ENGINE, hardware=ROOMY).reads_images


def test_on_a_gpu_llama_cpp_places_the_layers(tmp_path: Path, model_file: Path) -> None:
    gpu = Hardware((Gpu(0, "Test GPU", 8 * GIB, 8 * GIB),), "1.0", "", "test CPU", 2, 2, 16 * GIB, 16 * GIB)
    spec = compile_profile(cfg_from(tmp_path), row(model_file), ENGINE, hardware=gpu)
    assert "--fit" not in spec.argv_template and "--n-gpu-layers" not in spec.argv_template
    assert spec.estimate is not None and spec.estimate.placement == "gpu"


def test_embeddings_profile(tmp_path: Path, model_file: Path) -> None:
    cfg = cfg_from(tmp_path, "lookup_cache = true\n")
    a = compile_profile(cfg, row(model_file), ENGINE, embeddings=True, hardware=ROOMY).argv_template
    # an input embeds in one batch: late_chunking_max_tokens (2048) within a slot, not llama-server's 512
    assert a[-7:] == ("--embeddings", "--pooling", "mean", "--batch-size", "2048", "--ubatch-size", "2048")
    assert "--lookup-cache-dynamic" not in a


def test_an_embedding_engine_takes_a_power_of_two_of_slots(tmp_path: Path, model_file: Path) -> None:
    # llama-server aborts at start with 3 embedding slots (checked against the real engine in e2e); chat keeps 3
    cfg = cfg_from(tmp_path, "ctx_size = 1536\nparallel = 3\n")
    emb = compile_profile(cfg, row(model_file), ENGINE, embeddings=True, hardware=ROOMY)
    a = emb.argv_template
    assert a[a.index("--parallel") + 1] == "2" and emb.parallel == 2
    assert a[-2:] == ("--ubatch-size", str(min(2048, emb.ctx_size // 2)))  # a slot is ctx / 2
    chat = compile_profile(cfg, row(model_file), ENGINE, hardware=ROOMY)
    assert chat.argv_template[chat.argv_template.index("--parallel") + 1] == "3"
    assert [embed_slots(n) for n in (1, 2, 3, 4, 5, 7, 8, 9, 64)] == [1, 2, 2, 4, 4, 4, 8, 8, 64]


def test_late_chunking_profile(tmp_path: Path, model_file: Path) -> None:
    """The late-chunking engine gives one vector per token, and embeds a request's tokens in one batch: of
    late_chunking_max_tokens, within one slot's context. It has its own socket; other lanes refuse it."""
    cfg = cfg_from(tmp_path, "late_chunking_max_tokens = 300\nctx_size = 2048\nparallel = 2\n")
    spec = compile_profile(cfg, row(model_file), ENGINE, embeddings=True, tokens=True, hardware=ROOMY)
    a = spec.argv_template
    assert a[-7:] == ("--embeddings", "--pooling", "none", "--batch-size", "300", "--ubatch-size", "300")
    own = cfg_from(
        tmp_path,
        'late_chunking_max_tokens = 300\n[models."smollm2:latest"]\nextra_args = ["-ub", "64", "--pooling", "cls"]\n',
    )
    mine = compile_profile(
        own, row(model_file), ENGINE, embeddings=True, tokens=True, hardware=ROOMY
    ).argv_template
    assert mine[-9:] == (
        "--pooling",
        "cls",
        "--embeddings",
        "--pooling",
        "none",
        "--batch-size",
        "300",
        "--ubatch-size",
        "300",
    )
    pooled = compile_profile(own, row(model_file), ENGINE, embeddings=True, hardware=ROOMY).argv_template
    assert pooled[-2:] == ("--pooling", "cls")  # a model's own pooling is for its pooled embeddings
    small_slot = cfg_from(tmp_path, "late_chunking_max_tokens = 8192\nctx_size = 2048\nparallel = 2\n")
    b = compile_profile(small_slot, row(model_file), ENGINE, embeddings=True, tokens=True, hardware=ROOMY)
    assert flag(b.argv_template, "--ubatch-size") == flag(b.argv_template, "--batch-size") == "1024"
    big = cfg_from(tmp_path, "late_chunking_max_tokens = 2048\nctx_size = 4096\n")
    late = compile_profile(
        big, row(model_file), ENGINE, embeddings=True, tokens=True, hardware=ROOMY
    ).estimate
    pooled = compile_profile(big, row(model_file), ENGINE, embeddings=True, hardware=ROOMY).estimate
    small = cfg_from(tmp_path, "late_chunking_max_tokens = 512\nctx_size = 4096\n")
    at_512 = compile_profile(small, row(model_file), ENGINE, embeddings=True, hardware=ROOMY).estimate
    assert late is not None and pooled is not None and at_512 is not None
    # a 2048-token batch is sized in the memory fit, not 512, for late chunking and pooled embeddings alike
    assert late.compute == pooled.compute > 3 * at_512.compute
    sglang = EngineRow("sglang", "v0.5", None, Path("/x/sglang"), "venv", "cuda", None, True)
    with pytest.raises(
        LaneError, match="late_chunking needs per-token embeddings, which only the llama-cpp lane"
    ):
        compile_profile(cfg, row(model_file), sglang, embeddings=True, tokens=True, hardware=ROOMY)


def test_the_context_is_fitted_or_refused(tmp_path: Path, model_file: Path) -> None:
    small = Hardware((), None, "test", "test CPU", 2, 2, 200 << 20, 160 << 20)
    cfg = cfg_from(tmp_path, "ctx_size = 8192\nmemory_headroom_mib = 0\n")
    spec = compile_profile(cfg, row(model_file), ENGINE, hardware=small)
    assert spec.estimate is not None and spec.estimate.reduced
    assert 256 <= spec.ctx_size < 8192 and spec.ctx_size % 256 == 0
    assert flag(spec.argv_template, "--ctx-size") == str(spec.ctx_size)
    tiny = Hardware((), None, "test", "test CPU", 2, 2, 100 << 20, 100 << 20)
    with pytest.raises(ProfileUnfit) as exc:
        compile_profile(cfg, row(model_file), ENGINE, hardware=tiny)
    assert isinstance(exc.value, LaneError) and exc.value.status == 503
    assert "does not fit in memory" in str(exc.value) and "cache_type_k" in str(exc.value)


def test_mmproj_sibling_and_override(tmp_path: Path, model_file: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    model = d / "vision.gguf"
    model.symlink_to(model_file)
    assert find_mmproj(model) is None
    write_gguf(d / "mmproj-other.gguf", {"general.architecture": "llama"})  # not a projector
    (d / "mmproj-junk.gguf").write_bytes(b"not a gguf")
    assert find_mmproj(model) is None
    a = write_gguf(d / "mmproj-a.gguf", {"general.architecture": "clip"})
    b = write_gguf(d / "mmproj-vision-f16.gguf", {"general.architecture": "clip"})
    assert find_mmproj(model) == b  # the one named after the model wins
    b.unlink()
    assert find_mmproj(model) == a
    spec = compile_profile(cfg_from(tmp_path), row(model), ENGINE, hardware=ROOMY)
    assert flag(spec.argv_template, "--mmproj") == str(a) and spec.mmproj == a
    assert spec.estimate is not None and spec.estimate.mmproj == a.stat().st_size
    # embeddings never load the projector
    assert (
        "--mmproj"
        not in compile_profile(cfg_from(tmp_path), row(model), ENGINE, embeddings=True).argv_template
    )
    cfg = cfg_from(tmp_path, '[models.smollm2]\nmmproj = "elsewhere.gguf"\n')
    with pytest.raises(LaneError, match=r"mmproj .*elsewhere\.gguf does not exist"):
        compile_profile(cfg, row(model), ENGINE, hardware=ROOMY)
    write_gguf(tmp_path / "elsewhere.gguf", {"general.architecture": "clip"})
    spec = compile_profile(cfg, row(model), ENGINE, hardware=ROOMY)
    assert flag(spec.argv_template, "--mmproj") == str(tmp_path / "elsewhere.gguf")


def test_shards(tmp_path: Path) -> None:
    one = tmp_path / "big-00001-of-00003.gguf"
    for i in (1, 2, 3):
        (tmp_path / f"big-0000{i}-of-00003.gguf").write_bytes(b"x")
    assert shard_paths(one) == [tmp_path / f"big-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert shard_paths(tmp_path / "plain.gguf") == [tmp_path / "plain.gguf"]


def test_prepare(tmp_path: Path) -> None:
    lookup = tmp_path / "speccache" / "m.bin"
    sock_path = tmp_path / "run" / "m.sock"
    sock_path.parent.mkdir()
    spec = LaunchSpec(
        ("x",), slot_save_dir=tmp_path / "sessions" / "m", lookup_cache=lookup, socket_path=sock_path
    )
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))  # a socket left behind by a dead child
    prepare(spec)
    assert spec.slot_save_dir is not None and spec.slot_save_dir.is_dir()
    assert lookup.is_file() and lookup.stat().st_size == 0
    assert not sock_path.exists()
    lookup.write_bytes(b"learned")
    sock_path.write_text("not a socket")
    prepare(spec)  # idempotent: keeps what the cache learned, never removes a file that is not a socket
    assert lookup.read_bytes() == b"learned" and sock_path.read_text() == "not a socket"
    prepare(LaunchSpec(("x",)))


def test_a_socket_someone_listens_on_is_kept_and_the_launch_moves_to_tcp(tmp_path: Path) -> None:
    """Another blazar on the same data directory runs this model: its engine's socket is live, so it is neither
    removed nor reused; this launch takes a 127.0.0.1 port instead."""
    sock_path = tmp_path / "m.sock"
    spec = LaunchSpec(
        ("srv", "--host", str(sock_path), "--api-key-file", "{api_key_file}"), socket_path=sock_path
    )
    assert not socket_in_use(sock_path)  # no file at all
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(sock_path))
        assert not socket_in_use(sock_path)  # bound, not listening: what a dead engine leaves
        live.listen(0)
        assert socket_in_use(sock_path)
        prepare(spec)
        assert stat.S_ISSOCK(sock_path.lstat().st_mode)  # kept
    tcp = spec.on_tcp()
    assert tcp.socket_path is None and tcp.argv_template == (
        "srv", "--host", "127.0.0.1", "--port", "{port}", "--api-key-file", "{api_key_file}",
    )  # fmt: skip
    assert tcp.on_tcp() == tcp
    prepare(spec)  # nobody listens now: removed
    assert not sock_path.exists()


def test_real_engine_accepts_a_full_profile(tmp_path: Path, assets: Assets) -> None:
    """Every optional flag on: the real llama-server starts, which also shows ``prepare`` made the lookup cache
    file (llama-server aborts without it) and the slot save directory (it refuses a missing one)."""
    cfg = cfg_from(
        tmp_path,
        'ctx_size = 1024\nparallel = 2\nthreads = 1\ngpu_layers = 0\ncache_type_k = "q8_0"\ncache_type_v = "q8_0"\n'
        'flash_attn = "on"\nswa_full = true\nlookup_cache = true\n[models.smollm2]\nchat_template = "chatml"\n',
    )
    engine = EngineRow("llama-cpp", "local", None, assets.llama_server, "local", "cpu", None, True)
    spec = compile_profile(cfg, row(assets.model), engine)
    assert spec.lookup_cache is not None and not spec.lookup_cache.exists()
    key = tmp_path / "key"
    key.write_text("secret-key-for-the-test")
    port = free_port()
    argv = spec.argv(port=port, api_key_file=key)
    assert spec.lookup_cache.is_file()
    log = tmp_path / "engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        status = 0
        while time.monotonic() < deadline and status != 200:
            assert proc.poll() is None, log.read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                status = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code
            if status != 200:  # still loading (503) or not listening yet: look again, without hammering it
                time.sleep(0.1)
        assert status == 200, log.read_text()[-3000:]
        props = httpx.get(
            f"http://127.0.0.1:{port}/props", headers={"Authorization": "Bearer secret-key-for-the-test"}
        ).json()
        assert props["total_slots"] == 2
    finally:
        proc.kill()
        proc.wait()


def test_a_llama_server_that_can_sleeps_after_idle_sleep_secs(tmp_path: Path, model_file: Path) -> None:
    new = replace(ENGINE, version="version: 0.6.0-dev (build 11434, commit unknown)")
    spec = compile_profile(cfg_from(tmp_path), row(model_file), new, hardware=ROOMY)
    assert flag(spec.argv_template, "--sleep-idle-seconds") == "300" and spec.sleep_secs == 300
    per_model = cfg_from(tmp_path, "idle_sleep_secs = 60\n[models.smollm2]\nidle_sleep_secs = 7\n")
    spec = compile_profile(per_model, row(model_file), new, hardware=ROOMY)
    assert flag(spec.argv_template, "--sleep-idle-seconds") == "7" and spec.sleep_secs == 7
    # off, a build from before the flag, an unknown build: no flag, and the supervisor expects no sleep
    for c, engine in ((cfg_from(tmp_path, "idle_sleep_secs = 0\n"), new), (cfg_from(tmp_path), ENGINE),
                      (cfg_from(tmp_path), replace(ENGINE, version="b7000"))):  # fmt: skip
        spec = compile_profile(c, row(model_file), engine, hardware=ROOMY)
        assert "--sleep-idle-seconds" not in spec.argv_template and spec.sleep_secs == 0
    # the user's own flag wins, once, and the supervisor knows it
    for extra, secs in (('"--sleep-idle-seconds", "9"', 9), ('"--sleep-idle-seconds=11"', 11),
                        ('"--sleep-idle-seconds", "-1"', 0)):  # fmt: skip
        c = cfg_from(tmp_path, f"[models.smollm2]\nextra_args = [{extra}]\n")
        spec = compile_profile(c, row(model_file), new, hardware=ROOMY)
        assert sum(a.startswith("--sleep-idle-seconds") for a in spec.argv_template) == 1
        assert spec.sleep_secs == secs
