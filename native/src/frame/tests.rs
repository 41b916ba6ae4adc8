//! Tests of the frame parsers: line ends, chunk boundaries, comments, fields, bounds, UTF-8.
//!
//! Owns byte-level coverage of `SseParser` and `NdjsonParser`. It must not start Python.

use super::{FrameError, NdjsonParser, SseParser};

fn sse_events(parser: &mut SseParser, chunks: &[&[u8]]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, |ev| out.push((ev.event.to_owned(), ev.data.to_owned()))).unwrap();
    }
    out
}

fn sse_all(input: &[u8]) -> Vec<(String, String)> {
    sse_events(&mut SseParser::new(1 << 20), &[input])
}

fn pair(event: &str, data: &str) -> (String, String) {
    (event.to_owned(), data.to_owned())
}

/// Every way to cut `input` in two and in three must give the same events as no cut.
fn assert_cut_invariant(input: &[u8]) {
    let whole = sse_all(input);
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        assert_eq!(sse_events(&mut SseParser::new(1 << 20), &[a, b]), whole, "cut at {i}");
        for j in i..=input.len() {
            let parts = [&input[..i], &input[i..j], &input[j..]];
            assert_eq!(sse_events(&mut SseParser::new(1 << 20), &parts), whole, "cuts at {i},{j}");
        }
    }
    let singles: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(sse_events(&mut SseParser::new(1 << 20), &singles), whole);
}

#[test]
fn data_events_with_every_line_end() {
    let want = vec![pair("message", "a"), pair("message", "b")];
    assert_eq!(sse_all(b"data: a\n\ndata: b\n\n"), want);
    assert_eq!(sse_all(b"data: a\r\n\r\ndata: b\r\n\r\n"), want);
    assert_eq!(sse_all(b"data: a\r\rdata: b\r\r"), want);
    assert_eq!(sse_all(b"data: a\r\n\ndata: b\n\r\n"), want);
}

#[test]
fn multi_line_data_event_type_comments_and_fields() {
    let input = b": keep-alive\nevent: delta\ndata: one\ndata:two\ndata\nid: 7\nretry: 10\n\n";
    assert_eq!(sse_all(input), vec![pair("delta", "one\ntwo\n")]);
}

#[test]
fn blank_line_without_data_dispatches_nothing_and_resets_type() {
    assert_eq!(sse_all(b"event: x\n\ndata: y\n\n"), vec![pair("message", "y")]);
    assert_eq!(sse_all(b"\n\n\n"), vec![]);
}

#[test]
fn empty_data_field_dispatches_empty_string() {
    assert_eq!(sse_all(b"data:\n\n"), vec![pair("message", "")]);
    assert_eq!(sse_all(b"data: \n\n"), vec![pair("message", "")]);
    assert_eq!(sse_all(b"data:  two spaces\n\n"), vec![pair("message", " two spaces")]);
}

#[test]
fn llama_cpp_error_line_is_an_error_event() {
    let input = b"data: {\"a\":1}\n\nerror: {\"code\":500}\n\n";
    assert_eq!(sse_all(input), vec![pair("message", "{\"a\":1}"), pair("error", "{\"code\":500}")]);
}

