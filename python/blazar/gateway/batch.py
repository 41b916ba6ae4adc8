"""OpenAI's Files and Batches APIs: upload a JSONL of requests, run them in the background, download the answers.

Routes: ``/v1/files`` (POST multipart upload, GET list), ``/v1/files/{id}`` (GET, DELETE), ``/v1/files/{id}/content``
(GET), ``/v1/batches`` (POST create, GET list), ``/v1/batches/{id}`` (GET), ``/v1/batches/{id}/cancel`` (POST).

``BatchRunner`` runs one batch at a time, ``PARALLEL`` of its requests in flight (fewer for a key whose
``max_concurrent`` is lower: one less than it, so the key's owner can still make a request). Each request goes
through this daemon's own HTTP front door, under the key that made the batch (its secret looked up per request, so
a rotation is followed) and ``x-blazar-priority: low``: the same auth, scope, quotas, admission and translation as
a client's request, and interactive traffic goes first. A busy answer (429; a 503, or 529 from /v1/messages, with
Retry-After) is retried after a pause. Answers with a 2xx status go to the output file, others (and requests that
got no answer) to the error file. A batch whose key is gone, or that was made while auth was off and meets keys
now, fails saying so. A batch left unfinished by a restart runs again from its start; cancelling stops sending its
requests, and what was answered is kept; a batch still queued is cancelled at once. Uploads and inputs are read
off the event loop. Storage is ``blazar.batches.store``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import orjson

from blazar import tasks
from blazar.batches.store import (
    ACTIVE,
    COMPLETION_WINDOW,
    ENDPOINTS,
    PURPOSES,
    BatchError,
    Batches,
    Files,
    Line,
    new_batch,
    new_id,
    read_input,
)
from blazar.gateway.http import JSON_HEADERS, HttpError, Request, parse_multipart
from blazar.store import Store
from blazar.supervisor import Supervisor
from blazar.tenancy.keys import KeyRegistry

Response = tuple[int, list[tuple[str, str]], bytes]

log = logging.getLogger("blazar.batch")

FILES, BATCHES = "/v1/files", "/v1/batches"
KIND = "batch"
"""The prefix of OpenAI batch ids (``batches.new_id``); Anthropic's Message Batches are ``msgbatch``."""
PARALLEL = 4
"""Requests of one batch in flight at once (the model's slots and admission decide what runs)."""
SAVE_EVERY_SECS = 1.0
"""How often a running batch's request counts are written."""
REQUEST_TIMEOUT_SECS = 3600.0
RETRIES = 20
"""How often one request answered 429 or 503 (busy) is sent again before its answer stands."""

RETRY_MAX_SECS = 30.0
RETRY_FAR_SECS = 300.0
"""A busy answer whose ``Retry-After`` is longer than this (a key's spent daily_tokens, which reset at midnight)
stands at once: waiting for it would hold the runner, and every other batch, for hours."""


def key_name(req: Request) -> str | None:
    """Who owns what this request makes: its key's name (None without auth)."""
    return req.key.name if req.key is not None else None


def sees_unowned(req: Request) -> bool:
    """A full-access key also sees what was made while auth was off."""
    return req.key is not None and req.key.full_access


def runner_of(req: Request) -> BatchRunner:
    runner = req.gate.batches
    assert isinstance(runner, BatchRunner)
    return runner


def _json(value: Any) -> Response:
    return 200, JSON_HEADERS, orjson.dumps(value)


def _page(req: Request, items: list[dict[str, Any]], default_limit: int, max_limit: int) -> Response:
    """One page of a cursor list, as OpenAI pages: ``after`` (an id), ``limit``; ``has_more``, ``first_id``,
    ``last_id``."""
    query = parse_qs(req.query)
    after = query.get("after", [None])[0]
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    try:
        limit = int(query.get("limit", [str(default_limit)])[0])
    except ValueError:
        limit = 0
    if not 1 <= limit <= max_limit:
        raise HttpError(400, f"'limit' must be an integer from 1 to {max_limit}")
    page = items[:limit]
    return _json({
        "object": "list", "data": page, "has_more": len(items) > limit,
        "first_id": page[0]["id"] if page else None, "last_id": page[-1]["id"] if page else None,
    })  # fmt: skip


