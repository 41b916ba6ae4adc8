"""Remotes at run time: each ``[[remotes]]`` entry's pooled connections, and which model names route there.

A request for ``name:model`` whose ``name`` is a remote's goes to that remote as ``model``; every other name is
the catalog's. A remote's connections are the same native links as an engine child's (``supervisor.links``), so
its streams are decoded and translated without a Python frame per read. Serving a request there is
``blazar.gateway.remote``'s; this module starts nothing and knows no dialect.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

from blazar.config.model import RemoteConfig
from blazar.config.remotes import host_of
from blazar.supervisor.links import Links


class Remote:
    """One remote: where it is (``where``, host:port for messages; never its key) and its connections."""

    __slots__ = ("auth", "base_path", "links", "listed", "name", "parallel", "secret", "tls", "url", "where")

    def __init__(self, cfg: RemoteConfig) -> None:
        parts = urlsplit(cfg.url)
        assert parts.hostname is not None  # the config checked it
        self.name = cfg.name
        self.where = host_of(cfg.url)
        self.base_path = parts.path.rstrip("/")
        tls = None
        if parts.scheme == "https":
            tls = ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file is not None else None)
        self.links = Links((parts.hostname, parts.port or (443 if tls else 80)), cfg.api_key, tls)
        self.parallel = cfg.parallel
        self.url = cfg.url
        self.tls = tls
        self.auth = {"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        # its API key: sent upstream, and cut out of whatever the remote says (scrub, the translators' redact)
        self.secret = cfg.api_key or None
        self.listed: tuple[float, list[str]] | None = None  # (when, model ids) its /models last said

    def path(self, engine_path: str) -> str:
        """The remote's path for an engine path (``/v1/chat/completions`` -> the URL's path + ``/chat/completions``)."""
        return self.base_path + engine_path.removeprefix("/v1")

    def scrub(self, text: str) -> str:
        """``text`` (a remote's own message) with its API key cut out: a server may quote what it was sent."""
        return text.replace(self.secret, "<the remote's api_key>") if self.secret else text

    @property
    def admission_key(self) -> str:
        """The queue its requests share (a remote's capacity is its own, whatever the model)."""
        return f"@remote/{self.name}"  # never a model name, so never a model's queue


class Remotes:
    def __init__(self, configs: tuple[RemoteConfig, ...]) -> None:
        self.by_name = {c.name: Remote(c) for c in configs}

    def route(self, model: str) -> tuple[Remote, str] | None:
        """(the remote, the model to ask it for) when ``model`` is ``remote:model``, else None."""
        if not self.by_name:
            return None
        prefix, sep, rest = model.partition(":")
        remote = self.by_name.get(prefix) if sep and rest else None  # the name as given: nothing trimmed
        return (remote, rest) if remote is not None else None

    def close(self) -> None:
        for remote in self.by_name.values():
            remote.links.close()
