//! Tests of the translators over hand-written engine streams and the recorded llama-server
//! fixtures: each dialect's exact bytes, tool-call merging, engine errors, abnormal ends, pings,
//! chunk-boundary invariance, whole bodies, llama.cpp's `__verbose` stop word, and a seeded
//! randomized run over mangled streams.
//!
//! Owns Rust-side coverage; parity with the Python oracle is checked by pytest. It must not
//! start Python.

use super::clock::write_rfc3339;
use super::engine::EngineError;
use super::json::{minify_object, write_str};
use super::{translate_whole, Dialect, Options, Translator, WholeOptions, PING_AFTER_NS};

const DIALECTS: [Dialect; 5] =
    [Dialect::OpenAi, Dialect::OllamaChat, Dialect::OllamaGenerate, Dialect::Anthropic, Dialect::Responses];

const RECORDED: [(&str, &[u8]); 11] = [
    ("text", include_bytes!("../../../tests/fixtures/streams/text.sse")),
    ("max_tokens", include_bytes!("../../../tests/fixtures/streams/max_tokens.sse")),
    ("stop", include_bytes!("../../../tests/fixtures/streams/stop.sse")),
    ("stop_verbose", include_bytes!("../../../tests/fixtures/streams/stop_verbose.sse")),
    ("eos_verbose", include_bytes!("../../../tests/fixtures/streams/eos_verbose.sse")),
    ("progress", include_bytes!("../../../tests/fixtures/streams/progress.sse")),
    ("emoji", include_bytes!("../../../tests/fixtures/streams/emoji.sse")),
    ("cjk", include_bytes!("../../../tests/fixtures/streams/cjk.sse")),
    ("tool_call", include_bytes!("../../../tests/fixtures/streams/tool_call.sse")),
    ("tool_calls_parallel", include_bytes!("../../../tests/fixtures/streams/tool_calls_parallel.sse")),
    ("engine_error", include_bytes!("../../../tests/fixtures/streams/engine_error.sse")),
];

fn opts(dialect: Dialect) -> Options {
    Options {
        dialect,
        model: "m".to_owned(),
        include_usage: false,
        load_duration_ns: 5,
        message_id: Some("msg_1".to_owned()),
        prompt_tokens_hint: 3,
        redact: None,
        prefill: None,
        alternatives: true,
        forced_call: None,
        n: 1,
        echo: None,
    }
}

/// Feeds `pieces` at time 0 and finishes; the concatenated output.
fn run(dialect: Dialect, pieces: &[&[u8]]) -> (Vec<u8>, Translator) {
    let mut tr = Translator::new(opts(dialect), Some(0));
    let mut out = Vec::new();
    for piece in pieces {
        match tr.feed(piece, Some(0)) {
            Ok(bytes) => out.extend(bytes),
            Err(_) => break,
        }
    }
    out.extend(tr.finish(Some(0)));
    (out, tr)
}

fn text(out: &[u8]) -> &str {
    std::str::from_utf8(out).unwrap()
}

const HELLO: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"model\":\"engine\"}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi \\\"you\\\"\"}}],\"model\":\"engine\"}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"model\":\"engine\"}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2},\"model\":\"engine\"}\n\n\
data: [DONE]\n\n";

#[test]
fn openai_rewrites_model_and_drops_usage_chunk() {
    let (out, tr) = run(Dialect::OpenAi, &[HELLO]);
    assert_eq!(
        text(&out),
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"model\":\"m\"}\n\n\
         data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi \\\"you\\\"\"}}],\"model\":\"m\"}\n\n\
         data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"model\":\"m\"}\n\n\
         data: [DONE]\n\n"
    );
    let s = tr.summary();
    assert_eq!(s.text, "Hi \"you\"");
    assert_eq!(s.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((4, 2)));
    assert_eq!(s.chunks, 4);
}

#[test]
fn ollama_chat_exact_bytes() {
    let (out, _) = run(Dialect::OllamaChat, &[HELLO]);
    assert_eq!(
        text(&out),
        "{\"model\":\"m\",\"created_at\":\"1970-01-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi \\\"you\\\"\"},\"done\":false}\n\
         {\"model\":\"m\",\"created_at\":\"1970-01-01T00:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\
         \"total_duration\":5,\"load_duration\":5,\"prompt_eval_count\":4,\"prompt_eval_duration\":0,\"eval_count\":2,\"eval_duration\":0}\n"
    );
}

#[test]
fn anthropic_exact_bytes() {
    let (out, _) = run(Dialect::Anthropic, &[HELLO]);
    assert_eq!(
        text(&out),
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\
         \"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n\
         event: ping\ndata: {\"type\":\"ping\"}\n\n\
         event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
         event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi \\\"you\\\"\"}}\n\n\
         event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
         event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":4,\"output_tokens\":2}}\n\n\
         event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
    );
}

