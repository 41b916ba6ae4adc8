"""The engines' command lines (one builder per lane, the one place that knows which flag carries what) and the
environment they start with (``engine_environment``).

The launch-profile compilers (``launch/llama_cpp.py`` and one module per other lane) build their argv
here with every setting; the install gate (``gate.py``) builds its own here with the least that starts a server.
Pure: nothing is read from disk. ``port`` and ``api_key_file`` may be the supervisor's ``{port}`` and
``{api_key_file}`` placeholders. Every server binds 127.0.0.1 only, or a unix socket in the data directory:
``llama-server`` builds that can (``serves_unix_socket``) listen on ``run/<key>.sock``, so the engine has no TCP
port at all and each of its reads and writes skips the loopback TCP stack.

Where the flags were read (each engine's own argument definitions):

- llama-cpp: ``llama-server --help`` of the build the tests run.
- sglang: sglang ``python/sglang/srt/server_args.py`` (``--model-path``, ``--host``, ``--port``,
  ``--context-length`` (per request), ``--max-running-requests``, ``--served-model-name``, ``--chat-template``
  (a built-in name or a template file), ``--is-embedding``, ``--api-key`` (a value, no file form)); sglang
  ``python/sglang/srt/utils/auth.py`` exempts ``/health`` and ``/metrics`` from the key. A request's ``model``
  of the form ``base:adapter`` asks for a LoRA adapter, so the model is served under a name without a colon.
- mlx-lm: ``mlx_lm/server.py`` (``--model``, ``--host``, ``--port``, ``--chat-template`` (the template text),
  ``--decode-concurrency``, ``--prompt-concurrency``; ``GET /health``). No API key and no context flag. A
  request's ``model`` names what to load; ``default_model`` is the ``--model`` one.
- mistral.rs: ``mistralrs-cli/src/args/`` (the ``mistralrs serve`` CLI, which replaced ``mistralrs-server`` in
  0.8.5: ``-m/--model-id``, ``--format gguf``, ``-f/--quantized-file`` with ``;`` between shards, ``--host``,
  ``--port``, ``--max-seqs``, ``--max-seq-len`` and ``--max-batch-size`` (device mapping), ``--pa-context-len``
  (the paged KV cache, else 90% of VRAM on CUDA), ``--cpu``, ``--chat-template FILE``, ``--no-ui``;
  ``GET /health``). No API key. A request's ``model`` must be ``default`` or the loaded model's id
  (``mistralrs-server-core/src/chat_completion.rs``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from blazar.engines.venv import KEY_FILE_FLAG

HOST = "127.0.0.1"

UNIX_SOCKET_BUILD = 5000
"""The first llama.cpp build number (rounded up) whose ``llama-server`` listens on a unix socket when ``--host``
ends in ``.sock`` (llama.cpp pull request 12613, merged March 2025)."""

SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103
"""The longest socket path, in bytes: ``sun_path`` holds 108 on Linux and 104 on macOS and the BSDs, its NUL
included. A longer one (a deep data directory) means the child listens on TCP."""

_BUILD = (
    re.compile(r"\(build (\d+)\b"),  # version: 0.6.0-dev (build 11434, commit ...)
    re.compile(r"^version: (\d+) \("),  # version: 11434 (abc1234)
    re.compile(r"^b?(\d+)$"),  # a build's own tag: 11434, b11434
)


def build_number(version: str | None) -> int | None:
    """llama.cpp's build number in a recorded engine version: ``11434``, ``b11434``, ``version: 11434 (abc)``
    or ``version: 0.6.0-dev (build 11434, ...)``; None when it names none."""
    text = (version or "").strip()
    for pattern in _BUILD:
        m = pattern.search(text)
        if m is not None:
            return int(m.group(1))
    return None


def serves_unix_socket(kind: str, version: str | None, lane_class: str = "mainstream") -> bool:
    """Whether an engine of ``kind`` at ``version`` can listen on a unix socket: mainstream ``llama-server`` from
    ``UNIX_SOCKET_BUILD`` (a fork numbers its builds its own way; an unknown version is taken as unable)."""
    build = build_number(version) if kind == "llama-cpp" and lane_class == "mainstream" else None
    return os.name == "posix" and build is not None and build >= UNIX_SOCKET_BUILD


SLEEP_IDLE_BUILD = 8000
"""The first llama.cpp build number (rounded up) whose ``llama-server`` takes ``--sleep-idle-seconds`` (llama.cpp
pull request 18228, merged December 2025): idle, it frees its weights and KV cache and keeps serving ``/health``;
the next request reloads them."""


def sleeps_when_idle(kind: str, version: str | None, lane_class: str = "mainstream") -> bool:
    """Whether an engine of ``kind`` at ``version`` can free its model while idle (``--sleep-idle-seconds``)."""
    build = build_number(version) if kind == "llama-cpp" and lane_class == "mainstream" else None
    return build is not None and build >= SLEEP_IDLE_BUILD


def socket_fits(path: Path) -> bool:
    return len(os.fsencode(path)) <= SOCKET_PATH_MAX


ENGINE_MODEL: dict[str, str] = {"mlx": "default_model", "mistralrs": "default"}
"""The ``model`` a request to a child of these lanes must carry to reach the model it was started with."""


def llama_cpp(
    binary: Path,
    model: Path,
    *,
    port: int | str,
    ctx_size: int,
    alias: str | None = None,
    api_key_file: str | None = None,
    socket: Path | None = None,
) -> list[str]:
    """``llama-server``: the model, where it listens (``socket``, a path ending in ``.sock``, instead of a TCP
    port), its key file and context (the compiler adds the rest)."""
    argv = [str(binary), "--model", str(model)]
    if alias is not None:
        argv += ["--alias", alias]
    argv += ["--host", str(socket)] if socket is not None else ["--host", HOST, "--port", str(port)]
    if api_key_file is not None:
        argv += ["--api-key-file", api_key_file]
    return [*argv, "--ctx-size", str(ctx_size)]


def sglang(
    binary: Path,
    model_dir: Path,
    *,
    port: int | str,
    api_key_file: str | None = None,
    served_name: str | None = None,
    context_length: int = 0,
    max_running_requests: int = 0,
    chat_template: str | None = None,
    embeddings: bool = False,
) -> list[str]:
    """SGLang through its venv launcher; with ``api_key_file`` the launcher reads the key and hands it to
    ``--api-key`` inside Python (``KEY_FILE_FLAG``). ``0`` leaves a number to SGLang."""
    argv = [str(binary)]
    if api_key_file is not None:
        argv += [KEY_FILE_FLAG, api_key_file, "--api-key"]
    argv += ["--model-path", str(model_dir), "--host", HOST, "--port", str(port)]
    if served_name is not None:
        argv += ["--served-model-name", served_name]
    if context_length > 0:
        argv += ["--context-length", str(context_length)]
    if max_running_requests > 0:
        argv += ["--max-running-requests", str(max_running_requests)]
    if chat_template is not None:
        argv += ["--chat-template", chat_template]
    if embeddings:
        argv.append("--is-embedding")
    return argv


def mlx(
    binary: Path,
    model_dir: Path,
    *,
    port: int | str,
    concurrency: int = 0,
    chat_template: str | None = None,
) -> list[str]:
    """mlx-lm's server through its venv launcher; ``concurrency`` caps both its decode and prompt batches."""
    argv = [str(binary), "--model", str(model_dir), "--host", HOST, "--port", str(port)]
    if concurrency > 0:
        argv += ["--decode-concurrency", str(concurrency), "--prompt-concurrency", str(concurrency)]
    if chat_template is not None:
        argv += ["--chat-template", chat_template]
    return argv


