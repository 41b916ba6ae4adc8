"""What a compiled launch is: ``LaunchSpec`` (the argv template with ``{port}`` and ``{api_key_file}``, the
context, the slots, the memory estimate) and ``Capabilities`` (what its engine does beyond OpenAI's endpoints,
which the gateway and supervisor ask instead of a lane's name); ``prepare`` and the socket checks a spawn needs.
No compiler lives here: each lane's is a module of its own (``launch.compilers``).
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import socket
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from blazar.engines.argv import HOST
from blazar.launch.fit import MemoryEstimate

log = logging.getLogger("blazar.profile")

PLACEHOLDERS = ("{port}", "{api_key_file}")


DEFAULT_UBATCH = 512
"""llama-server's physical batch when its argv sets none."""
_VISION_FLAGS = frozenset({"--mmproj", "-mm", "--mmproj-url", "-mmu", "-hf", "-hfr", "--hf-repo"})


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What an engine does beyond an OpenAI-compatible ``/v1/chat/completions`` and ``/v1/embeddings``. Each
    lane's compiler says what its engine has; the gateway and the supervisor ask these, never a lane's name."""

    token_counting: bool = False
    """``/tokenize``, ``/detokenize`` and ``/apply-template``: counting a prompt, cutting an input to fit."""
    infill: bool = False
    """``/infill``: fill-in-the-middle with a suffix."""
    slot_pinning: bool = False
    """``id_slot`` pins a conversation to a slot, and slots can be saved and restored (``--slot-save-path``)."""
    choices_in_slots: bool = False
    """Each of ``n`` choices (and each prompt of a list) is generated in a slot of its own, as its own task."""
    progress_reports: bool = False
    """``return_progress``: a stream reports the prompt's size before its first token."""
    prefill_echo: bool = False
    """A trailing assistant message is continued, and the answer starts with what that message held."""
    lora_per_request: bool = False
    """Adapters loaded unapplied (``--lora-init-without-apply``) and chosen by a request's ``lora`` field."""
    raw_vectors: bool = False
    """``embd_normalize: -1``: a pooled embedding as the model made it, not L2-normalised."""
    template_props: bool = False
    """``/props`` says whether the chat template emits tool calls and has a thinking section."""
    transcription: bool = False
    """Speech to text (whisper.cpp's ``/inference``), and nothing else."""
    prompt_scoring: bool = False
    """``/completion`` with ``n_probs`` reports the unbiased logprob of a token ``logit_bias`` forces: a prompt's
    tokens scored one by one (a completion's ``echo`` with ``logprobs``)."""
    reranking: bool = False
    """``/v1/rerank``: an embedding engine started with rank pooling (a reranking model's), whose pooled output
    is a score, not a vector."""


LLAMA_SERVER = Capabilities(
    token_counting=True,
    infill=True,
    slot_pinning=True,
    choices_in_slots=True,
    progress_reports=True,
    prefill_echo=True,
    lora_per_request=True,
    raw_vectors=True,
    template_props=True,
    prompt_scoring=True,
)