UPLOAD_PURPOSES = tuple(p for p in PURPOSES if p != "batch_output")
"""``batch_output`` names the files Blazar writes; an upload may not claim it (as in OpenAI)."""
METADATA_PAIRS, METADATA_KEY, METADATA_VALUE = 16, 64, 512
"""OpenAI's bounds on a batch's metadata."""


# ---- files ----------------------------------------------------------------------------------------------


async def files_root(sup: Supervisor, req: Request, proto: Any) -> Response:
    files = runner_of(req).files
    if req.method in ("GET", "HEAD"):  # a HEAD is the GET without its body
        purpose = parse_qs(req.query).get("purpose", [None])[0]
        return _page(
            req,
            [f.object() for f in files.listing(key_name(req), purpose, sees_unowned(req))],
            10_000,
            10_000,
        )
    # a big body takes a while to read: not on the event loop
    fields = await asyncio.to_thread(
        parse_multipart, req.headers.get("content-type"), req.body, "the fields 'file' and 'purpose'"
    )
    purpose = fields.get("purpose", (None, b""))[1].decode("utf-8", "replace").strip()
    if purpose not in UPLOAD_PURPOSES:
        raise HttpError(400, f"'purpose' must be one of {', '.join(UPLOAD_PURPOSES)}; got '{purpose[:40]}'")
    if "file" not in fields:
        raise HttpError(400, "the multipart/form-data body has no 'file' field")
    filename, data = fields["file"]
    if not data:
        raise HttpError(400, "the uploaded file is empty")
    row = await asyncio.to_thread(files.add, key_name(req), filename or "upload.jsonl", purpose, data)
    return _json(row.object())


def _file_id(req: Request, suffix: str = "") -> str:
    return req.path[len(FILES) + 1 : len(req.path) - len(suffix)]


async def file_item(sup: Supervisor, req: Request, proto: Any) -> Response:
    files = runner_of(req).files
    row = files.get(_file_id(req), key_name(req), sees_unowned(req))  # BatchError: the gateway's 404
    if req.method == "DELETE":
        owner_batch = row.filename.partition("_")[0]
        if owner_batch.startswith("msgbatch-") and runner_of(req).batches.exists(owner_batch):
            raise HttpError(
                409,
                f"file '{row.id}' belongs to message batch '{owner_batch}', which reads it for its results; delete"
                f" the batch (DELETE /v1/messages/batches/{owner_batch}) and its files go with it",
            )
        await asyncio.to_thread(files.delete, row)
        return _json({"id": row.id, "object": "file", "deleted": True})
    return _json(row.object())


async def file_content(sup: Supervisor, req: Request, proto: Any) -> Response:
    files = runner_of(req).files
    data = await asyncio.to_thread(
        files.read, files.get(_file_id(req, "/content"), key_name(req), sees_unowned(req))
    )
    return 200, [("content-type", "application/octet-stream")], data


# ---- batches --------------------------------------------------------------------------------------------


