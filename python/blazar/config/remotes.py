"""Remotes in the config: ``[[remotes]]`` tables, the ``[[pools]]`` that serve one model from several, and a
model's ``rpc_workers`` (llama.cpp RPC servers its engine offloads to), validated.

A remote is another Blazar or any OpenAI-compatible server; a request for ``name:model`` goes there with
``model`` as the model. It owns every message about a remote's table; no message shows its key. It is internal to
``blazar.config`` and must not do I/O beyond reading the environment variable ``api_key_env`` names.
"""

from __future__ import annotations

import ipaddress
import ssl
from urllib.parse import urlsplit

from blazar.config.checks import (
    Ctx,
    a_type,
    choice,
    env_value,
    integer,
    path_value,
    quote_key,
    string,
    strings,
)
from blazar.config.model import (
    DEFAULT_POOL_AFFINITY_BOUND,
    DEFAULT_REMOTE_PARALLEL,
    KEY_NAME_MAX,
    KEY_NAME_PATTERN,
    MAX_RPC_WORKERS,
    POOL_POLICIES,
    PoolConfig,
    RemoteConfig,
    RpcWorker,
    normalize_model_name,
)
from blazar.errors import ConfigError

_FIELDS: tuple[str, ...] = ("name", "url", "api_key", "api_key_env", "parallel", "ca_file")