#[test]
fn bom_is_stripped_only_at_start() {
    assert_eq!(sse_all(b"\xEF\xBB\xBFdata: a\n\n"), vec![pair("message", "a")]);
    let events = sse_events(&mut SseParser::new(64), &[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"]);
    assert_eq!(events, vec![pair("message", "a")]);
    assert_eq!(sse_all(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n"), vec![pair("message", "a")]);
}

#[test]
fn cut_anywhere_gives_the_same_events() {
    assert_cut_invariant(
        b"data: {\"x\":\"caf\xC3\xA9 \xF0\x9F\x98\x80 \xE4\xB8\xAD\"}\r\n\r\n: c\rdata: [DONE]\r\r",
    );
    assert_cut_invariant(b"event: e\ndata: 1\ndata: 2\n\nerror: oops\n\ndata:x\r\n\n");
}

#[test]
fn utf8_split_across_chunks_is_held() {
    let mut parser = SseParser::new(64);
    let mut got = Vec::new();
    parser.feed(b"data: \xF0\x9F", |ev| got.push(ev.data.to_owned())).unwrap();
    assert!(got.is_empty());
    parser.feed(b"\x98\x80\n\n", |ev| got.push(ev.data.to_owned())).unwrap();
    assert_eq!(got, vec!["\u{1F600}".to_owned()]);
}

#[test]
fn invalid_utf8_is_an_error_and_sticks() {
    let mut parser = SseParser::new(64);
    let err = parser.feed(b"data: ok\n\ndata: \xFF\n\n", |_| {}).unwrap_err();
    assert_eq!(err, FrameError::InvalidUtf8 { offset: 10 });
    assert_eq!(parser.feed(b"data: fine\n\n", |_| panic!("no events after failure")), Err(err));
}

#[test]
fn line_bound_is_enforced_before_the_line_ends() {
    let mut parser = SseParser::new(16);
    parser.feed(b"data: 0123456789", |_| {}).unwrap();
    let err = parser.feed(b"x", |_| {}).unwrap_err();
    assert_eq!(err, FrameError::LineTooLong { limit: 16, offset: 0 });
    let mut parser = SseParser::new(16);
    assert!(parser.feed(b"data: 0123456789\n\n", |_| {}).is_ok());
    let err = SseParser::new(16).feed(b"\n\ndata: 01234567890\n", |_| {}).unwrap_err();
    assert_eq!(err, FrameError::LineTooLong { limit: 16, offset: 2 });
}

#[test]
fn event_bound_counts_all_data_lines() {
    let mut parser = SseParser::new(16);
    let err = parser.feed(b"data: 01234567\ndata: 01234567\n", |_| {}).unwrap_err();
    assert_eq!(err, FrameError::EventTooLarge { limit: 16, offset: 15 });
}

#[test]
fn finish_discards_an_incomplete_event() {
    let mut parser = SseParser::new(64);
    let mut got = Vec::new();
    parser.feed(b"data: a\n\ndata: b\n", |ev| got.push(ev.data.to_owned())).unwrap();
    assert!(!parser.finish());
    assert_eq!(got, vec!["a".to_owned()]);
    let mut parser = SseParser::new(64);
    parser.feed(b"data: a\n\n", |_| {}).unwrap();
    assert!(parser.finish());
}

fn ndjson(chunks: &[&[u8]]) -> Vec<String> {
    let mut parser = NdjsonParser::new(64);
    let mut out = Vec::new();
    for chunk in chunks {
        parser.feed(chunk, |l| out.push(l.to_owned())).unwrap();
    }
    parser.finish(|l| out.push(l.to_owned())).unwrap();
    out
}

#[test]
fn ndjson_lines_any_cut() {
    let input: &[u8] = b"{\"a\":1}\r\n\n  \n{\"b\":\"\xC3\xA9\"}\n{\"c\":3}";
    let want = vec!["{\"a\":1}".to_owned(), "{\"b\":\"\u{e9}\"}".to_owned(), "{\"c\":3}".to_owned()];
    assert_eq!(ndjson(&[input]), want);
    for i in 0..=input.len() {
        assert_eq!(ndjson(&[&input[..i], &input[i..]]), want, "cut at {i}");
    }
}

#[test]
fn ndjson_bound_and_utf8() {
    let mut parser = NdjsonParser::new(4);
    assert_eq!(parser.feed(b"12345", |_| {}), Err(FrameError::LineTooLong { limit: 4, offset: 0 }));
    let mut parser = NdjsonParser::new(8);
    assert_eq!(parser.feed(b"ok\n\xC3\n", |_| {}), Err(FrameError::InvalidUtf8 { offset: 3 }));
}

#[test]
fn python_default_bound_is_the_crate_default() {
    // python.rs spells the default as a literal so Python's text signature shows it.
    assert_eq!(super::DEFAULT_MAX_FRAME, 4_194_304);
}