async def batches_root(sup: Supervisor, req: Request, proto: Any) -> Response:
    runner = runner_of(req)
    if req.method in ("GET", "HEAD"):  # a HEAD is the GET without its body
        return _page(req, runner.batches.listing(key_name(req), sees_unowned(req), KIND), 20, 100)
    body = req.json_object()
    endpoint, input_file_id = body.get("endpoint"), body.get("input_file_id")
    if endpoint not in ENDPOINTS:
        raise HttpError(400, f"'endpoint' must be one of {', '.join(ENDPOINTS)}")
    if body.get("completion_window") != COMPLETION_WINDOW:
        raise HttpError(400, f"'completion_window' must be \"{COMPLETION_WINDOW}\"")
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= METADATA_PAIRS
        and all(
            len(k) <= METADATA_KEY and isinstance(v, str) and len(v) <= METADATA_VALUE
            for k, v in metadata.items()
        )
    ):
        raise HttpError(
            400,
            f"'metadata' must be an object of at most {METADATA_PAIRS} strings, keys up to {METADATA_KEY}"
            f" characters and values up to {METADATA_VALUE}",
        )
    if not isinstance(input_file_id, str):
        raise HttpError(400, "'input_file_id' is required: the id of a file uploaded with purpose \"batch\"")
    row = runner.files.get(input_file_id, key_name(req), sees_unowned(req))
    if row.purpose != "batch":
        raise HttpError(
            400, f"file '{row.id}' was uploaded with purpose '{row.purpose}'; a batch needs \"batch\""
        )
    doc = new_batch(row.id, endpoint, metadata)
    runner.batches.add(key_name(req), doc)
    runner.submit(doc["id"])
    return _json(doc)


def _batch_id(req: Request, suffix: str = "") -> str:
    return req.path[len(BATCHES) + 1 : len(req.path) - len(suffix)]


async def batch_item(sup: Supervisor, req: Request, proto: Any) -> Response:
    return _json(runner_of(req).batches.get(_batch_id(req), key_name(req), sees_unowned(req), KIND)[1])


async def batch_cancel(sup: Supervisor, req: Request, proto: Any) -> Response:
    runner = runner_of(req)
    _, doc = runner.batches.get(_batch_id(req, "/cancel"), key_name(req), sees_unowned(req), KIND)
    return _json(runner.cancel(doc))


# ---- the runner -----------------------------------------------------------------------------------------


