"""`blazar run` as a real subprocess (``python -m blazar run``) against a real `blazar serve` + llama-server.

The answers the command prints are compared with what the daemon's /api/chat answers to the same conversation
(temperature 0, fixed seed, few tokens), so the tests prove what was sent as well as what was printed. The REPL is
driven through stdin pipes with ``--interactive``; Ctrl-C is a real SIGINT sent mid-answer.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from typing import Any

import httpx
import pytest

from blazar.cli.run import HELP
from tests.conftest import Daemon, free_port, make_daemon

OPTS = ["--max-tokens", "6", "--temperature", "0", "--seed", "7"]
OPTIONS = {"num_predict": 6, "temperature": 0, "seed": 7}
QUESTION = "Name a color."


def run(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blazar", "run", *args],
        env={**env, "NO_COLOR": "1", "COLUMNS": "300"},
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=240,
    )


def answer(d: Daemon, *turns: str) -> str:
    """What /api/chat answers (whole) to the user ``turns``, each earlier one followed by its own answer."""
    messages: list[dict[str, Any]] = []
    reply = ""
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        body = {"model": "smollm2", "messages": messages, "stream": False, "options": OPTIONS}
        r = httpx.post(d.url + "/api/chat", json=body, timeout=240)
        assert r.status_code == 200, r.text
        reply = r.json()["message"]["content"]
        messages.append({"role": "assistant", "content": reply})
    assert reply
    return reply


def test_daemon_not_running_is_one_line_and_exit_1(tmp_path: Any) -> None:
    d = make_daemon(tmp_path / "none")
    env = {**d.env, "BLAZAR_PORT": str(free_port())}
    r = run(env, "smollm2", "hello")
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: cannot reach the Blazar daemon at http://127.0.0.1:")
    assert "start it with: blazar serve" in lines[0]


@pytest.mark.e2e
def test_one_shot_prompt_prints_the_streamed_answer(daemon: Daemon) -> None:
    r = run(daemon.env, "smollm2", *OPTS, "Name", "a", "color.")
    assert r.returncode == 0, r.stderr
    assert r.stdout == answer(daemon, QUESTION) + "\n"


@pytest.mark.e2e
def test_piped_stdin_is_one_prompt(daemon: Daemon) -> None:
    r = run(daemon.env, "smollm2", *OPTS, stdin="Name a\ncolor.\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == answer(daemon, "Name a\ncolor.") + "\n"


@pytest.mark.e2e
def test_unknown_model_is_the_daemons_message_and_exit_1(daemon: Daemon) -> None:
    r = run(daemon.env, "no-such-model", "hello")
    assert r.returncode == 1
    assert r.stderr.startswith("error: model 'no-such-model:latest' not found")
    # a chat that would start with no prompt: the model is loaded first, as ollama run does, and the error ends it
    r = run(daemon.env, "no-such-model", "--interactive", stdin="hi\n")
    assert r.returncode == 1 and r.stderr.startswith("error: model 'no-such-model:latest' not found"), (
        r.stderr
    )


@pytest.mark.e2e
def test_repl_multiline_commands_and_bye(daemon: Daemon) -> None:
    stdin = "\n".join(
        [QUESTION, '"""Say', "it again", '"""', "/?", "/nope", "/clear", "/bye", "never sent", ""]
    )
    r = run(daemon.env, "smollm2", "--interactive", *OPTS, stdin=stdin)
    assert r.returncode == 0, r.stderr
    first = answer(daemon, QUESTION)
    second = answer(daemon, QUESTION, "Say\nit again")  # the block, sent as one message after the first turn
    assert r.stdout == (
        f"{first}\n\n{second}\n\n{HELP}\nUnknown command '/nope'. Type /? for help\nCleared the conversation.\n"
    )


# An answer that cannot end before the SIGINT: the engine ignores the end-of-sequence token, so it runs to the
# test's bound, LONG_ANSWER tokens (within the 4,096-token context), seconds of generation on any machine against
# the moment between the first token printed and the signal.
IGNORE_EOS_CONFIG = '[models."smollm2:latest"]\nextra_args = ["--no-cache-prompt", "--ignore-eos"]\n'
LONG_ANSWER = 3500


@pytest.mark.e2e
def test_ctrl_c_stops_the_answer_and_the_repl_goes_on(daemon_factory: object) -> None:
    assert callable(daemon_factory)
    d: Daemon = daemon_factory(IGNORE_EOS_CONFIG)
    args = ["run", "smollm2", "-i", "--max-tokens", str(LONG_ANSWER), "--temperature", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "blazar", *args],
        env={**d.env, "NO_COLOR": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"Count from one to two hundred in words.\n")
    proc.stdin.flush()
    first = threading.Event()
    out = bytearray()

    def pump() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(4096):
            out.extend(chunk)
            first.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        assert first.wait(180), "no token within 180 s"  # the answer runs: Ctrl-C now stops it mid-answer
        proc.send_signal(signal.SIGINT)
        proc.stdin.write(b"/bye\n")
        proc.stdin.close()
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        proc.stderr.close()
        proc.stdout.close()
    assert code == 0, err
    assert err == ""
    assert out.endswith(b"\n[interrupted]\n\n"), bytes(out)
