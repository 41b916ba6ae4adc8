"""End to end: OpenAI's audio transcriptions on the whisper lane, with the official ``openai`` client, through a
real `blazar serve` to a real `whisper-server` built from whisper.cpp's source, with Whisper tiny.en and the
spoken sample whisper.cpp ships (JFK's "ask not what your country can do for you")."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest
from openai.types.audio import TranscriptionVerbose

from tests.conftest import HANG, Daemon, WhisperAssets, closing, wait_for

pytestmark = pytest.mark.e2e

WORDS = "ask not what your country can do for you"


@pytest.fixture
def d(daemon_factory: object, whisper_assets: WhisperAssets) -> Daemon:
    assert callable(daemon_factory)
    daemon: Daemon = daemon_factory(
        'whisper_idle_secs = 3\n[models."smollm2:latest"]\nextra_args = ["--no-cache-prompt"]\n'
    )
    daemon.cli("engine", "add", "--kind", "whisper", "--path", str(whisper_assets.server))
    imported = daemon.cli("import", str(whisper_assets.model), "--name", "whisper-tiny")
    assert "imported whisper-tiny:latest" in imported.stdout and "F16" in imported.stdout
    return daemon


def test_transcriptions_in_every_format(d: Daemon, whisper_assets: WhisperAssets) -> None:
    client = closing(openai.OpenAI(base_url=d.url + "/v1", api_key="none", max_retries=0, timeout=120))
    with whisper_assets.sample.open("rb") as f:
        out = client.audio.transcriptions.create(model="whisper-tiny", file=f)
    assert WORDS in out.text.lower() and not out.text.startswith(" ") and "\n" not in out.text
    with whisper_assets.sample.open("rb") as f:
        text = client.audio.transcriptions.create(model="whisper-tiny", file=f, response_format="text")
    assert WORDS in str(text).lower()
    with whisper_assets.sample.open("rb") as f:
        verbose = client.audio.transcriptions.create(
            model="whisper-tiny", file=f, response_format="verbose_json", language="en", temperature=0
        )
    assert WORDS in verbose.text.lower() and verbose.segments and verbose.duration and verbose.duration > 10
    # OpenAI's shape, every field its types require (the SDK builds the object without checking them)
    checked = TranscriptionVerbose.model_validate(verbose.model_dump())
    assert checked.segments and all(seg.seek == 0 and seg.compression_ratio > 0 for seg in checked.segments)
    assert checked.usage is not None and checked.usage.seconds == 11 and checked.words is None
    with whisper_assets.sample.open("rb") as f:
        timed = client.audio.transcriptions.create(
            model="whisper-tiny",
            file=f,
            response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
        )
    words = TranscriptionVerbose.model_validate(timed.model_dump()).words
    assert words and [w.word for w in words[:3]] == ["And", "so", "my"], words
    assert all(w.start <= w.end for w in words) and timed.segments
    wrong = httpx.post(
        d.url + "/v1/audio/transcriptions",
        files={"file": ("jfk.wav", whisper_assets.sample.read_bytes(), "audio/wav")},
        data={"model": "whisper-tiny", "timestamp_granularities[]": "word"},
        timeout=120,
    )
    assert (
        wrong.status_code == 400
        and "needs response_format 'verbose_json'" in wrong.json()["error"]["message"]
    )
    # tiny.en hears English whatever language says, and has nothing to translate: both noted
    audio = {"file": ("jfk.wav", whisper_assets.sample.read_bytes(), "audio/wav")}
    url = d.url + "/v1/audio/transcriptions"
    french = httpx.post(url, files=audio, data={"model": "whisper-tiny", "language": "fr"}, timeout=120)
    assert french.status_code == 200 and WORDS in french.json()["text"].lower()
    noted = french.headers["x-blazar-ignored"]
    assert "language 'fr': 'whisper-tiny:latest' is an English-only model (tiny.en)" in noted, noted
    translated = httpx.post(
        d.url + "/v1/audio/translations", files=audio, data={"model": "whisper-tiny"}, timeout=120
    )
    assert translated.status_code == 200 and WORDS in translated.json()["text"].lower()
    assert (
        "translation: 'whisper-tiny:latest' is an English-only model"
        in translated.headers["x-blazar-ignored"]
    )
    plain = httpx.post(url, files=audio, data={"model": "whisper-tiny"}, timeout=120)
    assert "x-blazar-ignored" not in plain.headers
    for fmt, mark in (("srt", "-->"), ("vtt", "WEBVTT")):
        r = httpx.post(
            d.url + "/v1/audio/transcriptions",
            files={"file": ("jfk.wav", whisper_assets.sample.read_bytes(), "audio/wav")},
            data={"model": "whisper-tiny", "response_format": fmt},
            timeout=120,
        )
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain") and mark in r.text
        # the transcription is the engine's time: what Blazar itself spent is a small part of the request's
        assert float(r.headers["x-blazar-overhead-ms"]) < r.elapsed.total_seconds() * 1000 / 2, r.headers
    tags = {m["name"]: m for m in httpx.get(d.url + "/api/tags").json()["models"]}
    assert tags["whisper-tiny:latest"]["details"]["format"] == "whisper"
    show = httpx.post(d.url + "/api/show", json={"model": "whisper-tiny"}).json()
    assert show["model_info"]["whisper.size"] == "tiny.en" and show["capabilities"] == ["audio"]
    ps = httpx.get(d.url + "/api/ps").json()["models"]
    assert "whisper-tiny:latest" in {m["name"] for m in ps}

    def loaded() -> set[str]:
        return {m["name"] for m in httpx.get(d.url + "/api/ps").json()["models"]}

    wait_for(
        lambda: "whisper-tiny:latest" not in loaded(),
        HANG,
        "whisper_idle_secs to stop the idle whisper-server",
    )


def test_what_the_whisper_lane_refuses(d: Daemon, whisper_assets: WhisperAssets, tmp_path: Path) -> None:
    def post(files: dict[str, object] | None, data: dict[str, str]) -> httpx.Response:
        return httpx.post(d.url + "/v1/audio/transcriptions", files=files, data=data, timeout=120)

    audio = {"file": ("jfk.wav", whisper_assets.sample.read_bytes(), "audio/wav")}
    r = post(
        {"file": ("notes.wav", b"this is not audio at all" * 40, "audio/wav")}, {"model": "whisper-tiny"}
    )
    assert r.status_code == 400 and "the audio could not be read" in r.json()["error"]["message"]
    r = post(None, {"model": "whisper-tiny"})
    assert r.status_code == 400 and "multipart/form-data" in r.json()["error"]["message"]
    r = post(audio, {})
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("'model' is required")
    r = post(audio, {"model": "whisper-tiny", "response_format": "mp3"})
    assert r.status_code == 400 and "'response_format' must be one of" in r.json()["error"]["message"]
    r = post(audio, {"model": "whisper-tiny", "temperature": "hot"})
    assert r.status_code == 400 and "'temperature' must be a number" in r.json()["error"]["message"]
    r = post(audio, {"model": "whisper-tiny", "language": "zz"})
    assert r.status_code == 400 and "an ISO-639-1 code Whisper knows" in r.json()["error"]["message"]
    r = post(audio, {"model": "whisper-tiny", "prompt": "hello " * 1000})
    assert r.status_code == 400 and "Whisper reads at most 224 tokens" in r.json()["error"]["message"]
    r = post(audio, {"model": "no-such-model"})
    assert r.status_code == 404
    r = post(audio, {"model": "smollm2"})
    assert r.status_code == 400 and "is not a whisper.cpp model" in r.json()["error"]["message"]
    chat = httpx.post(
        d.url + "/v1/chat/completions",
        json={"model": "whisper-tiny", "messages": [{"role": "user", "content": "hi"}]},
        timeout=120,
    )
    assert chat.status_code == 400 and "is a whisper.cpp speech model" in chat.json()["error"]["message"]
    r = httpx.post(d.url + "/v1/embeddings", json={"model": "whisper-tiny", "input": "x"}, timeout=60)
    assert r.status_code == 400 and "is a whisper.cpp speech model" in r.json()["error"]["message"]
    # none of those refusals started an engine: only the transcriptions above did
    assert {m["name"] for m in httpx.get(d.url + "/api/ps").json()["models"]} <= {"whisper-tiny:latest"}
    # the engine still answers after all that
    ok = post(audio, {"model": "whisper-tiny"})
    assert ok.status_code == 200 and WORDS in ok.json()["text"].lower()


SCOPED = "sk-audio-scoped-0123456789abcdef0123456"
FULL = "sk-audio-full-0123456789abcdef012345678"


def test_a_scoped_key_learns_nothing_of_the_models_outside_it(
    daemon_factory: object, whisper_assets: WhisperAssets
) -> None:
    assert callable(daemon_factory)
    keys = (
        f'[[keys]]\nname = "full"\nsecret = "{FULL}"\n\n'
        f'[[keys]]\nname = "scoped"\nsecret = "{SCOPED}"\nmodels = ["smollm2:latest"]\n'
    )
    d: Daemon = daemon_factory(keys, start=False)
    d.cli("engine", "add", "--kind", "whisper", "--path", str(whisper_assets.server))
    d.cli("import", str(whisper_assets.model), "--name", "whisper-tiny")
    d.start()
    auth = {"authorization": f"Bearer {SCOPED}"}
    chat = httpx.post(
        d.url + "/v1/chat/completions",
        json={"model": "whisper-tiny", "messages": [{"role": "user", "content": "hi"}]},
        headers=auth,
        timeout=60,
    )
    assert chat.status_code == 403, chat.text  # not a 400 that says what whisper-tiny is
    r = httpx.post(
        d.url + "/v1/audio/transcriptions",
        files={"file": ("jfk.wav", whisper_assets.sample.read_bytes(), "audio/wav")},
        data={"model": "whisper-tiny"},
        headers=auth,
        timeout=60,
    )
    assert r.status_code == 403, r.text
    assert d.child_pids() == []
