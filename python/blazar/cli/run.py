"""`blazar run MODEL [PROMPT]`: a terminal chat with a model through the running daemon, like `ollama run`.

It speaks the daemon's Ollama API: ``POST /api/chat`` with ``stream: true``, printing each NDJSON object's
``message.content`` as it arrives and keeping the conversation as the ``messages`` it sends next time. With a
PROMPT (or text piped on stdin) it answers once and exits; otherwise it is a REPL: ``\"\"\"`` starts and ends a
multi-line message, ``/clear`` forgets the conversation, ``/bye`` (or Ctrl-D) exits, ``/?`` lists the commands,
and Ctrl-C stops a generation without leaving.

It owns the terminal loop. When no daemon listens at this machine's address it starts one in the background first
(``cli.background``: ``blazar stop --server`` ends it); the daemon starts the engine on the first request.
Failures are one red line and exit 1.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TextIO

import httpx
import orjson
import typer
from rich.markup import escape
from rich.prompt import Confirm

from blazar.catalog import names
from blazar.cli import background
from blazar.cli.client import ApiKey, DaemonError, Host, Port, address, client, error_text, unreachable
from blazar.cli.common import config, err_console, handles_errors, steps_on
from blazar.cli.provision import provision
from blazar.dialects.canonical import MAX_TOKENS

HELP = """Available commands:
  /clear          Forget the conversation so far
  /bye            Exit (Ctrl-D too)
  /?, /help       Show this help

Use \"\"\" to begin and end a multi-line message.
Ctrl-C stops an answer in progress; the question and the partial answer are dropped."""

MULTI = '"""'


@dataclass
class Chat:
    """One conversation with one model over the daemon's /api/chat stream."""

    client: httpx.Client
    model: str
    options: dict[str, Any] = field(default_factory=dict)
    keep_alive: str | None = None
    messages: list[dict[str, str]] = field(default_factory=list)

    def load(self) -> None:
        """Load the model before the first prompt, as ``ollama run`` does: a model that does not exist (or that
        the key may not use) is the command's error, before any prompt is read."""
        body: dict[str, Any] = {"model": self.model, "messages": []}
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        r = self.client.post("/api/chat", content=orjson.dumps(body))
        if r.status_code >= 400:
            raise DaemonError(error_text(r.content, r.status_code))

    def ask(self, text: str, out: TextIO) -> str:
        """Send ``text`` as the next user turn, write the answer to ``out`` as it streams, and return it.

        The turn and the answer join the conversation only when the answer completes: an error or Ctrl-C
        (KeyboardInterrupt, re-raised) leaves the conversation as it was.
        """
        turn = {"role": "user", "content": text}
        body: dict[str, Any] = {"model": self.model, "messages": [*self.messages, turn], "stream": True}
        if self.options:
            body["options"] = self.options
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        pieces: list[str] = []
        with self.client.stream("POST", "/api/chat", content=orjson.dumps(body)) as resp:
            if resp.status_code >= 400:
                raise DaemonError(error_text(resp.read(), resp.status_code))
            for line in resp.iter_lines():
                if not line.strip():
                    continue
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    raise DaemonError(f"the daemon sent a line that is not JSON: {line[:200]!r}") from None
                if not isinstance(obj, dict):
                    continue
                if obj.get("error"):
                    raise DaemonError(str(obj["error"]))
                msg = obj.get("message")
                piece = msg.get("content") if isinstance(msg, dict) else None
                if isinstance(piece, str) and piece:
                    pieces.append(piece)
                    out.write(piece)
                    out.flush()
                if obj.get("done"):
                    break
        answer = "".join(pieces)
        self.messages += [turn, {"role": "assistant", "content": answer}]
        return answer


# ---------------------------------------------------------------------------------------------------------------
# The REPL


def read_message(read: Callable[[str], str]) -> str:
    """One message from ``read`` (``input``-like, raising EOFError at the end): a line, or the lines between
    an opening and a closing ``\"\"\"`` joined with newlines. EOFError inside a block ends the block."""
    line = read(">>> ")
    if not line.lstrip().startswith(MULTI):
        return line
    rest = line.lstrip()[len(MULTI) :]
    if rest.rstrip().endswith(MULTI):
        return rest.rstrip()[: -len(MULTI)]
    lines = [rest]
    while True:
        try:
            line = read("... ")
        except EOFError:
            break
        if line.rstrip().endswith(MULTI):
            lines.append(line.rstrip()[: -len(MULTI)])
            break
        lines.append(line)
    return "\n".join(lines).strip("\n")


def _read_line(prompt: str) -> str:
    """``input`` for a stdin that is not a terminal: no prompt is written, EOFError at the end."""
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\r\n")