def mistralrs(
    binary: Path,
    model: Path,
    *,
    port: int | str,
    gguf_files: Sequence[Path] = (),
    max_seqs: int = 0,
    max_seq_len: int = 0,
    kv_tokens: int = 0,
    cpu: bool = False,
    chat_template_file: Path | None = None,
) -> list[str]:
    """``mistralrs serve``: a GGUF (``gguf_files`` all its shards, in ``model``'s directory) or, without them, the
    safetensors directory ``model``. ``max_seq_len`` is one request's context, ``kv_tokens`` the whole KV cache."""
    argv = [str(binary), "serve"]
    if gguf_files:
        names = ";".join(p.name for p in gguf_files)
        argv += ["-m", str(model.parent), "--format", "gguf", "-f", names]
    else:
        argv += ["-m", str(model)]
    argv += ["--host", HOST, "--port", str(port), "--no-ui"]
    if max_seqs > 0:
        argv += ["--max-seqs", str(max_seqs), "--max-batch-size", str(max_seqs)]
    if max_seq_len > 0:
        argv += ["--max-seq-len", str(max_seq_len)]
    if kv_tokens > 0:
        argv += ["--pa-context-len", str(kv_tokens)]
    if cpu:
        argv.append("--cpu")
    if chat_template_file is not None:
        argv += ["--chat-template", str(chat_template_file)]
    return argv


WHISPER_PATH = "/inference"
"""Where whisper-server answers a transcription (its ``--inference-path`` default, kept)."""


def whisper(binary: Path, model: Path, *, port: int | str, threads: int = 0) -> list[str]:
    """whisper.cpp's ``whisper-server`` (examples/server: ``-m``, ``--host``, ``--port``, ``-t``, ``-l``); it checks
    no API key and answers one transcription at a time. The language is detected unless a request names one, as
    OpenAI's transcriptions do (the server's default is English; an English-only model stays English)."""
    argv = [str(binary), "-m", str(model), "--host", HOST, "--port", str(port), "-l", "auto"]
    if threads > 0:
        argv += ["-t", str(threads)]
    return argv


def engine_environment(secrets_: Iterable[str]) -> dict[str, str]:
    """The environment an engine starts with: the daemon's, less what is Blazar's own (``BLAZAR_*``: its keys,
    its API key) and any variable holding one of ``secrets_`` (the configured keys' and remotes' secrets, which
    ``api_key_env`` may name). An engine is a third-party binary; it gets its own key in a file."""
    hidden = [s for s in secrets_ if s]
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("BLAZAR_") and not any(secret in value for secret in hidden)
    }
