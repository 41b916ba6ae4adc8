"""Anthropic's Message Batches API over the batch runner that serves OpenAI's Batch API.

Routes: ``/v1/messages/batches`` (POST create, GET list), ``/v1/messages/batches/{id}`` (GET, DELETE),
``/v1/messages/batches/{id}/cancel`` (POST), ``/v1/messages/batches/{id}/results`` (GET, JSONL). A create's
``requests`` (``custom_id`` + the ``params`` of a ``POST /v1/messages``) are written as the owner's input file
(an OpenAI batch input of ``/v1/messages`` lines, ``<id>_input.jsonl``) and run by ``BatchRunner`` exactly as an
OpenAI batch is: through this daemon's front door under the key that made it, at low priority, four at a time.
A request that fails is that request's ``errored`` result, as in Anthropic's API; only the shape of the create,
of the batch object (``processing_status``, ``request_counts``, RFC 3339 times, ``results_url``) and of the
results differ, and they are made here from the stored OpenAI batch object and its output and error files.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

import orjson

from blazar.batches.store import MAX_LINES, BatchError, FileRow, new_batch
from blazar.gateway.batch import BatchRunner, key_name, runner_of, sees_unowned
from blazar.gateway.http import JSON_HEADERS, HttpError, Request
from blazar.supervisor import Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]

MESSAGE_BATCHES = "/v1/messages/batches"
KIND = "msgbatch"
ENDPOINT = "/v1/messages"
MAX_REQUESTS = min(100_000, MAX_LINES)
"""Anthropic takes 100,000 requests a batch; the runner's bound is OpenAI's 50,000."""

_CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENDED = ("completed", "failed", "cancelled", "expired")


def _time(ts: int | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def message_batch(doc: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic ``message_batch`` object for a stored batch."""
    status = doc["status"]
    ended = status in _ENDED
    counts = doc["request_counts"]
    succeeded, errored = counts["completed"], counts["failed"]
    left = max(counts["total"] - succeeded - errored, 0)
    out = {"processing": 0, "succeeded": succeeded, "errored": errored, "canceled": 0, "expired": 0}
    if not ended:
        out["processing"] = left
    elif status == "cancelled":
        out["canceled"] = left
    elif status == "expired":
        out["expired"] = left
    elif status == "failed":  # it could not run (its key is gone...): every request not answered errored
        out["errored"] += left
    end = doc.get("completed_at") or doc.get("cancelled_at") or doc.get("failed_at") or doc.get("expired_at")
    return {
        "id": doc["id"],
        "type": "message_batch",
        "processing_status": "ended" if ended else "canceling" if status == "cancelling" else "in_progress",
        "request_counts": out,
        "created_at": _time(doc["created_at"]),
        "expires_at": _time(doc["expires_at"]),
        "ended_at": _time(end) if ended else None,
        "cancel_initiated_at": _time(doc.get("cancelling_at")),
        "archived_at": None,
        "results_url": f"{MESSAGE_BATCHES}/{doc['id']}/results" if ended else None,
    }


def _json(value: Any) -> Response:
    return 200, JSON_HEADERS, orjson.dumps(value)


def _lines(requests: Any) -> bytes:
    """The create's ``requests`` as the runner's input JSONL; a 400 naming the first bad request."""
    if not isinstance(requests, list) or not requests:
        raise HttpError(400, "'requests' must be a non-empty array of {custom_id, params} objects")
    if len(requests) > MAX_REQUESTS:
        raise HttpError(
            400, f"a batch may hold at most {MAX_REQUESTS} requests; this one has {len(requests)}"
        )
    seen: set[str] = set()
    out = []
    for i, item in enumerate(requests):
        where = f"requests[{i}]"
        if not isinstance(item, dict):
            raise HttpError(400, f"{where} must be an object with 'custom_id' and 'params'")
        custom_id, params = item.get("custom_id"), item.get("params")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            raise HttpError(400, f"{where}.custom_id must be 1 to 64 letters, digits, '_' or '-'")
        if custom_id in seen:
            raise HttpError(400, f"{where}.custom_id '{custom_id}' is used by an earlier request")
        if not isinstance(params, dict):
            raise HttpError(400, f"{where}.params must be an object: the body of a POST /v1/messages")
        if params.get("stream") is True:
            raise HttpError(400, f"{where}.params.stream must not be true: a batch's answers are whole")
        seen.add(custom_id)
        out.append(orjson.dumps({"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": params}))
    return b"\n".join(out) + b"\n"


async def batches_root(sup: Supervisor, req: Request, proto: Any) -> Response:
    runner = runner_of(req)
    if req.method in ("GET", "HEAD"):  # a HEAD is the GET without its body
        return _page(
            req, [message_batch(d) for d in runner.batches.listing(key_name(req), sees_unowned(req), KIND)]
        )
    body = req.json_object()
    data = _lines(body.get("requests"))
    doc = new_batch("", ENDPOINT, None, KIND)
    row = await asyncio.to_thread(runner.files.add, key_name(req), f"{doc['id']}_input.jsonl", "batch", data)
    doc["input_file_id"] = row.id
    doc["request_counts"]["total"] = data.count(b"\n")
    runner.batches.add(key_name(req), doc)
    runner.submit(doc["id"])
    return _json(message_batch(doc))


