"""`blazar bench MODEL`: how fast a model runs behind the daemon, recorded in the catalog's ``bench_history``.

Each run streams one chat completion through the running daemon (so it measures what a client gets: the engine
and Blazar's own path): a prompt of about ``--prompt-tokens`` tokens, made different per run so no prompt cache
serves it, and ``--gen-tokens`` tokens generated with the end-of-text token ignored. It reports the median over
``--runs`` of the prompt speed and generation speed (llama-server's own ``timings`` when the engine sends them,
else what the client saw) and the time to the first token, writes one ``bench_history`` row, and prints the
previous row for the same model and engine beside it.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Annotated, Any

import httpx
import orjson
import typer

from blazar.catalog import names
from blazar.catalog.models import Catalog
from blazar.cli.client import ApiKey, DaemonError, Host, Port, address, client, error_text, unreachable
from blazar.cli.common import console, handles_errors, opened
from blazar.dialects.canonical import MAX_TOKENS
from blazar.engines import registry
from blazar.engines.lanes import serving_lane
from blazar.errors import BlazarError
from blazar.paths import DataDir
from blazar.store import Store, utc_now_iso
from blazar.supervisor.remotes import Remotes

SENTENCE = "The quick brown fox jumps over the lazy dog. "
SENTENCE_TOKENS = 10
"""About how many tokens ``SENTENCE`` is for common tokenizers; the engine's count is what gets reported."""


@dataclass(frozen=True, slots=True)
class Run:
    prompt_tokens: int
    gen_tokens: int
    prompt_tps: float
    gen_tps: float
    ttft_ms: float


