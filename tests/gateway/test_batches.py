"""The Batch API's pieces that need no daemon: reading a batch input, a multipart upload, file and batch rows
with their owners, and the id routes (the whole flow runs in tests/e2e/test_batches.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import httpx
import orjson
import pytest

from blazar.batches.store import MAX_LINES, BatchError, Batches, Files, new_batch, read_input
from blazar.config import Config, load_config_text
from blazar.gateway.app import _route
from blazar.gateway.batch import (
    BatchRunner,
    _pause,
    _too_far,
    batch_cancel,
    batch_item,
    file_content,
    file_item,
)
from blazar.gateway.http import MAX_PARTS, HttpError, parse_multipart
from blazar.paths import DataDir
from blazar.store import Store
from blazar.tenancy.keys import KeyRegistry

EP = "/v1/chat/completions"


def line(custom_id: object = "a", **over: object) -> bytes:
    obj = {
        "custom_id": custom_id,
        "method": "POST",
        "url": EP,
        "body": {"model": "m", "messages": []},
        **over,
    }
    return orjson.dumps(obj)


def test_read_input_takes_good_lines_and_names_each_bad_one() -> None:
    data = b"\n".join([line("a"), b"", line("b"), b"[1]", b"{oops", line("a"), line("c", method="GET"),
                       line("d", url="/v1/embeddings"), line("e", body=[1]), line(""), line("f", body={"stream": True})])  # fmt: skip
    lines, errors = read_input(data, EP)
    assert [x.custom_id for x in lines] == ["a", "b"] and lines[0].body == {"model": "m", "messages": []}
    assert [(e["line"], e["code"]) for e in errors] == [
        (4, "invalid_request"), (5, "invalid_json_line"), (6, "duplicate_custom_id"), (7, "invalid_method"),
        (8, "mismatched_url"), (9, "invalid_request"), (10, "missing_required_parameter"), (11, "invalid_request"),
    ]  # fmt: skip
    assert read_input(b"\n\n", EP) == ([], [{"code": "empty_file", "message": "the input file holds no request",
                                             "param": None, "line": 0}])  # fmt: skip
    many = b"\n".join(line(str(i)) for i in range(MAX_LINES + 1))
    assert read_input(many, EP)[1][0]["code"] == "too_many_requests"
    # JSON orjson can read (1,024 levels) but not write (254): it could never be sent, so the line is refused
    deep = b'{"custom_id": "deep", "method": "POST", "url": "%s", "body": {"model": "m", "x": %s0%s}}' % (
        EP.encode(),
        b"[" * 300,
        b"]" * 300,
    )
    _lines, [err] = read_input(deep, EP)
    assert err["code"] == "invalid_request" and "nested deeper than 254 levels" in err["message"]


def parse_form(content_type: str | None, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    return parse_multipart(content_type, body, "the fields 'file' and 'purpose'")


def test_a_multipart_upload_as_clients_send_it() -> None:
    req = httpx.Request("POST", "http://x/v1/files", files={"file": ("in.jsonl", b'{"a": 1}\r\n{"b": 2}\n')},
                        data={"purpose": "batch"})  # fmt: skip
    fields = parse_form(req.headers["content-type"], req.read())
    assert fields["file"] == ("in.jsonl", b'{"a": 1}\r\n{"b": 2}\n')  # the bytes exactly, line ends included
    assert fields["purpose"] == (None, b"batch")
    # a repeated array field (the openai SDK sends one part per value) is its values joined; any other repeated
    # field is its first
    arr = httpx.Request(
        "POST",
        "http://x/v1/audio/transcriptions",
        files={"file": ("a.wav", b"RIFF")},
        data={"timestamp_granularities[]": ["word", "segment"], "model": ["m1", "m2"]},
    )
    got = parse_form(arr.headers["content-type"], arr.read())
    assert got["timestamp_granularities[]"] == (None, b"word,segment") and got["model"] == (None, b"m1")
    big = b'{"custom_id": "x"}\r\n--\r\n' * 1_500_000  # 30 MB, dashes and line ends inside
    req_big = httpx.Request(
        "POST", "http://x/v1/files", files={"file": ("big.jsonl", big)}, data={"purpose": "batch"}
    )
    assert parse_form(req_big.headers["content-type"], req_big.read())["file"] == ("big.jsonl", big)
    for content_type, body in (("application/json", b"{}"), (None, b""), ("multipart/form-data", b"x")):
        with pytest.raises(HttpError, match="multipart/form-data"):
            parse_form(content_type, body)
    whole = req.read()
    with pytest.raises(HttpError, match="is it complete"):  # cut off before its closing boundary
        parse_form(req.headers["content-type"], whole[: whole.rindex(b"--")])
    nested = (b'--B\r\nContent-Disposition: form-data; name="file"\r\nContent-Type: multipart/mixed; boundary=C\r\n\r\n'
              b"--C\r\n\r\nx\r\n--C--\r\n--B--\r\n")  # fmt: skip
    with pytest.raises(HttpError, match="must hold a file"):
        parse_form("multipart/form-data; boundary=B", nested)
    part = b'--B\r\nContent-Disposition: form-data; name="f"\r\n\r\nx\r\n'
    assert parse_form("multipart/form-data; boundary=B", part * MAX_PARTS + b"--B--\r\n") == {
        "f": (None, b"x")
    }
    with pytest.raises(HttpError, match=f"more than {MAX_PARTS} parts"):  # each head is parsed: bounded
        parse_form("multipart/form-data; boundary=B", part * (MAX_PARTS + 1) + b"--B--\r\n")


def test_a_busy_answer_is_retried_after_its_retry_after_or_a_growing_pause() -> None:
    assert [_pause(None, n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert (_pause("3", 0), _pause("0", 5), _pause("9999", 0), _pause("soon", 2)) == (3.0, 0.5, 30.0, 4.0)
    # a wait of hours (a key's daily_tokens) is not waited for: that request's answer stands
    assert [_too_far(v) for v in ("60", "300", "301", "23692", None, "soon")] == [
        False,
        False,
        True,
        True,
        False,
        False,
    ]


def test_files_and_batches_belong_to_the_key_that_made_them(tmp_path: Path) -> None:
    with Store.open(tmp_path / "blazar.db") as store:
        files = Files(store, tmp_path / "files")
        row = files.add("k1", "in.jsonl", "batch", b"data")
        assert (files.root / row.id).stat().st_mode & 0o777 == 0o600
        assert files.get(row.id, "k1") == row == files.get(row.id, None)  # no auth: every file is visible
        with pytest.raises(BatchError, match="no file"):
            files.get(row.id, "k2")
        assert [f.id for f in files.listing("k1", "batch")] == [row.id] and files.listing("k2", None) == []
        batches = Batches(store)
        doc = new_batch(row.id, EP, None)
        batches.add("k1", doc)
        assert batches.get(doc["id"], "k1") == ("k1", doc) and batches.active() == [doc["id"]]
        with pytest.raises(BatchError, match="no batch"):
            batches.get(doc["id"], "k2")
        batches.save({**doc, "status": "completed"})
        assert batches.active() == [] and batches.listing("k2") == []
        files.delete(row)
        assert not (files.root / row.id).exists()


def test_id_routes() -> None:
    for path, handler in (("/v1/files/file-1", file_item), ("/v1/files/file-1/content", file_content),
                          ("/v1/batches/b-1", batch_item), ("/v1/batches/b-1/cancel", batch_cancel)):  # fmt: skip
        route = _route(path)
        assert route is not None and handler in route.methods.values(), path
    for path in (
        "/v1/files/",
        "/v1/files/a/b",
        "/v1/batches//cancel",
        "/v1/filesx",
        "/v1/batches/a/b/cancel",
    ):
        assert _route(path) is None, path


def test_a_batch_runs_only_under_a_key_that_exists_now(tmp_path: Path) -> None:
    secret = "sk-batch-unit-0123456789abcdef0123456789ab"
    cfg = load_config_text(f'[[keys]]\nname = "a"\nsecret = "{secret}"\n', tmp_path / "config.toml", env={})
    keys = KeyRegistry(cfg)
    with Store.open(tmp_path / "blazar.db") as store:
        runner = BatchRunner(SimpleNamespace(data=DataDir(tmp_path), cfg=cfg), store, keys)  # type: ignore[arg-type]
        assert runner.base_url == f"http://127.0.0.1:{cfg.port}"
        assert runner._unrunnable("a", runner._secret("a")) is None and runner._secret("a") == secret
        gone = runner._unrunnable("gone", runner._secret("gone"))
        assert "the key 'gone' that made this batch no longer exists" in str(gone)
        assert "made while auth was off" in str(runner._unrunnable(None, None))  # and keys exist now
        keys.apply(Config(data_dir=tmp_path))  # auth off again
        assert runner._unrunnable(None, None) is None and runner._secret(None) is None


def test_a_busy_answer_once_the_batch_is_cancelled_means_the_request_never_ran(tmp_path: Path) -> None:
    """While a batch is cancelled, a request answered busy (429, or 503 with Retry-After: it never ran) is not
    retried and goes to neither file (Anthropic's results call it canceled); any other answer stands."""
    from aiohttp import web

    async def scenario() -> None:
        answers = {"busy": 503, "bad": 400, "lane": 503}

        async def handler(request: web.Request) -> web.Response:
            kind = (await request.json())["messages"][0]["content"]
            # busy says when to come back; a 503 for what the model's lane cannot do does not, and stands
            headers = {"retry-after": "1"} if kind == "busy" else {}
            return web.json_response({"error": {"message": kind}}, status=answers[kind], headers=headers)

        app = web.Application()
        app.router.add_post(EP, handler)
        runner_ = web.AppRunner(app)
        await runner_.setup()
        site = web.TCPSite(runner_, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        cfg = load_config_text(f"port = {port}\n", tmp_path / "config.toml", env={})
        import aiohttp

        async with aiohttp.ClientSession() as http:
            with Store.open(tmp_path / "blazar.db") as store:
                sup = SimpleNamespace(data=DataDir(tmp_path), cfg=cfg, http=http)
                batches = BatchRunner(sup, store, KeyRegistry(cfg))  # type: ignore[arg-type]
                body = {"model": "m", "messages": [{"role": "user", "content": "busy"}]}
                busy = read_input(line(body=body), EP)[0][0]
                bad = read_input(line(body={**body, "messages": [{"role": "user", "content": "bad"}]}), EP)[
                    0
                ][0]
                batches.cancelling.add("b1")
                assert await batches._send(busy, None, "b1") is None
                sent = await batches._send(bad, None, "b1")
                assert sent is not None and sent[0] is False and sent[1]["response"]["status_code"] == 400
                lane = read_input(line(body={**body, "messages": [{"role": "user", "content": "lane"}]}), EP)
                stood = await batches._send(lane[0][0], None, "b1")
                assert stood is not None and stood[1]["response"]["status_code"] == 503
        await runner_.cleanup()

    asyncio.run(scenario())
