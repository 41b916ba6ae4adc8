"""The regression gate: an engine must run before Blazar records it.

Three steps: ``BINARY --version`` exits 0; when the catalog holds a model of the lane, the engine starts as a server
on a free 127.0.0.1 port and answers ``/health``; then one short generation through ``/v1/chat/completions``.
It owns the gate's command lines (``gate_argv``, built by the same per-lane builders as the launch profiles, in
``engines/argv.py``), the waits and stopping the server it started (by PID, SIGTERM then SIGKILL). It never
touches the store or moves files; a failure is ``GateFailed``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from blazar.catalog.models import split_set
from blazar.engines import argv
from blazar.errors import EngineError

VERSION_TIMEOUT_SECS = 60.0
GEN_TIMEOUT_SECS = 120.0
GEN_MAX_TOKENS = 4
GATE_CTX = 512
"""The llama-cpp gate's context: enough for its one short generation, small enough to start fast."""


class GateFailed(EngineError):
    """The new engine did not pass the regression gate; nothing was recorded."""


@dataclass(frozen=True, slots=True)
class GateReport:
    version: str
    model: Path | None
    healthy: bool
    reply: str | None

    def summary(self) -> str:
        if self.model is None:
            return f"{self.version}; no model of this lane in the catalog, so /health and generation were skipped"
        return f"{self.version}; /health ok with {self.model.name}; generated {self.reply!r}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gate_argv(kind: str, binary: Path, model: Path, port: int) -> list[str]:
    """The command line that starts ``binary`` as a server of ``model`` on 127.0.0.1:``port`` for the gate: the
    launch profile's own builder with no API key and the engine's defaults (llama-cpp: a small context)."""
    if kind == "llama-cpp":
        return argv.llama_cpp(binary, model, port=port, ctx_size=GATE_CTX)
    if kind == "mistralrs":
        gguf = (split_set(model) or [model]) if model.suffix.lower() == ".gguf" else []
        return argv.mistralrs(binary, model, port=port, gguf_files=gguf)
    if kind == "sglang":
        return argv.sglang(binary, model, port=port)
    if kind == "mlx":
        return argv.mlx(binary, model, port=port)
    return [str(binary), "--host", argv.HOST, "--port", str(port), "--model", str(model)]


def _tail(text: str | bytes, n: int = 800) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.strip()
    return ("..." + text[-n:]) if len(text) > n else text


def check_version(binary: Path, cwd: Path) -> str:
    """``binary --version`` must exit 0; returns its first line that says ``version`` (or its first line)."""
    try:
        r = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            timeout=VERSION_TIMEOUT_SECS,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise GateFailed(
            f"`{binary.name} --version` did not finish within {VERSION_TIMEOUT_SECS:g}s"
        ) from None
    except OSError as e:
        raise GateFailed(f"`{binary.name} --version` could not start: {e.strerror or e}") from None
    out = (r.stdout + b"\n" + r.stderr).decode("utf-8", errors="replace")
    if r.returncode != 0:
        raise GateFailed(f"`{binary.name} --version` exited {r.returncode}: {_tail(out) or '(no output)'}")
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return next(
        (ln for ln in lines if "version" in ln.lower()), lines[0] if lines else "(no version printed)"
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_health(proc: subprocess.Popen[bytes], url: str, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            rc = proc.poll()
            if rc is not None:
                raise GateFailed(
                    f"the engine exited {rc} before answering /health: {_tail(log.read_bytes())}"
                )
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    raise GateFailed(f"the engine did not answer {url} within {timeout:g}s: {_tail(log.read_bytes())}")


def _generate(base: str) -> str:
    body = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": GEN_MAX_TOKENS,
        "temperature": 0,
        "stream": False,
    }
    try:
        r = httpx.post(base + "/v1/chat/completions", json=body, timeout=GEN_TIMEOUT_SECS, trust_env=False)
    except httpx.HTTPError as e:
        raise GateFailed(f"the test generation failed: {type(e).__name__}: {e}") from None
    if r.status_code != 200:
        raise GateFailed(f"the test generation answered HTTP {r.status_code}: {_tail(r.text, 300)}")
    try:
        content = r.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise GateFailed(f"the test generation answered no message: {_tail(r.text, 300)}") from None
    if not isinstance(content, str):
        raise GateFailed(f"the test generation answered no text: {_tail(r.text, 300)}")
    return content


def run_gate(
    kind: str,
    binary: Path,
    *,
    model: Path | None,
    workdir: Path,
    health_path: str = "/health",
    timeout: float = 120.0,
) -> GateReport:
    """Run the gate for ``binary``; its server log goes to ``workdir/gate.log``. Raises ``GateFailed``."""
    version = check_version(binary, workdir)
    if model is None:
        return GateReport(version=version, model=None, healthy=False, reply=None)
    port = free_port()
    cmd = gate_argv(kind, binary, model, port)
    log = workdir / "gate.log"
    with log.open("wb") as logf:
        try:
            proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=workdir
            )
        except OSError as e:
            raise GateFailed(f"the engine could not start as a server: {e.strerror or e}") from None
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_health(proc, base + health_path, timeout, log)
        reply = _generate(base)
    finally:
        _stop(proc)
    return GateReport(version=version, model=model, healthy=True, reply=reply)