def _prompt(tokens: int, run: int) -> str:
    # the run number first: no two runs share a cached prefix
    return f"Run {run}. " + SENTENCE * max(1, tokens // SENTENCE_TOKENS) + "Now write a long story."


def one_run(c: httpx.Client, model: str, prompt_tokens: int, gen_tokens: int, run: int) -> Run:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": _prompt(prompt_tokens, run)}],
        "max_tokens": gen_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    first: float | None = None
    chunks = 0
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    try:
        with c.stream("POST", "/v1/chat/completions", content=orjson.dumps(body)) as r:
            if r.status_code >= 400:
                raise DaemonError(error_text(r.read(), r.status_code))
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                try:
                    chunk = orjson.loads(line[6:])
                except orjson.JSONDecodeError:
                    chunk = None
                if not isinstance(chunk, dict):
                    raise DaemonError(
                        f"the server at {str(c.base_url).rstrip('/')} did not stream as a Blazar daemon; check"
                        " --host and --port"
                    )
                if chunk.get("error"):
                    raise DaemonError(error_text(line[6:].encode(), 500))
                for choice in chunk.get("choices") or ():
                    if (choice.get("delta") or {}).get("content"):
                        chunks += 1
                        if first is None:
                            first = time.perf_counter()
                usage = chunk.get("usage") or usage
                timings = chunk.get("timings") or timings
    except httpx.TransportError as e:
        raise unreachable(str(c.base_url).rstrip("/"), e) from None
    end = time.perf_counter()
    if first is None:
        raise DaemonError(f"'{model}' streamed no text; check the model with: blazar run {model} hi")
    ttft = first - t0
    n_prompt = int(usage.get("prompt_tokens") or 0)
    n_gen = int(usage.get("completion_tokens") or chunks)
    prompt_tps = float(timings.get("prompt_per_second") or (n_prompt / ttft if ttft > 0 else 0.0))
    gen_tps = float(
        timings.get("predicted_per_second") or ((chunks - 1) / (end - first) if end > first else 0.0)
    )
    return Run(n_prompt, n_gen, prompt_tps, gen_tps, ttft * 1000)


def _engine(model: str, cfg: Any, data: DataDir, store: Store) -> tuple[str, str | None]:
    """(engine kind, tag) that serves ``model``, as the daemon routes it (the same config and catalog: a catalog
    model of the exact name wins over a remote)."""
    catalog = Catalog(store, data)
    hit = Remotes(cfg.remotes).route(model)
    if hit is not None:
        try:
            local = catalog.find(model)
        except BlazarError:  # "remote:a:b" is no catalog name
            local = None
        if local is None:
            return "remote", hit[0].name
    try:
        row = serving_lane(cfg, catalog.get(model), registry.list_all(store))
    except BlazarError:
        return "unknown", None
    return row.kind, row.tag


def _previous(store: Store, model: str, kind: str, tag: str | None) -> dict[str, Any] | None:
    row = store.conn.execute(
        "SELECT prompt_tps, gen_tps, ttft_ms, created_at FROM bench_history"
        " WHERE model = ? AND engine_kind = ? AND engine_tag IS ? ORDER BY id DESC LIMIT 1",
        (model, kind, tag),
    ).fetchone()
    if row is None:
        return None
    return {"prompt_tps": row[0], "gen_tps": row[1], "ttft_ms": row[2], "created_at": row[3]}


@handles_errors
def bench_cmd(
    model: Annotated[
        str, typer.Argument(help="Model to measure, as `blazar ls` names it (or remote:model).")
    ],
    prompt_tokens: Annotated[
        int, typer.Option(help="About how many tokens each prompt has.", min=1, max=1_000_000)
    ] = 512,
    gen_tokens: Annotated[int, typer.Option(help="Tokens to generate per run.", min=1, max=MAX_TOKENS)] = 128,
    runs: Annotated[int, typer.Option(help="Runs to take the median of.", min=1, max=100)] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    host: Host = None,
    port: Port = None,
    api_key: ApiKey = None,
) -> None:
    """Measure a model through the running daemon: prompt and generation speed, time to first token; the result
    goes to the catalog's bench history, next to the previous one."""
    url = address(host, port)
    full = model if ":" in model and model.partition(":")[0] else names.normalize(model)
    with client(url, api_key, timeout=httpx.Timeout(600.0, connect=10.0)) as c:
        if not as_json:
            console.print(f"warming up {full} ...", highlight=False)
        one_run(c, full, 8, 1, 0)  # the engine loaded, so no run measures its start
        measured = [one_run(c, full, prompt_tokens, gen_tokens, i + 1) for i in range(runs)]
    result = Run(
        int(statistics.median(r.prompt_tokens for r in measured)),
        int(statistics.median(r.gen_tokens for r in measured)),
        statistics.median(r.prompt_tps for r in measured),
        statistics.median(r.gen_tps for r in measured),
        statistics.median(r.ttft_ms for r in measured),
    )
    with opened() as (cfg, data, store):
        kind, tag = _engine(full, cfg, data, store)
        before = _previous(store, full, kind, tag)
        with store.conn:
            store.conn.execute(
                "INSERT INTO bench_history (model, engine_kind, engine_tag, prompt_tps, gen_tps, ttft_ms,"
                " created_at, notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (full, kind, tag, result.prompt_tps, result.gen_tps, result.ttft_ms, utc_now_iso(),
                 f"prompt {result.prompt_tokens} tokens, {result.gen_tokens} generated, median of {runs}"),
            )  # fmt: skip
    if as_json:
        out = {"model": full, "engine": kind, "tag": tag, **asdict(result), "runs": runs, "previous": before}
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    engine = f"{kind} {tag}" if tag else kind
    console.print(f"{full} on {engine}, median of {runs} run(s):", highlight=False)
    console.print(
        f"  prompt      {result.prompt_tokens:>6} tokens  {result.prompt_tps:>9.1f} tok/s", highlight=False
    )
    console.print(
        f"  generation  {result.gen_tokens:>6} tokens  {result.gen_tps:>9.1f} tok/s", highlight=False
    )
    console.print(f"  first token {result.ttft_ms:>13.0f} ms", highlight=False)
    if before is not None:
        console.print(
            f"  previous ({before['created_at']}): prompt {before['prompt_tps']:.1f} tok/s, generation"
            f" {before['gen_tps']:.1f} tok/s, first token {before['ttft_ms']:.0f} ms",
            highlight=False,
        )