def _page(req: Request, items: list[dict[str, Any]]) -> Response:
    """Anthropic's paging: newest first, ``limit`` (1-1000, default 20), ``after_id`` (older than) or
    ``before_id`` (newer than); ``has_more``, ``first_id``, ``last_id``."""
    query = parse_qs(req.query)
    try:
        limit = int(query.get("limit", ["20"])[0])
    except ValueError:
        limit = 0
    if not 1 <= limit <= 1000:
        raise HttpError(400, "'limit' must be an integer from 1 to 1000")
    ids = [item["id"] for item in items]
    after, before = query.get("after_id", [None])[0], query.get("before_id", [None])[0]
    if after is not None:
        items = items[ids.index(after) + 1 :] if after in ids else []
        more, page = len(items) > limit, items[:limit]
    elif before is not None:
        items = items[: ids.index(before)] if before in ids else []
        more, page = len(items) > limit, items[-limit:]
    else:
        more, page = len(items) > limit, items[:limit]
    return _json(
        {
            "data": page,
            "has_more": more,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        }
    )


def _batch_id(req: Request, suffix: str = "") -> str:
    return req.path[len(MESSAGE_BATCHES) + 1 : len(req.path) - len(suffix)]


async def batch_item(sup: Supervisor, req: Request, proto: Any) -> Response:
    runner = runner_of(req)
    _, doc = runner.batches.get(_batch_id(req), key_name(req), sees_unowned(req), KIND)
    if req.method == "DELETE":
        if doc["status"] not in _ENDED:
            raise HttpError(
                409,
                f"message batch '{doc['id']}' is still processing; cancel it, and delete it once it has ended",
            )
        for key in ("input_file_id", "output_file_id", "error_file_id"):
            if doc.get(key):
                with contextlib.suppress(BatchError):  # deleted through the Files API already
                    runner.files.delete(runner.files.get(doc[key], None))
        runner.batches.delete(doc["id"])
        return _json({"id": doc["id"], "type": "message_batch_deleted"})
    return _json(message_batch(doc))


async def batch_cancel(sup: Supervisor, req: Request, proto: Any) -> Response:
    runner = runner_of(req)
    _, doc = runner.batches.get(_batch_id(req, "/cancel"), key_name(req), sees_unowned(req), KIND)
    return _json(message_batch(runner.cancel(doc)))


async def batch_results(sup: Supervisor, req: Request, proto: Any) -> Response:
    runner = runner_of(req)
    _, doc = runner.batches.get(_batch_id(req, "/results"), key_name(req), sees_unowned(req), KIND)
    if doc["status"] not in _ENDED:
        raise HttpError(
            409, f"message batch '{doc['id']}' is still processing; its results_url is set once it has ended"
        )
    data = await asyncio.to_thread(_results, runner, doc)
    return 200, [("content-type", "application/x-jsonl")], data


def _records(runner: BatchRunner, file_id: str | None) -> dict[str, dict[str, Any]]:
    if not file_id:
        return {}
    try:
        raw = runner.files.read(runner.files.get(file_id, None))
    except BatchError:
        return {}
    out = {}
    for line in raw.splitlines():
        if line.strip():
            record = orjson.loads(line)
            out[record["custom_id"]] = record
    return out


def _error(record: dict[str, Any]) -> dict[str, Any]:
    """An errored request's result: the front door's Anthropic error body, or one made from the record."""
    body = (record.get("response") or {}).get("body")
    if isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict):
        return body
    err = record.get("error") or {}
    return {"type": "error", "error": {"type": "api_error", "message": str(err.get("message") or body)}}


def _results(runner: BatchRunner, doc: dict[str, Any]) -> bytes:
    """One line per request, in the order they were sent."""
    answered = _records(runner, doc.get("output_file_id"))
    failed = _records(runner, doc.get("error_file_id"))
    why = (doc.get("errors") or {}).get("data") or [{}]
    unrun: dict[str, Any] = {
        "cancelled": {"type": "canceled"},
        "expired": {"type": "expired"},
        "failed": {
            "type": "errored",
            "error": {
                "type": "error",
                "error": {"type": "api_error", "message": why[0].get("message") or "the batch could not run"},
            },
        },
    }
    try:
        row: FileRow = runner.files.get(doc["input_file_id"], None)
        inputs = runner.files.read(row)
    except BatchError:
        inputs = b""
    out = []
    for line in inputs.splitlines():
        if not line.strip():
            continue
        custom_id = orjson.loads(line)["custom_id"]
        if custom_id in answered:
            result: dict[str, Any] = {"type": "succeeded", "message": answered[custom_id]["response"]["body"]}
        elif custom_id in failed:
            result = {"type": "errored", "error": _error(failed[custom_id])}
        else:
            result = unrun.get(doc["status"], {"type": "canceled"})
        out.append(orjson.dumps({"custom_id": custom_id, "result": result}))
    return b"\n".join(out) + (b"\n" if out else b"")
