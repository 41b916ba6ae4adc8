"""How CLI commands talk to the running daemon (`blazar run`, `ps`, `stop`): its address, the key, one-line errors.

It owns the ``--host``/``--port``/``--api-key`` options those commands share, the client they use, and turning an
unreachable daemon or an error body in any of the daemon's dialects into one line for the terminal. It never
starts the daemon and never reads the data directory.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any

import httpx
import orjson
import typer

from blazar.cli.common import config
from blazar.errors import BlazarError

Host = Annotated[
    str | None, typer.Option(help="Daemon address (default: from the config).", envvar="BLAZAR_HOST")
]
Port = Annotated[
    int | None, typer.Option(help="Daemon port (default: from the config).", envvar="BLAZAR_PORT")
]
ApiKey = Annotated[
    str | None,
    typer.Option(help="API key, when the daemon requires one.", envvar="BLAZAR_API_KEY", show_default=False),
]


class DaemonError(BlazarError):
    """The daemon refused a request or cannot be reached; the message is one line for the terminal."""


def error_text(data: bytes, status: int) -> str:
    """The message of an error body in any of the daemon's dialects, else the status; a 401 also says how the CLI
    sends a key."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = None
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        err = err.get("message")
    if isinstance(err, str) and err:
        if status == 401:
            return f"{err}; the daemon has API keys: pass one with --api-key or BLAZAR_API_KEY"
        return err
    if isinstance(body, dict):
        text = data.decode(errors="replace").strip()
        return text[:300] if text else f"the daemon answered HTTP {status}"
    return f"the server answered HTTP {status} with no Blazar error body; check that --host and --port name the daemon"


def base_url(host: str, port: int) -> str:
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


_NO_NAME = ("name or service not known", "nodename nor servname", "name resolution", "no address associated")


def unreachable(url: str, exc: httpx.TransportError) -> DaemonError:
    text = str(exc).lower()
    if any(n in text for n in _NO_NAME):
        return DaemonError(
            f"cannot reach the Blazar daemon at {url}: its host name does not resolve; check --host"
        )
    why = "connection refused" if isinstance(exc, httpx.ConnectError) else type(exc).__name__
    return DaemonError(f"cannot reach the Blazar daemon at {url} ({why}); start it with: blazar serve")


def json_object(r: httpx.Response) -> dict[str, Any]:
    """The daemon's JSON object answer; anything else means another server answers at that address."""
    try:
        body = orjson.loads(r.content)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict):
        raise DaemonError(
            f"the server at {str(r.request.url.copy_with(path='/', query=None)).rstrip('/')} did not answer as a"
            " Blazar daemon (no JSON object); check --host and --port"
        )
    return body


def address(host: str | None, port: int | None) -> str:
    """The daemon's base URL: the options (or their environment variables), else the config's host and port."""
    if host is None or port is None:
        cfg = config()
        host = cfg.host if host is None else host
        port = cfg.port if port is None else port
    if not 1 <= port <= 65535:
        raise DaemonError(f"the daemon's port must be 1-65535, got {port} (--port or BLAZAR_PORT)")
    if not _is_host(host):
        raise DaemonError(
            f"'{host}' is not a host name or address (--host or BLAZAR_HOST); give the port with --port"
        )
    return base_url(host, port)


_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _is_host(host: str) -> bool:
    """A host name, an IPv4 address, or an IPv6 address with or without brackets; empty means this machine."""
    if ":" not in host:
        if not host:
            return True
        if re.fullmatch(r"[0-9.]+", host):  # looks like an IPv4 address: it must be one
            try:
                return isinstance(ipaddress.ip_address(host), ipaddress.IPv4Address)
            except ValueError:
                return False
        labels = host.removesuffix(".").split(".")
        return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels)
    try:
        return isinstance(
            ipaddress.ip_address(host.removeprefix("[").removesuffix("]")), ipaddress.IPv6Address
        )
    except ValueError:
        return False


def client(url: str, api_key: str | None, timeout: httpx.Timeout | float = 10.0) -> httpx.Client:
    headers = {"content-type": "application/json"}
    if api_key:
        if not all("!" <= ch <= "~" for ch in api_key):
            raise DaemonError(
                "the API key must be printable ASCII without spaces (--api-key or BLAZAR_API_KEY)"
            )
        headers["authorization"] = f"Bearer {api_key}"
    return httpx.Client(base_url=url, headers=headers, timeout=timeout)


def call(c: httpx.Client, method: str, path: str, body: bytes | None = None) -> httpx.Response:
    """One request to the daemon; an unreachable daemon, one that does not answer in time, or an error answer
    is a ``DaemonError``."""
    try:
        r = c.request(method, path, content=body)
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise unreachable(str(c.base_url).rstrip("/"), e) from None
    except httpx.TimeoutException:
        raise DaemonError(f"the daemon did not answer {method} {path} in time; see its log") from None
    except httpx.TransportError as e:
        raise unreachable(str(c.base_url).rstrip("/"), e) from None
    if r.status_code >= 400:
        raise DaemonError(error_text(r.content, r.status_code))
    return r