/// llama.cpp's `prompt_progress` chunks, as it sends them before the first token when asked.
const PROGRESS: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"model\":\"engine\",\"prompt_progress\":{\"total\":35,\"cache\":0,\"processed\":0,\"time_ms\":0}}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"model\":\"engine\",\"prompt_progress\":{\"total\":35,\"cache\":0,\"processed\":35,\"time_ms\":9}}\n\n";

#[test]
fn progress_starts_the_anthropic_message_with_the_prompt_size() {
    let mut tr = Translator::new(opts(Dialect::Anthropic), Some(0));
    let first = tr.feed(PROGRESS, Some(0)).unwrap();
    assert!(text(&first).starts_with("event: message_start\n"), "{}", text(&first));
    assert!(text(&first).contains("\"usage\":{\"input_tokens\":35,\"output_tokens\":0}"));
    let rest = tr.feed(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        Some(0),
    );
    let rest = [rest.unwrap(), tr.finish(Some(0))].concat();
    assert!(!text(&rest).contains("message_start"));
    // no usage from the engine: the final count is the progress report's, not the caller's hint
    assert!(text(&rest).contains("\"usage\":{\"input_tokens\":35,\"output_tokens\":0}"), "{}", text(&rest));
    assert_eq!(tr.summary().chunks, 1, "progress reports are not output chunks");
}

#[test]
fn progress_is_not_relayed_to_other_dialects() {
    for dialect in [Dialect::OpenAi, Dialect::OllamaChat, Dialect::OllamaGenerate] {
        let with = run(dialect, &[PROGRESS, HELLO]).0;
        assert_eq!(text(&with), text(&run(dialect, &[HELLO]).0), "{dialect:?}");
    }
}

#[test]
fn a_multi_prompt_separator_is_not_relayed_nor_an_error() {
    // llama-server writes `data: null` between the prompts of a multi-prompt completion stream
    for dialect in [Dialect::OpenAi, Dialect::OllamaChat, Dialect::Anthropic] {
        let (with, tr) = run(dialect, &[b"data: null\n\n", HELLO]);
        assert_eq!(text(&with), text(&run(dialect, &[HELLO]).0), "{dialect:?}");
        assert!(tr.summary().errors.is_empty(), "{dialect:?}");
    }
}

#[test]
fn redact_cuts_a_credential_out_of_relayed_engine_errors() {
    let stream: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n\
data: {\"error\":{\"message\":\"bad key sk-SECRET1 for upstream\",\"type\":\"sk-SECRET1\",\"code\":\"sk-SECRET1\"}}\n\n";
    for dialect in DIALECTS {
        let mut o = opts(dialect);
        o.redact = Some("sk-SECRET1".to_owned());
        let mut tr = Translator::new(o, Some(0));
        let out = [tr.feed(stream, Some(0)).unwrap(), tr.finish(Some(0))].concat();
        assert!(!text(&out).contains("SECRET1"), "{dialect:?}: {}", text(&out));
        assert!(text(&out).contains("bad key <redacted> for upstream"), "{dialect:?}: {}", text(&out));
        let summary = tr.summary();
        let engine_error = summary.engine_error.unwrap_or_default();
        assert!(engine_error.contains("<redacted>") && !engine_error.contains("SECRET1"));
    }
    let (plain, _) = run(Dialect::OpenAi, &[stream]);
    assert!(text(&plain).contains("sk-SECRET1"), "nothing is cut without redact");
    // a frame that is no chunk at all is relayed to OpenAI clients as it came: redacted too
    let mut o = opts(Dialect::OpenAi);
    o.redact = Some("sk-SECRET1".to_owned());
    let mut tr = Translator::new(o, Some(0));
    let out = tr.feed(b"data: invalid key sk-SECRET1\n\n", Some(0)).unwrap();
    assert_eq!(text(&out), "data: invalid key <redacted>\n\n");
}

/// llama.cpp's `/v1/completions` stream: `usage` rides on the last chunk with choices.
const COMPLETION: &[u8] = b"data: {\"choices\":[{\"text\":\"Hi\",\"index\":0,\"finish_reason\":null}],\"model\":\"e\",\"object\":\"text_completion\"}\n\n\
data: {\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}],\"model\":\"e\",\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":1},\"id\":\"c\"}\n\n\
data: [DONE]\n\n";