def repl(chat: Chat, read: Callable[[str], str], out: TextIO, tty: bool) -> None:
    """Read messages and answer them until /bye or end of input."""
    if tty:
        out.write('Send a message (/? for help, """ for several lines)\n')
    while True:
        try:
            text = read_message(read)
        except EOFError:
            if tty:
                out.write("\n")
            return
        except KeyboardInterrupt:
            out.write("\nUse Ctrl + d or /bye to exit.\n")
            continue
        command = text.strip()
        if not command:
            continue
        if command.startswith("/") and MULTI not in text:
            word = command.split()[0]
            if word in ("/bye", "/exit"):
                return
            if word == "/clear":
                chat.messages.clear()
                out.write("Cleared the conversation.\n")
            elif word in ("/?", "/help"):
                out.write(HELP + "\n")
            else:
                out.write(f"Unknown command '{word}'. Type /? for help\n")
            continue
        try:
            chat.ask(text, out)
            out.write("\n\n")
        except KeyboardInterrupt:
            out.write("\n[interrupted]\n\n")
        except DaemonError as e:
            out.write("\n")
            err_console.print(
                f"[red]error:[/red] {escape(str(e))}", markup=True, highlight=False, soft_wrap=True
            )
        out.flush()


# ---------------------------------------------------------------------------------------------------------------
# The command


say = steps_on(err_console)
"""A step the command takes before the chat, on stderr (the answer alone goes to stdout)."""


def ask(question: str) -> bool:
    """A yes/no question on the terminal (stderr: stdout is the answer's)."""
    return Confirm.ask(f"blazar: {question}", console=err_console, default=False)


@handles_errors
def run_cmd(
    model: Annotated[
        str, typer.Argument(help="Model to chat with, as `blazar ls` names it (name or name:tag).")
    ],
    prompt: Annotated[
        list[str] | None,
        typer.Argument(help="Ask this once, print the answer and exit. Without it: an interactive chat."),
    ] = None,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            "-i",
            help="Chat (the REPL) even when stdin is not a terminal: each stdin line is a message.",
        ),
    ] = False,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            help="Stop each answer after this many tokens (Ollama num_predict).", min=1, max=MAX_TOKENS
        ),
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature; 0 is greedy.", min=0)
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Sampling seed, for repeatable answers.", min=-1, max=2**32 - 1)
    ] = None,
    keepalive: Annotated[
        str | None,
        typer.Option(help='How long the model stays loaded after the chat: seconds or a duration ("5m").'),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Install the engine without asking when none is installed here."),
    ] = False,
    host: Host = None,
    port: Port = None,
    api_key: ApiKey = None,
) -> None:
    """Chat with a model through the daemon, like `ollama run`; with none running here, start it in the background.

    With PROMPT, or text piped on stdin: print the answer and exit.

    Otherwise chat: \"\"\" begins and ends a multi-line message, /clear forgets the conversation, /bye or Ctrl-D exits, Ctrl-C stops an answer.
    """
    if sys.stdout is None:
        raise DaemonError("standard output is closed: there is nowhere to write the answer")
    names.check(model)  # taken as given, as the daemon takes it: " smollm2" is refused here, naming its space
    url = address(host, port)
    options: dict[str, Any] = {}
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    if temperature is not None:
        options["temperature"] = temperature
    if seed is not None:
        options["seed"] = seed
    text = " ".join(prompt or [])
    if sys.stdin is None:  # closed (<&-): nothing is piped, and there is no one to chat with
        if interactive or not text:
            raise DaemonError("standard input is closed: give a PROMPT to ask one question")
    elif not interactive and not sys.stdin.isatty():
        piped = sys.stdin.read()
        text = f"{piped.rstrip()}\n\n{text}" if text and piped.strip() else (text or piped.strip())
        if not text:
            raise DaemonError("nothing to ask: give a PROMPT or pipe text on stdin")
    cfg = config()
    if background.is_local(cfg, host):  # this machine's: set up what is missing
        with contextlib.redirect_stdout(sys.stderr):  # what it prints are steps; stdout is the answer's
            provision(cfg, model, yes=yes, say=say, ask=ask)
        if not background.listening(url):
            background.start(cfg, url, host, port, say)
    timeout = httpx.Timeout(10.0, read=None)
    with client(url, api_key, timeout) as c:
        chat = Chat(c, model, options, keepalive)
        try:
            if text and not interactive:
                chat.ask(text, sys.stdout)
                sys.stdout.write("\n")
                return
            if text:
                chat.ask(text, sys.stdout)
                sys.stdout.write("\n\n")
            if sys.stdin is None:
                return
            if not text:
                chat.load()
            tty = sys.stdin.isatty()
            if tty:
                import readline  # noqa: F401  (line editing and history for input())
            repl(chat, input if tty else _read_line, sys.stdout, tty)
        except httpx.TransportError as e:
            raise unreachable(url, e) from None
