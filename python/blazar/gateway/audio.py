"""OpenAI's ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` on the whisper lane.

The client's multipart form (``file``, ``model``, ``response_format``, ``language``, ``prompt``, ``temperature``)
is checked here, claimed and admitted like any request for its model (scope, quotas, one transcription at a time
per engine), and sent to the model's ``whisper-server`` as the form that server reads (a translation adds its
``translate`` field). Its answer comes back in OpenAI's shapes: ``json`` is ``{"text": ...}`` with whisper's
segment breaks joined as OpenAI joins them, ``verbose_json`` is OpenAI's (segments with its fields, ``words`` for
``timestamp_granularities[]`` ``word``, ``usage``) made from whisper-server's, ``text``, ``srt`` and ``vtt`` are
plain text. Audio the engine cannot read is a 400 that says which
formats it reads.
"""

from __future__ import annotations

import asyncio
import secrets
import zlib
from typing import Any

import orjson

from blazar.catalog import ggml_whisper
from blazar.dialects.canonical import CanonicalRequest
from blazar.engines.argv import WHISPER_PATH
from blazar.gateway import proxy, routing
from blazar.gateway.exchange import Exchange
from blazar.gateway.http import JSON_HEADERS, HttpError, Request, parse_multipart
from blazar.supervisor import Child, Supervisor

Response = tuple[int, list[tuple[str, str]], bytes]

FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
LANGUAGES = frozenset((
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id", "hi",
    "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg", "lt", "la",
    "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy",
    "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be",
    "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue", "auto",
))  # fmt: skip
"""The languages Whisper knows (its tokenizer's language tokens), and ``auto``."""
MAX_PROMPT = 2000
"""Characters of ``prompt`` taken: Whisper reads only its last 224 tokens."""
_TEXT = [("content-type", "text/plain; charset=utf-8")]
_EXPECT = "the fields 'file' (the audio) and 'model'"


async def transcriptions(sup: Supervisor, req: Request, proto: Any) -> Response:
    return await _audio(sup, req, translate=False)


async def translations(sup: Supervisor, req: Request, proto: Any) -> Response:
    return await _audio(sup, req, translate=True)


def _field(fields: dict[str, tuple[str | None, bytes]], name: str, *, exact: bool = False) -> str | None:
    """A form field's text, trimmed unless ``exact`` (a model name is taken as given: ``names.check``)."""
    if name not in fields:
        return None
    try:
        text = fields[name][1].decode("utf-8")
        return text if exact else text.strip()
    except UnicodeDecodeError:
        raise HttpError(400, f"the form field '{name}' is not UTF-8 text") from None


async def _audio(sup: Supervisor, req: Request, translate: bool) -> Response:
    # a 50 MiB upload takes a while to split: not on the event loop
    fields = await asyncio.to_thread(parse_multipart, req.headers.get("content-type"), req.body, _EXPECT)
    if "file" not in fields or not fields["file"][1]:
        raise HttpError(
            400, f"'file' is required: the audio to transcribe (WAV, MP3 or FLAC); send {_EXPECT}"
        )
    model = _field(fields, "model", exact=True)
    if not model:
        raise HttpError(
            400, "'model' is required: a whisper.cpp model in the catalog (blazar import ggml-*.bin)"
        )
    fmt = _field(fields, "response_format") or "json"
    if fmt not in FORMATS:
        raise HttpError(400, f"'response_format' must be one of {', '.join(FORMATS)}, not '{fmt[:40]}'")
    granularities = _granularities(fields, fmt)
    if (_field(fields, "stream") or "false").lower() == "true":
        raise HttpError(400, "'stream' is not supported for whisper models: send it without stream")
    form: dict[str, str] = {"response_format": "verbose_json" if fmt == "json" else fmt}
    if form["response_format"] == "verbose_json":
        form["no_language_probabilities"] = (
            "true"  # else whisper-server runs a language detection pass for them
        )
    temperature = _field(fields, "temperature")
    if temperature:
        try:
            t = float(temperature)
        except ValueError:
            t = -1.0
        if not 0 <= t <= 1:
            raise HttpError(400, f"'temperature' must be a number from 0 to 1, not '{temperature[:40]}'")
        form["temperature"] = str(t)
    language = _field(fields, "language")
    if language:
        if language not in LANGUAGES:
            raise HttpError(
                400,
                '\'language\' must be an ISO-639-1 code Whisper knows, such as "en", "fr" or "zh" (or "auto"),'
                f" not '{language[:40]}'",
            )
        form["language"] = language
    prompt = _field(fields, "prompt")
    if prompt:
        if len(prompt) > MAX_PROMPT:
            raise HttpError(
                400,
                f"'prompt' is {len(prompt)} characters; Whisper reads at most 224 tokens of it: send up to {MAX_PROMPT}",
            )
        form["prompt"] = prompt
    if translate:
        form["translate"] = "true"
    canon = CanonicalRequest(model=model, kind="audio")
    ex = Exchange.claim(sup, req, canon, remote_checked=False)
    _note_english_only(sup, req, ex.name, language, translate)
    body, content_type = _multipart(fields["file"][0] or "audio.wav", fields["file"][1], form)

    async def transcribe(child: Child, _load_ns: int) -> bytes:
        ex.keep(child)
        try:  # the transcription is the engine's time, not Blazar's overhead
            _status, data, _ctype = await req.waiting(
                proxy.post_form(sup, child, WHISPER_PATH, body, content_type, req.client)
            )
        except HttpError as e:
            if e.status == 400 and e.message.strip() in ("Invalid request", ""):
                raise HttpError(
                    400, "the audio could not be read: send a WAV, MP3 or FLAC file as the form field 'file'"
                ) from None
            raise
        return data

    data = await ex.run(transcribe)
    if fmt in ("srt", "vtt"):
        return 200, _TEXT, data
    if fmt == "text":
        return 200, _TEXT, (_joined(data.decode("utf-8", "replace")) + "\n").encode()
    try:
        out = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise HttpError(502, "the whisper engine sent an answer that is not JSON", "engine_error") from None
    if not isinstance(out, dict) or not isinstance(out.get("text"), str):
        raise HttpError(502, "the whisper engine sent an answer without text", "engine_error")
    text = _joined(out["text"])
    if fmt == "json":
        reply: dict[str, Any] = {"text": text}
        duration = out.get("duration")
        if isinstance(duration, int | float):
            reply["usage"] = {"type": "duration", "seconds": max(1, round(duration))}
        return 200, JSON_HEADERS, orjson.dumps(reply)
    return 200, JSON_HEADERS, orjson.dumps(_verbose(out, text, granularities, translate))