#[test]
fn usage_nobody_asked_for_is_cut_from_a_chunk_with_choices() {
    let (out, tr) = run(Dialect::OpenAi, &[COMPLETION]);
    assert_eq!(
        text(&out),
        "data: {\"choices\":[{\"text\":\"Hi\",\"index\":0,\"finish_reason\":null}],\"model\":\"m\",\"object\":\"text_completion\"}\n\n\
         data: {\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}],\"model\":\"m\",\"id\":\"c\"}\n\n\
         data: [DONE]\n\n"
    );
    let s = tr.summary();
    assert_eq!(s.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((1, 2)), "still counted");
    let mut o = opts(Dialect::OpenAi);
    o.include_usage = true;
    let mut tr = Translator::new(o, Some(0));
    let asked = [tr.feed(COMPLETION, Some(0)).unwrap(), tr.finish(Some(0))].concat();
    assert!(text(&asked).contains("\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":1}"));
    // side by side with `__verbose` (cut too), and first: both cuts leave a valid object
    for chunk in [
        "{\"choices\":[{\"index\":0,\"text\":\"x\"}],\"usage\":{\"prompt_tokens\":1},\"__verbose\":{\"a\":1},\"model\":\"e\"}",
        "{\"usage\":{\"prompt_tokens\":1},\"__verbose\":{},\"choices\":[{\"index\":0,\"text\":\"x\"}]}",
        "{\"usage\":{\"prompt_tokens\":1},\"choices\":[{\"index\":0,\"text\":\"x\"}],\"__verbose\":null}",
        "{\"choices\":[{\"index\":0,\"text\":\"x\"}],\"usage\":{\"prompt_tokens\":1},\"__verbose\":{}}",
    ] {
        let (out, _) = run(Dialect::OpenAi, &[format!("data: {chunk}\n\ndata: [DONE]\n\n").as_bytes()]);
        let first = text(&out).lines().next().unwrap().strip_prefix("data: ").unwrap().to_owned();
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert!(v.get("__verbose").is_none(), "{first}");
    }
}

#[test]
fn tool_fragments_merge_and_complete_in_order() {
    let stream: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c0\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": \"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"c1\",\"function\":{\"name\":\"g\",\"arguments\":\"\"}}]}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let (out, tr) = run(Dialect::OllamaChat, &[stream]);
    let lines: Vec<&str> = text(&out).lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0].contains(
        "\"tool_calls\":[{\"id\":\"c0\",\"function\":{\"index\":0,\"name\":\"f\",\"arguments\":{\"a\":1}}}]"
    ));
    assert!(lines[1].contains(
        "\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"index\":1,\"name\":\"g\",\"arguments\":{}}}]"
    ));
    let s = tr.summary();
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!(s.tool_calls.len(), 2);
    assert_eq!(s.tool_calls[0].arguments, "{\"a\": 1}");
    let (out, _) = run(Dialect::Anthropic, &[stream]);
    let out = text(&out);
    assert!(
        out.contains("\"content_block\":{\"type\":\"tool_use\",\"id\":\"c0\",\"name\":\"f\",\"input\":{}}")
    );
    assert!(out.contains("{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\": \"}"));
    assert!(out.contains("\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"c1\""));
    assert!(out.contains("\"stop_reason\":\"tool_use\""));
}