OPENAI_COMPATIBLE = Capabilities()
"""mistral.rs, SGLang and mlx-lm: their OpenAI endpoints only, as far as the gateway relies on them."""
WHISPER_SERVER = Capabilities(transcription=True)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything the supervisor needs to start one child, except the port and key, which it picks.
    ``socket_path``: the unix socket the engine listens on instead of a port (None: a port).

    ``ctx_size`` is the engine's total context (cells), ``ctx_per_slot`` what one request can use (0: unknown, no
    prompt preflight); the paths are the files ``prepare`` readies (None when unused); ``estimate`` is the memory
    estimate the context was fitted with (None for lanes without one). ``engine_model`` is the ``model`` every
    request to this child must carry (None: the client's name is fine, llama-server ignores it).
    ``checks_api_key`` is False for engines that cannot check a key (mlx-lm, mistral.rs): the supervisor still
    writes one, but such a child is protected only by listening on 127.0.0.1. ``sleep_secs``: the idle seconds
    after which the engine frees its model itself (llama-server's ``--sleep-idle-seconds``; 0: never).
    ``loras``: the LoRA adapter files it loads unapplied, in their engine ids' order (``supervisor.adapters``).
    ``can``: what the engine does beyond OpenAI's endpoints (``Capabilities``).
    """

    argv_template: tuple[str, ...]
    ctx_size: int = 0
    health_path: str = "/health"
    parallel: int = 1
    kv_unified: bool = False
    """The slots share one context of ``ctx_size`` (``ModelSettings.kv_unified``)."""
    slot_save_dir: Path | None = None
    lookup_cache: Path | None = None
    socket_path: Path | None = None
    mmproj: Path | None = None
    estimate: MemoryEstimate | None = None
    engine_model: str | None = None
    checks_api_key: bool = True
    sleep_secs: int = 0
    loras: tuple[Path, ...] = ()
    can: Capabilities = OPENAI_COMPATIBLE

    @property
    def ctx_per_slot(self) -> int:
        return self.ctx_size if self.kv_unified else self.ctx_size // max(self.parallel, 1)

    @property
    def input_tokens(self) -> int:
        """The most tokens one input may have on this embedding engine: its physical batch (the last ``-ub`` in
        its argv, as llama-server parses them, else llama-server's 512) within one slot's context."""
        ubatch = DEFAULT_UBATCH
        for at, flag in enumerate(self.argv_template[:-1]):
            if flag in ("-ub", "--ubatch-size"):
                with contextlib.suppress(ValueError):
                    ubatch = int(self.argv_template[at + 1])
        per_slot = self.ctx_per_slot
        return min(ubatch, per_slot) if per_slot > 0 else ubatch

    @property
    def reads_images(self) -> bool:
        """Whether the engine can take image parts. llama-server needs a vision projector: ``mmproj``, or one
        given in ``extra_args`` (``--mmproj``, or fetched with ``-hf``); the other lanes (``engine_model`` set)
        judge for themselves."""
        if self.mmproj is not None or self.engine_model is not None:
            return True
        return any(a in _VISION_FLAGS for a in self.argv_template)

    def on_tcp(self) -> LaunchSpec:
        """The same launch on a 127.0.0.1 port instead of its unix socket (``--host SOCK`` becomes
        ``--host 127.0.0.1 --port {port}``)."""
        if self.socket_path is None:
            return self
        argv = list(self.argv_template)
        at = argv.index("--host")
        argv[at : at + 2] = ["--host", HOST, "--port", "{port}"]
        return replace(self, argv_template=tuple(argv), socket_path=None)

    def argv(self, *, port: int, api_key_file: Path) -> list[str]:
        """The argv with the placeholders filled. It also runs ``prepare(self)`` (idempotent), so a spawn that
        does not call ``prepare`` itself still finds the slot save directory and lookup cache in place; without
        the directory, ``--slot-save-path`` is left out."""
        banked = prepare(self)
        out: list[str] = []
        skip = False
        for a in self.argv_template:
            if skip:
                skip = False
                continue
            if a == "--slot-save-path" and not banked:
                skip = (
                    True  # llama-server refuses a path that is not a directory: no bank, but the engine runs
                )
                continue
            if a == "{port}":
                out.append(str(port))
            elif a == "{api_key_file}":
                out.append(str(api_key_file))
            else:
                out.append(a)
        return out


def prepare(spec: LaunchSpec) -> bool:
    """Ready the files ``spec`` names, right before the child is spawned: the slot save directory (owner-only: the
    session bank's files hold prompts; one that cannot be made only leaves the bank off), an empty lookup cache
    file when there is none (llama-server aborts when ``--lookup-cache-dynamic`` names a missing file), and a unix
    socket left by a dead child removed (only a socket, never another kind of file)."""
    if spec.slot_save_dir is not None:
        try:
            for folder in (spec.slot_save_dir.parent, spec.slot_save_dir):
                folder.mkdir(mode=0o700, exist_ok=True)
                folder.chmod(0o700)
        except OSError as e:
            log.warning(
                "session bank off for this engine: cannot make %s (%s); its slots are not saved",
                spec.slot_save_dir,
                e.strerror or e,
            )
            banked = False
        else:
            banked = True
    else:
        banked = False
    if spec.lookup_cache is not None:
        spec.lookup_cache.parent.mkdir(parents=True, exist_ok=True)
        spec.lookup_cache.touch(exist_ok=True)
    if spec.socket_path is not None:
        remove_stale_socket(spec.socket_path)
    return banked


def remove_stale_socket(path: Path) -> None:
    """Remove the unix socket at ``path`` if nobody listens on it (what a dead engine leaves behind); a live one,
    or a file that is not a socket, stays."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode) and not socket_in_use(path):
            path.unlink()
    except FileNotFoundError:
        pass


def socket_in_use(path: Path) -> bool:
    """Whether a process listens on the unix socket ``path`` (a live engine, maybe another blazar's on the same
    data directory), as opposed to a socket file a dead one left behind."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.setblocking(False)  # never waits: a full backlog (EAGAIN) still means someone listens
        try:
            s.connect(str(path))
        except BlockingIOError:
            return True
        except OSError:  # refused (nobody listens), missing, not a socket
            return False
        return True


def render_command(spec: LaunchSpec) -> str:
    """The argv as one shell line (placeholders left bare so they read as placeholders)."""
    return " ".join(a if a in PLACEHOLDERS else shlex.quote(a) for a in spec.argv_template)