def _note_english_only(
    sup: Supervisor, req: Request, name: str, language: str | None, translate: bool
) -> None:
    """An English-only model (``tiny.en``, ...) transcribes English whatever ``language`` says, and has nothing to
    translate: noted in ``x-blazar-ignored``."""
    row = sup.catalog.find(name)
    info = ggml_whisper.read(row.path) if row is not None else None
    if info is None or info.multilingual:
        return
    if language and language not in ("en", "auto"):
        routing.note_ignored(
            req,
            f"language '{language}': '{name}' is an English-only model ({info.size}), which hears English",
        )
    if translate:
        routing.note_ignored(
            req, f"translation: '{name}' is an English-only model ({info.size}), so it transcribes English"
        )


_GRANULARITIES = "timestamp_granularities[]"


def _granularities(fields: dict[str, tuple[str | None, bytes]], fmt: str) -> set[str]:
    """OpenAI's ``timestamp_granularities[]`` (``word``, ``segment``), which only ``verbose_json`` carries."""
    given = _field(fields, _GRANULARITIES) or _field(fields, "timestamp_granularities") or ""
    asked = {g.strip() for g in given.split(",") if g.strip()}
    if asked - {"word", "segment"}:
        raise HttpError(400, "'timestamp_granularities[]' takes 'word' and 'segment'")
    if asked and fmt != "verbose_json":
        raise HttpError(400, "'timestamp_granularities[]' needs response_format 'verbose_json'")
    return asked


def _verbose(out: dict[str, Any], text: str, granularities: set[str], translate: bool) -> dict[str, Any]:
    """whisper-server's verbose_json as OpenAI's: its segments with OpenAI's fields (``seek``, the 30 s window a
    segment was decoded in, in centiseconds; ``compression_ratio``, its text's gzip ratio, as Whisper computes
    it), ``words`` (word, start, end) when the client asked for word timestamps, and ``usage``."""
    segments = [s for s in out.get("segments") or [] if isinstance(s, dict)]
    reply: dict[str, Any] = {
        "task": "translate" if translate else "transcribe",
        "language": out.get("language"),
        "duration": out.get("duration"),
        "text": text,
        "segments": [_segment(s) for s in segments],
    }
    if "word" in granularities:
        reply["words"] = [
            {"word": w["word"].strip(), "start": w.get("start"), "end": w.get("end")}
            for s in segments
            for w in s.get("words") or []
            if isinstance(w, dict) and isinstance(w.get("word"), str) and w["word"].strip()
        ]
    duration = out.get("duration")
    if isinstance(duration, int | float):
        reply["usage"] = {"type": "duration", "seconds": max(1, round(duration))}
    return reply


def _segment(s: dict[str, Any]) -> dict[str, Any]:
    given, at = s.get("text"), s.get("start")
    text = given if isinstance(given, str) else ""
    start = float(at) if isinstance(at, int | float) else 0.0
    raw = text.encode()
    return {
        "id": s.get("id", 0),
        "seek": int(start // 30) * 3000,
        "start": start,
        "end": s.get("end", start),
        "text": text,
        "tokens": s.get("tokens") or [],
        "temperature": s.get("temperature", 0.0),
        "avg_logprob": s.get("avg_logprob", 0.0),
        "compression_ratio": len(raw) / len(zlib.compress(raw)) if raw else 0.0,
        "no_speech_prob": s.get("no_speech_prob", 0.0),
    }


def _joined(text: str) -> str:
    """whisper's transcript (a leading space, a line per segment) as OpenAI's: one line, words spaced once."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _multipart(filename: str, audio: bytes, form: dict[str, str]) -> tuple[bytes, str]:
    """whisper-server's form: the audio as ``file`` and the checked fields."""
    boundary = f"blazar-{secrets.token_hex(12)}"
    safe_name = filename.replace('"', "").replace("\r", "").replace("\n", "") or "audio.wav"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in form.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{safe_name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + audio
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"