def _url(ctx: Ctx, where: str, value: object) -> str:
    """The remote's base URL. A bad one is not repeated in the message: it may hold a password or a key."""
    rule = (
        f"{ctx.source}: key '{where}.url' must be an http:// or https:// URL with a host and no user, password,"
        ' query or fragment, such as "http://10.0.0.5:11435/v1" (a key goes in api_key)'
    )
    if not isinstance(value, str):
        raise ConfigError(f"{rule}; got {a_type(value)}")
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018  (read for its validation)
    except ValueError:
        raise ConfigError(f"{rule}; its port is not a number from 0 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(rule)
    if parts.port == 0 or any(c.isspace() for c in value.strip()):
        raise ConfigError(f"{rule}; port 0 and spaces are not allowed")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(rule)
    return value.strip().rstrip("/")


def _api_key(ctx: Ctx, where: str, table: dict[str, object]) -> str | None:
    if "api_key" in table and "api_key_env" in table:
        raise ConfigError(f"{ctx.source}: '{where}' sets both api_key and api_key_env; keep one")
    if "api_key_env" in table:
        var = table["api_key_env"]
        if not isinstance(var, str) or not var:
            raise ctx.bad(f"{where}.api_key_env", "the name of an environment variable", var)
        secret = env_value(ctx.env, var)
        if not secret:
            raise ConfigError(
                f"{ctx.source}: '{where}.api_key_env' names {var}, which is not set in Blazar's environment"
            )
        return _checked_secret(ctx, f"{where}.api_key_env ({var})", secret)
    if "api_key" in table:
        return _checked_secret(ctx, f"{where}.api_key", table["api_key"])
    return None


def _checked_secret(ctx: Ctx, where: str, value: object) -> str:
    """A key that fits in a header line: printable ASCII without spaces (never shown in the message)."""
    if not isinstance(value, str) or not value or not all("!" <= c <= "~" for c in value):
        got = a_type(value) if not isinstance(value, str) else f"{len(value)} characters"
        raise ConfigError(
            f"{ctx.source}: key '{where}' must be printable ASCII characters without spaces, got {got}"
        )
    return value


def _table(ctx: Ctx, where: str, table: object, fields: tuple[str, ...], expected: str) -> dict[str, object]:
    """``table`` when it is a table of only ``fields``, else the error naming the key that is not."""
    if not isinstance(table, dict):
        raise ctx.bad(where, expected, table)
    for key in table:
        if key not in fields:
            raise ctx.unknown(key, f"{where}.{quote_key(key)}", fields)
    return table


def _remote(ctx: Ctx, index: int, value: object) -> RemoteConfig:
    where = f"remotes[{index}]"
    table = _table(ctx, where, value, _FIELDS, "a table with name and url")
    name = table.get("name")
    if not isinstance(name, str) or not KEY_NAME_PATTERN.fullmatch(name):
        raise ctx.bad(f"{where}.name", f"at most {KEY_NAME_MAX} letters, digits, '.', '_' and '-'", name)
    if "url" not in table:
        raise ConfigError(f"{ctx.source}: '{where}' ({name}) has no url")
    url = _url(ctx, where, table["url"])
    parallel = integer(ctx, f"{where}.parallel", table.get("parallel", DEFAULT_REMOTE_PARALLEL), 1, 1024)
    ca_file = None
    if "ca_file" in table:
        if not url.startswith("https://"):
            raise ConfigError(f"{ctx.source}: '{where}.ca_file' is set, but its url is not https://")
        ca_file = path_value(ctx, f"{where}.ca_file", table["ca_file"])
        try:
            ssl.create_default_context(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it holds no PEM certificate"
            raise ConfigError(
                f"{ctx.source}: '{where}.ca_file' is {ca_file}, which cannot be read: {why}"
            ) from None
    return RemoteConfig(
        name=name, url=url, api_key=_api_key(ctx, where, table), parallel=parallel, ca_file=ca_file
    )


def file_remotes(ctx: Ctx, value: object) -> tuple[RemoteConfig, ...]:
    """The ``[[remotes]]`` array of tables; names are unique."""
    if not isinstance(value, list):
        raise ctx.bad("remotes", "an array of [[remotes]] tables", value)
    out: list[RemoteConfig] = []
    for i, table in enumerate(value):
        remote = _remote(ctx, i, table)
        if any(r.name == remote.name for r in out):
            raise ConfigError(
                f"{ctx.source}: two [[remotes]] are named '{remote.name}'; names must be unique"
            )
        out.append(remote)
    return tuple(out)


_POOL_FIELDS: tuple[str, ...] = ("name", "remotes", "model", "policy", "affinity_bound")


def _pool(ctx: Ctx, index: int, value: object, remotes: tuple[RemoteConfig, ...]) -> PoolConfig:
    where = f"pools[{index}]"
    table = _table(ctx, where, value, _POOL_FIELDS, "a table with name and remotes")
    given = string(ctx, f"{where}.name", table.get("name"))
    try:
        name = normalize_model_name(given)
    except ValueError:
        raise ctx.bad(f"{where}.name", "a model name (name or name:tag)", given) from None
    known = {r.name for r in remotes}
    prefix = given.partition(":")[0]
    if ":" in given and prefix in known:
        raise ConfigError(
            f"{ctx.source}: '{where}.name' is '{given}', which already means model '{given.partition(':')[2]}' on"
            f" remote '{prefix}'; name the pool something else"
        )
    hosts = strings(ctx, f"{where}.remotes", table.get("remotes", []))
    if not hosts:
        raise ConfigError(
            f"{ctx.source}: '{where}' ({given}) names no remotes; list [[remotes]] names in remotes"
        )
    for host in hosts:
        if host not in known:
            have = ", ".join(sorted(known)) or "none are configured"
            raise ConfigError(
                f"{ctx.source}: '{where}.remotes' names '{host}', which is no [[remotes]] name ({have})"
            )
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"{ctx.source}: '{where}.remotes' names a remote twice")
    model = string(ctx, f"{where}.model", table.get("model", given))
    policy = choice(ctx, f"{where}.policy", table.get("policy", POOL_POLICIES[0]), POOL_POLICIES)
    bound = integer(
        ctx, f"{where}.affinity_bound", table.get("affinity_bound", DEFAULT_POOL_AFFINITY_BOUND), 0
    )
    return PoolConfig(name=name, remotes=hosts, model=model, policy=policy, affinity_bound=bound)


def file_pools(ctx: Ctx, value: object, remotes: tuple[RemoteConfig, ...]) -> tuple[PoolConfig, ...]:
    """The ``[[pools]]`` array of tables, each naming ``[[remotes]]`` of ``remotes``; names are unique."""
    if not isinstance(value, list):
        raise ctx.bad("pools", "an array of [[pools]] tables", value)
    out: list[PoolConfig] = []
    for i, table in enumerate(value):
        pool = _pool(ctx, i, table, remotes)
        if any(p.name == pool.name for p in out):
            raise ConfigError(f"{ctx.source}: two [[pools]] are named '{pool.name}'; names must be unique")
        out.append(pool)
    return tuple(out)


_WORKER_FIELDS: tuple[str, ...] = ("address", "memory_mib")
_WORKER_RULE = 'a "host:port" string (a host name or IPv4 address, such as "10.0.0.7:50052")'


def _worker(ctx: Ctx, where: str, value: object, memory_mib: int | None) -> RpcWorker:
    if not isinstance(value, str):
        raise ctx.bad(where, _WORKER_RULE, value)
    try:
        return RpcWorker.parse(value, memory_mib)
    except ValueError as e:
        raise ctx.bad(where, f"{_WORKER_RULE}; {e}", value) from None


def rpc_workers(ctx: Ctx, key: str, value: object) -> tuple[RpcWorker, ...]:
    """A model's ``rpc_workers``: ``"host:port"`` strings or ``{address = "host:port", memory_mib = N}`` tables
    (``memory_mib``: what the worker lends when its own report cannot be read), each named once."""
    if not isinstance(value, list):
        raise ctx.bad(key, 'an array of "host:port" strings', value)
    if len(value) > MAX_RPC_WORKERS:
        raise ConfigError(
            f"{ctx.source}: key '{key}' names {len(value)} workers; llama.cpp's RPC backend takes at most"
            f" {MAX_RPC_WORKERS}"
        )
    out: list[RpcWorker] = []
    for i, item in enumerate(value):
        where = f"{key}[{i}]"
        memory = None
        if isinstance(item, dict):
            table = _table(ctx, where, item, _WORKER_FIELDS, "a table with address")
            if "address" not in table:
                raise ConfigError(f"{ctx.source}: '{where}' has no address")
            item = table["address"]
            where += ".address"
            if "memory_mib" in table:
                memory = integer(ctx, f"{key}[{i}].memory_mib", table["memory_mib"], 1)
        worker = _worker(ctx, where, item, memory)
        if any(w.address == worker.address for w in out):
            raise ConfigError(f"{ctx.source}: key '{key}' names {worker.address} twice")
        out.append(worker)
    return tuple(out)


def host_of(url: str) -> str:
    """``host:port`` of a remote's URL, for messages (never its path or key)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass
    return f"{host}:{parts.port or (443 if parts.scheme == 'https' else 80)}"