#[test]
fn abnormal_end_error_and_pings() {
    for dialect in DIALECTS {
        let (out, tr) = run(dialect, &[&HELLO[..60]]);
        assert!(text(&out).contains("engine stream ended before the response was complete"), "{dialect:?}");
        assert!(tr.done());
    }
    let mut tr = Translator::new(opts(Dialect::Anthropic), Some(0));
    assert!(!tr.feed(&HELLO[..120], Some(1)).unwrap().is_empty());
    assert!(tr.feed(b"", Some(PING_AFTER_NS)).unwrap().is_empty());
    assert_eq!(tr.feed(b"", Some(PING_AFTER_NS + 1)).unwrap(), b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
    let mut tr = Translator::new(opts(Dialect::OllamaGenerate), Some(0));
    tr.feed(b"data: {\"error\":{\"message\":\"boom\",\"type\":\"x\",\"code\":1}}\n\n", None).unwrap();
    assert_eq!(tr.summary().errors, vec!["engine error: boom".to_owned()]);
    assert!(tr.done());
}

#[test]
fn frame_error_holds_output_until_finish() {
    let mut tr = Translator::new(opts(Dialect::OpenAi), Some(0));
    let mut chunk = HELLO[..HELLO.len() / 2].to_vec();
    chunk.extend_from_slice(b"\xff\n");
    assert!(tr.feed(&chunk, None).is_err());
    assert!(tr.feed(b"data: x\n\n", None).is_err());
    let out = tr.finish(None);
    assert!(text(&out).starts_with("data: {\"choices\""));
    let line_start =
        chunk.len() - 1 - chunk[..chunk.len() - 1].iter().rev().position(|&b| b == b'\n').unwrap();
    let tail = format!(
        "not valid UTF-8 (line starts at byte {line_start})\",\"type\":\"stream_error\",\"code\":null}}}}\n\ndata: [DONE]\n\n"
    );
    assert!(text(&out).ends_with(&tail), "{}", text(&out));
    assert!(tr.finish(None).is_empty());
}

#[test]
fn recorded_streams_cut_anywhere_give_the_same_bytes() {
    for (name, stream) in RECORDED {
        for dialect in DIALECTS {
            let (whole, tr) = run(dialect, &[stream]);
            assert!(tr.done(), "{name} {dialect:?}");
            if name != "engine_error" {
                assert!(tr.summary().errors.is_empty(), "{name} {dialect:?}: {:?}", tr.summary().errors);
            }
            for i in (0..=stream.len()).step_by(17) {
                assert_eq!(
                    run(dialect, &[&stream[..i], &stream[i..]]).0,
                    whole,
                    "{name} {dialect:?} cut at {i}"
                );
            }
        }
    }
}

#[test]
fn whole_bodies() {
    let body = include_bytes!("../../../tests/fixtures/streams/tool_calls_parallel.json");
    let o = |dialect| WholeOptions {
        dialect,
        model: "m".to_owned(),
        load_duration_ns: 1,
        message_id: Some("msg_2".to_owned()),
        total_duration_ns: 9,
        now_ns: 0,
        prefill: None,
        alternatives: true,
        n: 1,
        echo: None,
    };
    let (out, s) = translate_whole(&o(Dialect::Anthropic), body).unwrap();
    let out = text(&out);
    assert!(out.starts_with("{\"id\":\"msg_2\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"tool_use\""));
    assert!(out.contains("\"input\":{\"city\":\"Paris\"}"));
    assert!(out.contains("\"stop_reason\":\"tool_use\""));
    assert!(s.errors.is_empty());
    let (out, _) = translate_whole(&o(Dialect::OllamaGenerate), body).unwrap();
    assert!(text(&out).contains(
        "\"response\":\"\",\"done\":true,\"done_reason\":\"stop\",\"total_duration\":9,\"load_duration\":1"
    ));
    assert!(translate_whole(&o(Dialect::OpenAi), b"[]").is_err());
    assert!(translate_whole(&o(Dialect::OpenAi), b"{\"choices\":").is_err());
}

#[test]
fn json_strings_escape_like_python() {
    let mut out = Vec::new();
    write_str(&mut out, "a\"\\\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}é😀\u{2028}");
    assert_eq!(text(&out), "\"a\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f}é😀\u{2028}\"");
    assert_eq!(minify_object(" { \"a\" : [1, \"x y\\\" z\"] }\n").unwrap(), "{\"a\":[1,\"x y\\\" z\"]}");
    assert_eq!(minify_object("").unwrap(), "{}");
    assert!(minify_object("[1]").is_err());
    assert!(minify_object("{\"a\":").is_err());
}

#[test]
fn rfc3339_matches_go_formatting() {
    let fmt = |ns| {
        let mut out = Vec::new();
        write_rfc3339(&mut out, ns);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(fmt(0), "\"1970-01-01T00:00:00Z\"");
    assert_eq!(fmt(1_795_000_000_123_456_789), "\"2026-11-18T11:06:40.123456789Z\"");
    assert_eq!(fmt(951_782_400_500_000_000), "\"2000-02-29T00:00:00.5Z\"");
    assert_eq!(fmt(4_107_542_400_000_000_000), "\"2100-03-01T00:00:00Z\"");
}

#[test]
fn engine_error_shapes() {
    let e = EngineError::parse("{\"error\":{\"code\":500,\"message\":\"m\",\"type\":\"server_error\"}}");
    assert_eq!((e.message.as_str(), e.kind.as_str(), e.code.as_str()), ("m", "server_error", "500"));
    let e = EngineError::parse("{\"code\":503,\"message\":\"Loading model\",\"type\":\"unavailable_error\"}");
    assert_eq!(e.message, "Loading model");
    assert_eq!(EngineError::parse("plain words").message, "plain words");
    assert_eq!(EngineError::parse("\"quoted\"").message, "quoted");
    assert_eq!(EngineError::parse("{\"error\":{\"message\":5}}").message, "{\"message\":5}");
}

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A bounded randomized run: mangled recorded streams (bytes flipped, inserted, deleted,
/// truncated) cut at random points must never panic, and must translate the same whatever
/// the cuts.
#[test]
fn randomized_mangled_streams_are_cut_invariant() {
    const TOKENS: [&[u8]; 10] =
        [b"\n", b"\r", b"\r\n", b"data: ", b"[DONE]", b"\"", b"{", b"}", b"\xff", b"\xe4\xb8"];
    let mut rng = Rng(0x5EED);
    for round in 0..300 {
        let (_, stream) = RECORDED[round % RECORDED.len()];
        let mut data = stream[..stream.len().min(2500)].to_vec();
        for _ in 0..rng.below(6) {
            let at = rng.below(data.len());
            match rng.below(4) {
                0 => data[at] = rng.next() as u8,
                1 => {
                    let token = TOKENS[rng.below(TOKENS.len())];
                    data.splice(at..at, token.iter().copied());
                }
                2 => {
                    let end = (at + rng.below(40)).min(data.len());
                    data.drain(at..end);
                }
                _ => data.truncate(at),
            }
        }
        let dialect = DIALECTS[rng.below(DIALECTS.len())];
        let whole = run(dialect, &[&data]).0;
        let mut cuts: Vec<usize> = (0..rng.below(8)).map(|_| rng.below(data.len() + 1)).collect();
        cuts.sort_unstable();
        let mut pieces = Vec::new();
        let mut last = 0;
        for c in cuts {
            pieces.push(&data[last..c]);
            last = c;
        }
        pieces.push(&data[last..]);
        assert_eq!(run(dialect, &pieces).0, whole, "round {round}");
    }
}

#[test]
fn text_completions_read_as_content() {
    let stream: &[u8] = b"data: {\"choices\":[{\"index\":0,\"text\":\" there\",\"finish_reason\":null}],\"object\":\"text_completion\"}\n\n\
data: {\"choices\":[{\"index\":0,\"text\":\" was\",\"finish_reason\":\"length\"}],\"object\":\"text_completion\"}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n\
data: [DONE]\n\n";
    let (out, tr) = run(Dialect::OllamaGenerate, &[stream]);
    assert!(text(&out).contains("\"response\":\" there\""), "{}", text(&out));
    assert_eq!(tr.summary().text, " there was");
    let body = b"{\"choices\":[{\"index\":0,\"text\":\" there was\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}";
    let opts = WholeOptions {
        dialect: Dialect::OllamaGenerate,
        model: "m".to_owned(),
        load_duration_ns: 0,
        message_id: None,
        total_duration_ns: 0,
        now_ns: 0,
        prefill: None,
        alternatives: true,
        n: 1,
        echo: None,
    };
    let (whole, summary) = translate_whole(&opts, body).unwrap();
    assert!(text(&whole).contains("\"response\":\" there was\""), "{}", text(&whole));
    assert_eq!(summary.text, " there was");
}

fn whole_opts(dialect: Dialect) -> WholeOptions {
    WholeOptions {
        dialect,
        model: "m".to_owned(),
        load_duration_ns: 0,
        message_id: Some("msg_3".to_owned()),
        total_duration_ns: 0,
        now_ns: 0,
        prefill: None,
        alternatives: true,
        n: 1,
        echo: None,
    }
}

/// The `message_delta` event's `delta` object of an Anthropic stream.
fn anthropic_stop_delta(out: &[u8]) -> &str {
    let out = text(out);
    let start = out.find("event: message_delta\ndata: ").expect("message_delta") + 27;
    let delta = &out[start..];
    let delta = &delta[delta.find("\"delta\":").unwrap() + 8..];
    &delta[..delta.find('}').unwrap() + 1]
}

const STOP_WORD: &str = "{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"vast\"}";
const NO_STOP_WORD: &str = "{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}";

#[test]
fn anthropic_stop_sequence_from_recorded_verbose_stream_at_any_cut() {
    let stream = include_bytes!("../../../tests/fixtures/streams/stop_verbose.sse");
    let (whole, tr) = run(Dialect::Anthropic, &[stream]);
    assert_eq!(anthropic_stop_delta(&whole), STOP_WORD);
    assert_eq!(tr.summary().stop_sequence.as_deref(), Some("vast"));
    assert_eq!(tr.summary().finish_reason.as_deref(), Some("stop"));
    assert!(!text(&whole).contains("__verbose"));
    for i in 0..=stream.len() {
        assert_eq!(run(Dialect::Anthropic, &[&stream[..i], &stream[i..]]).0, whole, "cut at {i}");
    }
    let pieces: Vec<&[u8]> = stream.chunks(1).collect();
    assert_eq!(run(Dialect::Anthropic, &pieces).0, whole);
    // End of generation (stop_type "eos", stopping_word ""): end_turn, as without `__verbose`.
    let eos = include_bytes!("../../../tests/fixtures/streams/eos_verbose.sse");
    let (out, tr) = run(Dialect::Anthropic, &[eos]);
    assert_eq!(anthropic_stop_delta(&out), NO_STOP_WORD);
    assert_eq!(tr.summary().stop_sequence, None);
}

#[test]
fn anthropic_stop_sequence_from_recorded_verbose_body() {
    let body = include_bytes!("../../../tests/fixtures/streams/stop_verbose.json");
    let (out, s) = translate_whole(&whole_opts(Dialect::Anthropic), body).unwrap();
    assert_eq!(
        text(&out),
        "{\"id\":\"msg_3\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\
         \"content\":[{\"type\":\"text\",\"text\":\"The sea is a \"}],\
         \"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"vast\",\
         \"usage\":{\"input_tokens\":41,\"output_tokens\":5}}"
    );
    assert_eq!(s.stop_sequence.as_deref(), Some("vast"));
    let eos = include_bytes!("../../../tests/fixtures/streams/eos_verbose.json");
    let (out, s) = translate_whole(&whole_opts(Dialect::Anthropic), eos).unwrap();
    assert!(text(&out).contains(",\"stop_reason\":\"end_turn\",\"stop_sequence\":null,"));
    assert_eq!(s.stop_sequence, None);
}

/// llama.cpp puts `__verbose` on the first chunk of its final result, which is a content chunk
/// when that result still carries text; the word counts wherever it comes.
#[test]
fn verbose_stop_word_on_a_content_chunk_and_odd_shapes() {
    let stream = |verbose: &str, finish: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Hi\"}}}}],{verbose}\"model\":\"e\"}}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}],\"model\":\"e\"}}\n\n\
             data: [DONE]\n\n"
        )
    };
    let word = "\"__verbose\":{\"stop_type\":\"word\",\"stopping_word\":\"END \\\"q\\\"\"},";
    let (out, tr) = run(Dialect::Anthropic, &[stream(word, "stop").as_bytes()]);
    assert_eq!(
        anthropic_stop_delta(&out),
        "{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END \\\"q\\\"\"}"
    );
    assert!(text(&out).contains("\"text\":\"Hi\""));
    assert!(tr.summary().errors.is_empty());
    // A finish other than stop keeps its own reason, and the word is not shown.
    let (out, _) = run(Dialect::Anthropic, &[stream(word, "length").as_bytes()]);
    assert_eq!(anthropic_stop_delta(&out), "{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null}");
    // Other stop types and shapes that are not llama.cpp's name no stop word, and break nothing.
    for odd in [
        "\"__verbose\":{\"stop_type\":\"limit\",\"stopping_word\":\"\"},",
        "\"__verbose\":{\"stop_type\":\"eos\",\"stopping_word\":\"x\"},",
        "\"__verbose\":{\"stopping_word\":\"x\"},",
        "\"__verbose\":{\"stop_type\":\"word\"},",
        "\"__verbose\":{\"stop_type\":\"word\",\"stopping_word\":7},",
        "\"__verbose\":{\"stop_type\":1,\"stopping_word\":\"x\"},",
        "\"__verbose\":[\"word\",\"x\"],",
        "\"__verbose\":\"word\",",
        "\"__verbose\":null,",
        "\"__verbose\":{\"content\":\"Hi\",\"stop\":true,\"timings\":{}},",
    ] {
        let (out, tr) = run(Dialect::Anthropic, &[stream(odd, "stop").as_bytes()]);
        assert_eq!(anthropic_stop_delta(&out), NO_STOP_WORD, "{odd}");
        assert!(tr.summary().errors.is_empty(), "{odd}");
        assert_eq!(tr.summary().text, "Hi", "{odd}");
    }
}

#[test]
fn verbose_never_reaches_a_client() {
    let stream = include_bytes!("../../../tests/fixtures/streams/stop_verbose.sse");
    let body = include_bytes!("../../../tests/fixtures/streams/stop_verbose.json");
    for dialect in DIALECTS {
        let (out, _) = run(dialect, &[stream]);
        assert!(!text(&out).contains("__verbose"), "{dialect:?}");
        assert!(!text(&out).contains("stop_type"), "{dialect:?}");
        let (out, _) = translate_whole(&whole_opts(dialect), body).unwrap();
        assert!(!text(&out).contains("__verbose"), "{dialect:?}");
    }
    // The OpenAI pass-through cuts the member wherever it stands, and keeps every other byte.
    let (out, _) = run(Dialect::OpenAi, &[stream]);
    assert!(text(&out).contains(
        "\"finish_reason\":\"stop\",\"index\":0,\"delta\":{}}],\"created\":1795956937,\"id\":\"chatcmpl-VVr3ps3N3Jv5yJ6kjIp0D2Qtsjs11WGX\",\
         \"model\":\"m\",\"system_fingerprint\":\"b11434-unknown\",\"object\":\"chat.completion.chunk\"}\n\n"
    ));
    let (out, _) = translate_whole(&whole_opts(Dialect::OpenAi), body).unwrap();
    assert!(text(&out).contains("\"id\":\"chatcmpl-t75PbUEm4wMMiCtKM9q8KkpJaIEh6ok3\",\"timings\":{"));
    for (engine, client) in [
        (
            "{\"__verbose\":{\"a\":[1,\"}\"]},\"model\":\"e\",\"choices\":[]}",
            "{\"model\":\"m\",\"choices\":[]}",
        ),
        ("{ \"__verbose\" : {} , \"model\":\"e\"}", "{ \"model\":\"m\"}"),
        ("{\"model\":\"e\" ,\t \"__verbose\": null }", "{\"model\":\"m\"  }"),
        ("{\"choices\":[],\"__verbose\":1,\"model\":\"e\"}", "{\"choices\":[],\"model\":\"m\"}"),
        ("{\"__verbose\":{}}", "{}"),
        // A key written with escapes (llama.cpp never does) is not found, and stays.
        ("{\"\\u005f_verbose\":{},\"model\":\"e\"}", "{\"\\u005f_verbose\":{},\"model\":\"m\"}"),
    ] {
        let (out, _) = translate_whole(&whole_opts(Dialect::OpenAi), engine.as_bytes()).unwrap();
        assert_eq!(text(&out), client, "{engine}");
        let (out, _) = run(Dialect::OpenAi, &[format!("data: {engine}\n\n").as_bytes()]);
        assert!(text(&out).starts_with(&format!("data: {client}\n\n")), "{engine}: {}", text(&out));
    }
}

#[test]
fn an_echoed_prefill_is_cut_from_every_dialect() {
    let echo: &[u8] =
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"1, 2, 3, \"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"4\"}}]}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";
    for dialect in DIALECTS {
        let mut tr =
            Translator::new(Options { prefill: Some("1, 2, 3,".to_owned()), ..opts(dialect) }, Some(0));
        let mut out = tr.feed(echo, Some(0)).unwrap();
        out.extend(tr.finish(Some(0)));
        let out = text(&out);
        assert_eq!(tr.summary().text, " 4", "{dialect:?}: {out}");
        assert!(!out.contains("1, 2, 3"), "{dialect:?}: {out}");
    }
    let body = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"1, 2, 3, 4"},"finish_reason":"stop"}]}"#;
    for dialect in DIALECTS {
        let o = WholeOptions { prefill: Some("1, 2, 3,".to_owned()), ..whole_opts(dialect) };
        let (out, summary) = translate_whole(&o, body).unwrap();
        assert_eq!(summary.text, " 4", "{dialect:?}");
        assert!(!text(&out).contains("1, 2, 3"), "{dialect:?}: {}", text(&out));
    }
}

