use super::http::{Decoder, Progress};

fn run(parts: &[&[u8]]) -> (Vec<Progress>, Vec<u8>, Decoder) {
    let mut d = Decoder::new();
    d.begin();
    let mut body = Vec::new();
    let mut seen = Vec::new();
    for p in parts {
        seen.push(d.feed(p, &mut body).expect("decodes"));
    }
    (seen, body, d)
}

const CHUNKED: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n\
5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n";

#[test]
fn chunked_whole_and_at_every_cut() {
    let (p, body, d) = run(&[CHUNKED]);
    assert_eq!(p[0].head, Some(200));
    assert!(p[0].done && d.reusable());
    assert_eq!(body, b"hello, world");
    for cut in 1..CHUNKED.len() {
        for cut2 in cut..CHUNKED.len() {
            let (p, body, d) = run(&[&CHUNKED[..cut], &CHUNKED[cut..cut2], &CHUNKED[cut2..]]);
            assert_eq!(body, b"hello, world", "cuts {cut} {cut2}");
            assert_eq!(p.iter().filter_map(|x| x.head).collect::<Vec<_>>(), vec![200]);
            assert_eq!(p.iter().filter(|x| x.done).count(), 1);
            assert!(d.reusable());
        }
    }
}

#[test]
fn trailers_are_skipped() {
    let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n";
    for cut in 1..raw.len() {
        let (p, body, _) = run(&[&raw[..cut], &raw[cut..]]);
        assert_eq!(body, b"abc");
        assert!(p.last().unwrap().done, "cut {cut}");
    }
}

#[test]
fn content_length_and_keep_alive() {
    let raw = b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope";
    let (p, body, d) = run(&[raw]);
    assert_eq!((p[0].head, p[0].done, body.as_slice()), (Some(404), true, &b"nope"[..]));
    assert!(d.reusable());
    let (_, _, d) = run(&[b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"]);
    assert!(d.done() && !d.reusable());
    let (_, _, d) = run(&[b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"]);
    assert!(!d.reusable());
}

#[test]
fn until_close_body_ends_at_eof() {
    let (p, body, mut d) = run(&[b"HTTP/1.1 200 OK\r\n\r\nabc", b"def"]);
    assert!(!p[1].done);
    assert_eq!(body, b"abcdef");
    assert_eq!(d.eof(), Ok(true));
    assert!(d.done() && !d.reusable());
}

#[test]
fn errors_are_reported() {
    let mut d = Decoder::new();
    let mut body = Vec::new();
    assert!(d.feed(b"x", &mut body).is_err(), "bytes with no response expected");
    d.begin();
    assert!(d.eof().unwrap_err().0.contains("before answering"));
    d.begin();
    assert!(d.feed(b"NOT HTTP\r\n\r\n", &mut body).is_err());
    d.begin();
    let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    d.feed(head, &mut body).unwrap();
    assert!(d.feed(b"zz\r\n", &mut body).is_err(), "bad chunk size");
    d.begin();
    d.feed(head, &mut body).unwrap();
    assert!(d.feed(b"3\r\nabcXY", &mut body).is_err(), "chunk without CRLF");
    d.begin();
    d.feed(head, &mut body).unwrap();
    d.feed(b"3\r\nab", &mut body).unwrap();
    assert!(d.eof().unwrap_err().0.contains("before its response ended"));
    d.begin();
    let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'a', super::MAX_HEAD + 10));
    assert!(d.feed(&big, &mut body).unwrap_err().0.contains("over"));
    d.begin();
    assert!(d.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", &mut body).is_err());
    d.begin();
    body.clear();
    d.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", &mut body).unwrap();
    let p = d.feed(b"ab", &mut body).expect("the response is delivered");
    assert!(p.done && d.done() && !d.reusable(), "a stray byte: delivered, not reused");
    assert_eq!(body, b"a");
    assert!(d.feed(b"c", &mut body).is_err(), "bytes with no response expected");
}

#[test]
fn a_stray_crlf_after_the_last_chunk_keeps_the_response() {
    let mut raw = CHUNKED.to_vec();
    raw.extend_from_slice(b"\r\n");
    let (p, body, d) = run(&[&raw]);
    assert!(p[0].done && !d.reusable());
    assert_eq!(body, b"hello, world");
}

#[test]
fn a_connection_carries_responses_back_to_back() {
    let mut d = Decoder::new();
    let mut body = Vec::new();
    for i in 0..3 {
        d.begin();
        let p = d.feed(CHUNKED, &mut body).unwrap();
        assert!(p.done && d.reusable(), "response {i}");
    }
    assert_eq!(body, b"hello, worldhello, worldhello, world");
}
