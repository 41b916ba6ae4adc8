//! An incremental HTTP/1.1 response decoder: head, framing, body, keep-alive.
//!
//! Owns one response at a time over a persistent connection: `feed` any slice of bytes; it
//! reports when the head completes (status) and when the body ends, and appends the decoded body
//! (chunk framing removed) to the caller's buffer. Bytes after the end of a response in the same
//! read are discarded and make the connection not reusable (the gateway never pipelines); bytes
//! fed while no response is expected are an error. It must not touch Python.

use std::fmt;

/// Bound on a response head (status line and headers).
pub const MAX_HEAD: usize = 64 << 10;
const MAX_HEADERS: usize = 64;
/// Bound on one chunk-size line or the trailer section.
const MAX_LINE: usize = 8 << 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError(pub String);

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, HttpError> {
    Err(HttpError(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Waiting for a chunk-size line.
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last (zero) chunk: trailers up to an empty line.
    Trailers,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No response expected (before `begin`, or after one ended).
    Idle,
    Head,
    Length(u64),
    Chunked(Chunk),
    UntilClose,
    Done,
}

/// What one `feed` call moved: the head's status if the head completed in it, and whether the
/// body ended in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub head: Option<u16>,
    pub done: bool,
}

#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// Undecoded bytes: a partial head, or a partial chunk-size line / trailer.
    pending: Vec<u8>,
    status: u16,
    keep_alive: bool,
    got_bytes: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    pub fn new() -> Self {
        Self { state: State::Idle, pending: Vec::new(), status: 0, keep_alive: false, got_bytes: false }
    }

    /// Expect a new response (the request has just been written).
    pub fn begin(&mut self) {
        self.state = State::Head;
        self.pending.clear();
        self.status = 0;
        self.keep_alive = false;
        self.got_bytes = false;
    }

    pub fn status(&self) -> u16 {
        self.status
    }

    /// Whether any byte of the current response arrived.
    pub fn got_bytes(&self) -> bool {
        self.got_bytes
    }

    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    pub fn head_done(&self) -> bool {
        !matches!(self.state, State::Idle | State::Head)
    }

    /// The response ended cleanly and the engine will take another request on this connection.
    pub fn reusable(&self) -> bool {
        self.state == State::Done && self.keep_alive
    }

    /// Decode `data`, appending body bytes to `body`.
    pub fn feed(&mut self, data: &[u8], body: &mut Vec<u8>) -> Result<Progress, HttpError> {
        let mut progress = Progress::default();
        if data.is_empty() {
            return Ok(progress);
        }
        match self.state {
            State::Idle | State::Done => {
                return err(format!("engine sent {} bytes outside any response", data.len()))
            }
            _ => {}
        }
        self.got_bytes = true;
        let mut input: &[u8] = data;
        let owned;
        if self.state == State::Head {
            self.pending.extend_from_slice(input);
            let consumed = match self.parse_head()? {
                Some(n) => n,
                None => return Ok(progress),
            };
            progress.head = Some(self.status);
            owned = self.pending.split_off(consumed);
            self.pending.clear();
            input = &owned;
        } else if !self.pending.is_empty() {
            // a chunk-size line or trailers split across reads
            self.pending.extend_from_slice(input);
            owned = std::mem::take(&mut self.pending);
            input = &owned;
        }
        self.body(input, body)?;
        progress.done = self.state == State::Done;
        Ok(progress)
    }

    /// The engine closed its side: ends an until-close body; anything else unfinished is an error.
    pub fn eof(&mut self) -> Result<bool, HttpError> {
        match self.state {
            State::UntilClose => {
                self.state = State::Done;
                Ok(true)
            }
            State::Done | State::Idle => Ok(false),
            State::Head if !self.got_bytes => err("engine closed the connection before answering"),
            State::Head => err("engine closed the connection inside its response head"),
            _ => err("engine closed the connection before its response ended"),
        }
    }

    /// Parses `pending` as a head; Some(head length) when complete.
    fn parse_head(&mut self) -> Result<Option<usize>, HttpError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let n = match resp.parse(&self.pending) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => {
                if self.pending.len() > MAX_HEAD {
                    return err(format!("engine response head is over {MAX_HEAD} bytes"));
                }
                return Ok(None);
            }
            Err(e) => return err(format!("engine sent a malformed response head: {e}")),
        };
        let code = resp.code.unwrap_or(0);
        if (100..200).contains(&code) {
            return err(format!("engine sent an unexpected interim response {code}"));
        }
        let http10 = resp.version == Some(0);
        let mut keep_alive = !http10;
        let mut chunked = false;
        let mut length: Option<u64> = None;
        for h in resp.headers.iter() {
            let v = h.value;
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.split(|&b| b == b',').any(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            } else if h.name.eq_ignore_ascii_case("content-length") {
                let text = std::str::from_utf8(v).ok().map(str::trim);
                match text.and_then(|t| t.parse::<u64>().ok()) {
                    Some(n) if length.is_none_or(|m| m == n) => length = Some(n),
                    _ => return err("engine sent an invalid content-length"),
                }
            } else if h.name.eq_ignore_ascii_case("connection") {
                for token in v.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if token.eq_ignore_ascii_case(b"close") {
                        keep_alive = false;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                        keep_alive = true;
                    }
                }
            }
        }
        self.status = code;
        self.keep_alive = keep_alive;
        self.state = if code == 204 || code == 304 {
            State::Done
        } else if chunked {
            State::Chunked(Chunk::Size)
        } else if let Some(n) = length {
            if n == 0 {
                State::Done
            } else {
                State::Length(n)
            }
        } else {
            self.keep_alive = false;
            State::UntilClose
        };
        Ok(Some(n))
    }

    fn body(&mut self, mut input: &[u8], body: &mut Vec<u8>) -> Result<(), HttpError> {
        while !input.is_empty() {
            match self.state {
                State::Length(left) => {
                    let take = (left as usize).min(input.len());
                    body.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    self.state =
                        if left as usize == take { State::Done } else { State::Length(left - take as u64) };
                }
                State::UntilClose => {
                    body.extend_from_slice(input);
                    input = &[];
                }
                State::Chunked(c) => input = self.chunked(c, input, body)?,
                State::Done => {
                    // The gateway never pipelines: the response is complete and delivered, and the
                    // connection, out of step with the engine, is not reused.
                    self.keep_alive = false;
                    return Ok(());
                }
                State::Idle | State::Head => unreachable!("body() runs after the head"),
            }
        }
        Ok(())
    }

    /// One step of chunked decoding; returns the input left.
    fn chunked<'a>(&mut self, c: Chunk, input: &'a [u8], body: &mut Vec<u8>) -> Result<&'a [u8], HttpError> {
        match c {
            Chunk::Size => match httparse::parse_chunk_size(input) {
                Ok(httparse::Status::Complete((n, size))) => {
                    self.state = State::Chunked(if size == 0 { Chunk::Trailers } else { Chunk::Data(size) });
                    Ok(&input[n..])
                }
                Ok(httparse::Status::Partial) => self.hold(input),
                Err(_) => err("engine sent a malformed chunk size"),
            },
            Chunk::Data(left) => {
                let take = (left.min(input.len() as u64)) as usize;
                body.extend_from_slice(&input[..take]);
                let left = left - take as u64;
                self.state = State::Chunked(if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) });
                Ok(&input[take..])
            }
            Chunk::DataEnd => {
                if input.len() < 2 {
                    if input == b"\r" {
                        return self.hold(input);
                    }
                    return err("engine sent a chunk without its CRLF");
                }
                if &input[..2] != b"\r\n" {
                    return err("engine sent a chunk without its CRLF");
                }
                self.state = State::Chunked(Chunk::Size);
                Ok(&input[2..])
            }
            Chunk::Trailers => {
                // no trailers: a bare CRLF; else header lines up to an empty line
                if input.starts_with(b"\r\n") {
                    self.state = State::Done;
                    return Ok(&input[2..]);
                }
                match memchr::memmem::find(input, b"\r\n\r\n") {
                    Some(i) => {
                        self.state = State::Done;
                        Ok(&input[i + 4..])
                    }
                    None => self.hold(input),
                }
            }
        }
    }

    /// Keeps an incomplete framing line for the next read (bounded).
    fn hold<'a>(&mut self, input: &[u8]) -> Result<&'a [u8], HttpError> {
        if input.len() > MAX_LINE {
            return err("engine sent an over-long chunk-size line or trailer");
        }
        self.pending.extend_from_slice(input);
        Ok(&[])
    }
}