#[test]
fn usage_reports_add_up_into_one_usage_chunk_at_the_end() {
    // llama-server streams n=2 as two choices, each with its own usage-only chunk
    let two: &[u8] = b"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"Hi\"}}],\"model\":\"e\"}\n\n\
data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"length\"}],\"model\":\"e\"}\n\n\
data: {\"choices\":[],\"model\":\"e\",\"usage\":{\"completion_tokens\":3,\"prompt_tokens\":31,\"total_tokens\":34}}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Yo\"}}],\"model\":\"e\"}\n\n\
data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"model\":\"e\"}\n\n\
data: {\"choices\":[],\"model\":\"e\",\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":31,\"total_tokens\":33}}\n\n\
data: [DONE]\n\n";
    let mut tr = Translator::new(Options { include_usage: true, n: 2, ..opts(Dialect::OpenAi) }, Some(0));
    let mut out = tr.feed(two, Some(0)).unwrap();
    out.extend(tr.finish(Some(0)));
    let out = text(&out);
    assert_eq!(out.matches("usage").count(), 1, "{out}");
    assert!(
        out.ends_with(
            "data: {\"choices\":[],\"model\":\"m\",\"usage\":{\"completion_tokens\":5,\"prompt_tokens\":31,\
             \"total_tokens\":36}}\n\ndata: [DONE]\n\n"
        ),
        "{out}"
    );
    let s = tr.summary();
    assert_eq!(s.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((31, 5)));
    assert_eq!((s.choices, s.usage_reports), (2, 2));
    // several prompts (n = 1): each prompt's tokens count
    let (_, tr) = run(Dialect::OllamaGenerate, &[two]);
    assert_eq!(tr.summary().usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((62, 5)));
    // one usage chunk is passed as it came
    let (out, _) = run(Dialect::OpenAi, &[HELLO]);
    assert!(!text(&out).contains("usage"));
    let mut tr = Translator::new(Options { include_usage: true, ..opts(Dialect::OpenAi) }, Some(0));
    let mut out = tr.feed(HELLO, Some(0)).unwrap();
    out.extend(tr.finish(Some(0)));
    assert!(text(&out).ends_with(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2},\"model\":\"m\"}\n\n\
         data: [DONE]\n\n"
    ));
}