class BatchRunner:
    """Runs batches one at a time in the background (see the module docstring)."""

    def __init__(self, sup: Supervisor, store: Store, keys: KeyRegistry) -> None:
        self.sup = sup
        self.keys = keys
        self.files = Files(store, sup.data.root / "files")
        self.batches = Batches(store)
        self.cancelling: set[str] = set()
        self.current: str | None = None  # the batch running now
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        host = sup.cfg.host if sup.cfg.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        self.base_url = (
            f"http://{f'[{host}]' if ':' in host else host}:{sup.cfg.port}"  # this daemon's front door
        )

    def start(self) -> None:
        for batch_id in self.batches.active():  # left unfinished by the last run: again from the start
            self.submit(batch_id)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        await tasks.stop(self._task)
        self._task = None

    def submit(self, batch_id: str) -> None:
        self._queue.put_nowait(batch_id)

    def cancel(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Cancel a batch still running (409 otherwise): one still queued at once, else its requests not yet
        sent are not sent (what was answered is kept). Returns the batch object as saved."""
        if doc["status"] not in ("validating", "in_progress", "cancelling"):
            raise HttpError(
                409, f"batch '{doc['id']}' is {doc['status']}; only a batch still running can be cancelled"
            )
        if doc["status"] == "validating" and self.current != doc["id"]:  # still queued: nothing of it runs
            now = int(time.time())
            doc.update(status="cancelled", cancelling_at=now, cancelled_at=now)
            self.batches.save(doc)
        elif doc["status"] != "cancelling":
            doc.update(status="cancelling", cancelling_at=int(time.time()))
            self.batches.save(doc)
            self.cancelling.add(doc["id"])
        return doc

    async def _loop(self) -> None:
        while True:
            batch_id = await self._queue.get()
            self.current = batch_id
            try:
                await self._run(batch_id)
            except Exception:
                log.exception("batch %s failed in Blazar", batch_id)
                with contextlib.suppress(
                    Exception
                ):  # never left in_progress: it ends failed, saying where to look
                    _owner, doc = self.batches.get(batch_id, None)
                    if doc["status"] in ACTIVE:
                        self._fail(
                            doc,
                            "server_error",
                            f"the batch failed in Blazar; see the daemon log ({batch_id})",
                        )
            finally:
                self.current = None

    def _secret(self, owner: str | None) -> str | None:
        """The current secret of the key a batch runs under (asked per request: a rotation mid-batch is
        followed); None when there is no such key, or auth is off."""
        return next((k.secret for k in self.keys.config.keys if k.name == owner), None)

    def _parallel(self, owner: str | None) -> int:
        """Requests in flight for a batch of ``owner``: ``PARALLEL``, within the key's ``max_concurrent`` less one
        (at least one), so the batch neither fails for the key's own limit nor takes every request it may have."""
        limit = next((k.limits.max_concurrent for k in self.keys.config.keys if k.name == owner), 0)
        return min(PARALLEL, max(limit - 1, 1)) if limit else PARALLEL

    def _unrunnable(self, owner: str | None, secret: str | None) -> str | None:
        """Why a batch of ``owner`` (whose key's secret is ``secret`` now) cannot run now, or None."""
        if owner is not None and secret is None:
            return f"the key '{owner}' that made this batch no longer exists"
        if owner is None and self.keys.auth_active:
            return "this batch was made while auth was off, and [[keys]] are configured now; create it again"
        return None

    async def _run(self, batch_id: str) -> None:
        owner, doc = self.batches.get(batch_id, None)
        now = int(time.time())
        if doc["status"] not in ACTIVE:  # cancelled while it waited its turn
            return None
        if doc["status"] == "cancelling":
            doc.update(status="cancelled", cancelled_at=now)
            return self.batches.save(doc)
        if now > doc["expires_at"]:
            doc.update(status="expired", expired_at=now)
            return self.batches.save(doc)
        try:
            data = await asyncio.to_thread(self.files.read, self.files.get(doc["input_file_id"], None))
        except BatchError as e:
            return self._fail(doc, "missing_file", str(e))
        lines, errors = await asyncio.to_thread(read_input, data, doc["endpoint"])
        if errors:
            doc["errors"] = {"object": "list", "data": errors}
            return self._fail(doc, None, None)
        why = self._unrunnable(owner, self._secret(owner))
        if why is not None:
            return self._fail(doc, "key_removed", why)
        doc.update(status="in_progress", in_progress_at=int(time.time()))
        doc["request_counts"] = {"total": len(lines), "completed": 0, "failed": 0}
        self.batches.save(doc)
        out: list[bytes] = []
        errs: list[bytes] = []
        saved = time.monotonic()
        gate = asyncio.Semaphore(self._parallel(owner))

        async def one(line: Line) -> None:
            nonlocal saved
            async with gate:
                if batch_id in self.cancelling:
                    return
                sent = await self._send(line, owner, batch_id)
            if sent is None:  # the cancel kept it from running
                return
            ok, record = sent
            (out if ok else errs).append(orjson.dumps(record))
            doc["request_counts"]["completed" if ok else "failed"] += 1
            if time.monotonic() - saved > SAVE_EVERY_SECS and batch_id not in self.cancelling:
                saved = time.monotonic()
                self.batches.save(doc)

        try:
            await asyncio.gather(*(one(line) for line in lines))
        except asyncio.CancelledError:
            # shutdown: a batch being cancelled ends now with what it has (a restart would find nothing of it
            # to run, so its answers would be lost); any other runs again when the daemon comes back
            if batch_id in self.cancelling:
                files = {
                    key: self._output(owner, batch_id, key, records) for key, records in _files(out, errs)
                }
                self._finish(batch_id, doc, files)
            raise
        files = {
            key: await asyncio.to_thread(self._output, owner, batch_id, key, records)
            for key, records in _files(out, errs)
        }
        self._finish(batch_id, doc, files)

    def _output(self, owner: str | None, batch_id: str, key: str, records: list[bytes]) -> str:
        """One of a batch's result files written: its id."""
        return self.files.add(
            owner, f"{batch_id}_{key[:-8]}.jsonl", "batch_output", b"\n".join(records) + b"\n"
        ).id

    def _finish(self, batch_id: str, doc: dict[str, Any], files: dict[str, str]) -> None:
        """The batch's final state saved, with its result files: cancelled or completed."""
        cancelled = batch_id in self.cancelling
        self.cancelling.discard(batch_id)
        _, latest = self.batches.get(batch_id, None)  # a cancel may have been saved meanwhile
        now = int(time.time())
        doc.update(files, finalizing_at=now, cancelling_at=latest.get("cancelling_at"))
        if cancelled:
            doc.update(status="cancelled", cancelled_at=now)
        else:
            doc.update(status="completed", completed_at=now)
        self.batches.save(doc)
        log.info("batch %s %s: %s", batch_id, doc["status"], doc["request_counts"])

    def _fail(self, doc: dict[str, Any], code: str | None, message: str | None) -> None:
        if code is not None:
            doc["errors"] = {
                "object": "list",
                "data": [{"code": code, "message": message, "param": None, "line": None}],
            }
        doc.update(status="failed", failed_at=int(time.time()))
        self.batches.save(doc)

    async def _send(self, line: Line, owner: str | None, batch_id: str) -> tuple[bool, dict[str, Any]] | None:
        """One request through the front door: (answered 2xx, the output or error file's record). A busy answer
        (429, or a 503 or 529 with Retry-After: the model's slots stayed taken, a rate limit, an engine held back;
        not a 503 for a feature the model's lane lacks, which stays so) is retried after a pause, up to ``RETRIES``
        times: a batch waits for capacity rather than failing for it. Once the batch is being cancelled a busy
        answer means the request never ran: None, as for the requests the cancel kept from being sent."""
        record: dict[str, Any] = {"id": new_id("batch_req"), "custom_id": line.custom_id, "response": None,
                                  "error": None}  # fmt: skip
        for attempt in range(RETRIES + 1):
            secret = self._secret(owner)
            why = self._unrunnable(owner, secret)
            if why is not None:
                record["error"] = {"code": "key_removed", "message": why}
                return False, record
            headers = {"content-type": "application/json", "x-blazar-priority": "low"}
            if secret is not None:
                headers["authorization"] = f"Bearer {secret}"
            try:
                async with self.sup.http.post(
                    self.base_url + line.url,
                    data=orjson.dumps(line.body),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECS),
                ) as r:
                    raw = await r.read()
                    status, trace, retry_after = (
                        r.status,
                        r.headers.get("x-blazar-trace-id", ""),
                        r.headers.get("retry-after"),
                    )
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                record["error"] = {
                    "code": "server_error",
                    "message": f"the request got no answer: {e or type(e).__name__}",
                }
                return False, record
            busy = status == 429 or (status in (503, 529) and retry_after is not None)
            if busy and attempt < RETRIES and not _too_far(retry_after):
                if batch_id in self.cancelling:
                    return None
                await asyncio.sleep(_pause(retry_after, attempt))
                continue
            break
        body: Any = raw.decode("utf-8", "replace")
        with contextlib.suppress(orjson.JSONDecodeError):
            body = orjson.loads(raw)
        record["response"] = {"status_code": status, "request_id": trace, "body": body}
        return 200 <= status < 300, record


def _files(out: list[bytes], errs: list[bytes]) -> list[tuple[str, list[bytes]]]:
    """The result files a batch has records for: (its id's field in the batch object, the records)."""
    return [(key, records) for key, records in (("output_file_id", out), ("error_file_id", errs)) if records]


def _too_far(retry_after: str | None) -> bool:
    """Whether a busy answer asks for a wait past ``RETRY_FAR_SECS``."""
    with contextlib.suppress(TypeError, ValueError):
        return float(retry_after) > RETRY_FAR_SECS  # type: ignore[arg-type]
    return False


def _pause(retry_after: str | None, attempt: int) -> float:
    """Seconds before retrying a busy answer: its ``Retry-After`` when it gives one, else 1, 2, 4 ... 30."""
    with contextlib.suppress(TypeError, ValueError):
        return min(max(float(retry_after), 0.5), RETRY_MAX_SECS)  # type: ignore[arg-type]
    return float(min(2**attempt, RETRY_MAX_SECS))