#[test]
fn ollama_carries_the_tokens_logprobs() {
    let lp = r#"[{"id":1,"token":"Hi","bytes":[72,105],"logprob":-0.5,"top_logprobs":[{"id":1,"token":"Hi","bytes":[72,105],"logprob":-0.5}]}]"#;
    let stream = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"Hi\"}},\"logprobs\":{{\"content\":{lp}}}}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    );
    let (out, _) = run(Dialect::OllamaChat, &[stream.as_bytes()]);
    let first = text(&out).lines().next().unwrap();
    assert!(first.contains(&format!(",\"logprobs\":{lp},\"done\":false}}")), "{first}");
    let body = format!(
        "{{\"choices\":[{{\"index\":0,\"message\":{{\"content\":\"Hi\"}},\"logprobs\":{{\"content\":{lp}}},\"finish_reason\":\"stop\"}}]}}"
    );
    let (out, _) = translate_whole(&whole_opts(Dialect::OllamaGenerate), body.as_bytes()).unwrap();
    assert!(text(&out).contains(&format!("\"logprobs\":{lp}")), "{}", text(&out));
    let (out, _) = run(Dialect::OllamaChat, &[HELLO]);
    assert!(!text(&out).contains("logprobs"));
}

/// The Responses API dialect: its exact events for a short text answer, and the same bytes at
/// every chunk boundary of every recorded stream (the SDKs index items and parts by the
/// `output_index`, `content_index` and `sequence_number` written here).
#[test]
fn responses_events_for_a_text_answer() {
    let mut o = opts(Dialect::Responses);
    o.message_id = Some("resp_1".to_owned());
    o.echo = Some("\"tools\":[]".to_owned());
    let mut tr = Translator::new(o, Some(0));
    let mut out = tr.feed(HELLO, Some(0)).unwrap();
    out.extend(tr.finish(Some(0)));
    let head = "\"id\":\"resp_1\",\"object\":\"response\",\"created_at\":0";
    let tail = "\"model\":\"m\",\"output\":[],\"error\":null,\"incomplete_details\":null,\"usage\":null,\"tools\":[]";
    let text = "{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"Hi \\\"you\\\"\"}";
    let item = format!(
        "{{\"id\":\"msg_1_0\",\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{text}]}}"
    );
    let at = "\"item_id\":\"msg_1_0\",\"output_index\":0,\"content_index\":0";
    let want = [
        format!("response.created\",\"sequence_number\":0,\"response\":{{{head},\"status\":\"in_progress\",{tail}}}"),
        format!("response.in_progress\",\"sequence_number\":1,\"response\":{{{head},\"status\":\"in_progress\",{tail}}}"),
        "response.output_item.added\",\"sequence_number\":2,\"output_index\":0,\"item\":{\"id\":\"msg_1_0\",\"type\":\"message\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}".to_owned(),
        format!("response.content_part.added\",\"sequence_number\":3,{at},\"part\":{{\"type\":\"output_text\",\"annotations\":[],\"logprobs\":[],\"text\":\"\"}}"),
        format!("response.output_text.delta\",\"sequence_number\":4,{at},\"delta\":\"Hi \\\"you\\\"\",\"logprobs\":[]"),
        format!("response.output_text.done\",\"sequence_number\":5,{at},\"logprobs\":[],\"text\":\"Hi \\\"you\\\"\""),
        format!("response.content_part.done\",\"sequence_number\":6,{at},\"part\":{text}"),
        format!("response.output_item.done\",\"sequence_number\":7,\"output_index\":0,\"item\":{item}"),
        format!(
            "response.completed\",\"sequence_number\":8,\"response\":{{{head},\"status\":\"completed\",\"model\":\"m\",\"output\":[{item}],\"error\":null,\"incomplete_details\":null,\"usage\":{{\"input_tokens\":4,\"input_tokens_details\":{{\"cached_tokens\":0,\"cache_write_tokens\":0}},\"output_tokens\":2,\"output_tokens_details\":{{\"reasoning_tokens\":0}},\"total_tokens\":6}},\"tools\":[]}}"
        ),
    ];
    let events: Vec<&str> =
        std::str::from_utf8(&out).unwrap().split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), want.len());
    for (got, want) in events.iter().zip(&want) {
        let name = want.split('"').next().unwrap();
        assert_eq!(*got, format!("event: {name}\ndata: {{\"type\":\"{want}}}"));
    }
    for (name, stream) in RECORDED {
        let (whole, _) = run(Dialect::Responses, &[stream]);
        for i in 0..=stream.len() {
            let (cut, _) = run(Dialect::Responses, &[&stream[..i], &stream[i..]]);
            assert_eq!(cut, whole, "{name}: cut at byte {i}");
        }
    }
}
