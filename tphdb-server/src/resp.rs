//! The Redis serialization protocol: requests in, replies out.
//!
//! A request is an array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`),
//! what every client sends, or an inline command (`GET k\r\n`), what a person
//! types into a telnet session. The parser is written for a hostile peer: it
//! refuses a request whose length fields exceed the limits before buffering
//! it, never panics, and takes each argument out of the read buffer without
//! a copy.

use bytes::{Bytes, BytesMut};

/// What one request may be.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Bytes of one argument at most (Redis: `proto-max-bulk-len`).
    pub max_bulk_bytes: usize,
    /// Bytes of a whole request at most: arguments plus framing.
    pub max_request_bytes: usize,
    /// Arguments of one request at most.
    pub max_args: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_bytes: 64 << 20,
            max_request_bytes: 64 << 20,
            max_args: 1 << 20,
        }
    }
}

/// A request the parser refuses; the connection is closed after the error
/// reply, as Redis does, since what follows cannot be framed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

fn error<T>(what: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(what.into()))
}

/// Longest line of an inline command or a length header.
const MAX_LINE_BYTES: usize = 64 << 10;

/// Takes one request off the front of `buf`: `Ok(None)` if `buf` does not
/// yet hold a whole one (nothing is consumed then), an empty `Vec` for an
/// empty inline line.
pub fn parse(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_array(buf, limits),
        Some(_) => parse_inline(buf),
    }
}

/// The index of the `\r\n` ending the line that starts at `from`.
fn line_end(buf: &[u8], from: usize) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[from..buf.len().min(from + MAX_LINE_BYTES + 2)];
    match window.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && window[i - 1] == b'\r' => Ok(Some(from + i - 1)),
        Some(_) => error("line not ended by CRLF"),
        None if window.len() > MAX_LINE_BYTES => error("too big line"),
        None => Ok(None),
    }
}

/// A decimal length, as Redis writes them.
fn parse_len(digits: &[u8], what: &str) -> Result<i64, ProtocolError> {
    let s = std::str::from_utf8(digits).map_err(|_| ProtocolError(format!("invalid {what}")))?;
    if s.is_empty() || s.len() > 19 || s.starts_with('+') {
        return error(format!("invalid {what}"));
    }
    s.parse::<i64>()
        .map_err(|_| ProtocolError(format!("invalid {what}")))
}

fn parse_array(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(end) = line_end(buf, 1)? else {
        return Ok(None);
    };
    let count = parse_len(&buf[1..end], "multibulk length")?;
    if count > limits.max_args as i64 {
        return error("invalid multibulk length");
    }
    // A null or empty array is no command; it is skipped, as Redis does.
    let count = count.max(0) as usize;
    let mut at = end + 2;
    // Where each argument lies, found before anything is taken, so that an
    // incomplete request consumes nothing.
    let mut spans = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return error(format!("expected '$', got '{}'", buf[at].escape_ascii()));
        }
        let Some(end) = line_end(buf, at + 1)? else {
            return Ok(None);
        };
        let len = parse_len(&buf[at + 1..end], "bulk length")?;
        if len < 0 || len as usize > limits.max_bulk_bytes {
            return error("invalid bulk length");
        }
        let start = end + 2;
        let stop = start + len as usize;
        if stop + 2 > limits.max_request_bytes {
            return error("request too big");
        }
        if stop + 2 > buf.len() {
            return Ok(None);
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return error("bulk not ended by CRLF");
        }
        spans.push((start, stop));
        at = stop + 2;
    }
    let frozen = buf.split_to(at).freeze();
    Ok(Some(
        spans
            .into_iter()
            .map(|(start, stop)| frozen.slice(start..stop))
            .collect(),
    ))
}

/// An inline command: words separated by spaces; double quotes group words
/// and take `\n`, `\"`, `\\` and `\xHH` escapes; single quotes group words
/// literally (`redis-cli`'s rules).
fn parse_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(nl) = buf
        .iter()
        .take(MAX_LINE_BYTES + 2)
        .position(|&b| b == b'\n')
    else {
        return if buf.len() > MAX_LINE_BYTES {
            error("too big inline request")
        } else {
            Ok(None)
        };
    };
    let line = buf.split_to(nl + 1);
    let line = line.strip_suffix(b"\n").unwrap_or(&line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    split_words(line).map(Some)
}

fn split_words(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let mut words = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let mut word = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return error("unbalanced quotes in request"),
                        Some(b'"') => break,
                        Some(b'\\') => {
                            let (b, used) = unescape(&line[i + 1..])?;
                            word.push(b);
                            i += 1 + used;
                        }
                        Some(&b) => {
                            word.push(b);
                            i += 1;
                        }
                    }
                }
                i += 1;
            }
            b'\'' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return error("unbalanced quotes in request"),
                        Some(b'\'') => break,
                        Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                            word.push(b'\'');
                            i += 2;
                        }
                        Some(&b) => {
                            word.push(b);
                            i += 1;
                        }
                    }
                }
                i += 1;
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    word.push(line[i]);
                    i += 1;
                }
            }
        }
        if i < line.len() && !line[i].is_ascii_whitespace() {
            return error("unbalanced quotes in request");
        }
        words.push(Bytes::from(word));
    }
    Ok(words)
}

/// The byte an escape after `\` stands for, and how many bytes it took.
fn unescape(rest: &[u8]) -> Result<(u8, usize), ProtocolError> {
    let hex = |b: u8| (b as char).to_digit(16);
    Ok(match rest {
        [b'x', h, l, ..] if hex(*h).is_some() && hex(*l).is_some() => {
            ((hex(*h).unwrap_or(0) * 16 + hex(*l).unwrap_or(0)) as u8, 3)
        }
        [b'n', ..] => (b'\n', 1),
        [b'r', ..] => (b'\r', 1),
        [b't', ..] => (b'\t', 1),
        [b'b', ..] => (8, 1),
        [b'a', ..] => (7, 1),
        [b, ..] => (*b, 1),
        [] => return error("unbalanced quotes in request"),
    })
}

/// The protocol version a connection speaks (`HELLO 3` switches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// RESP2, the default.
    Resp2,
    /// RESP3: nulls, maps, doubles and verbatim strings of their own.
    Resp3,
}

/// Replies, encoded into a buffer as they are produced.
pub struct Out {
    /// The encoded replies not yet written to the socket.
    pub buf: BytesMut,
    /// Which protocol to encode for.
    pub proto: Proto,
}

impl Out {
    /// An empty buffer for `proto`.
    pub fn new(proto: Proto) -> Out {
        Out {
            buf: BytesMut::with_capacity(16 << 10),
            proto,
        }
    }

    fn header(&mut self, kind: u8, n: i64) {
        self.buf.extend_from_slice(&[kind]);
        self.buf.extend_from_slice(n.to_string().as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+OK`-style status.
    pub fn simple(&mut self, s: &str) {
        self.buf.extend_from_slice(b"+");
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An error: `msg` starts with its code (`ERR`, `WRONGPASS`, ...).
    pub fn error(&mut self, msg: &str) {
        self.buf.extend_from_slice(b"-");
        // An error is one line.
        for b in msg.bytes() {
            self.buf
                .extend_from_slice(&[if b == b'\r' || b == b'\n' { b' ' } else { b }]);
        }
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An integer.
    pub fn int(&mut self, n: i64) {
        self.header(b':', n);
    }

    /// A bulk string.
    pub fn bulk(&mut self, b: &[u8]) {
        self.header(b'$', b.len() as i64);
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// A bulk string or the null reply.
    pub fn opt_bulk(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => self.bulk(b),
            None => self.null(),
        }
    }

    /// The null reply (RESP2: the null bulk string).
    pub fn null(&mut self) {
        match self.proto {
            Proto::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// The header of an array of `n` replies, which follow.
    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// The header of a map of `n` pairs, which follow key, value, key, ...
    /// (RESP2: an array of `2n`).
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Proto::Resp2 => self.header(b'*', 2 * n as i64),
            Proto::Resp3 => self.header(b'%', n as i64),
        }
    }

    /// Text for people (INFO, CLIENT LIST): RESP3's verbatim string.
    pub fn verbatim(&mut self, text: &str) {
        match self.proto {
            Proto::Resp2 => self.bulk(text.as_bytes()),
            Proto::Resp3 => {
                self.header(b'=', text.len() as i64 + 4);
                self.buf.extend_from_slice(b"txt:");
                self.buf.extend_from_slice(text.as_bytes());
                self.buf.extend_from_slice(b"\r\n");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(req) = parse(&mut buf, &Limits::default())? {
            out.push(req.iter().map(|b| b.to_vec()).collect());
        }
        assert!(buf.is_empty(), "left over: {:?}", buf);
        Ok(out)
    }

    #[test]
    fn reads_arrays_and_inline_commands() {
        let got =
            parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n*0\r\n SET  a \"b c\\x41\"\r\n")
                .unwrap();
        let want: Vec<Vec<Vec<u8>>> = vec![
            vec![b"GET".to_vec(), b"k".to_vec()],
            vec![b"PING".to_vec()],
            vec![],
            vec![b"SET".to_vec(), b"a".to_vec(), b"b cA".to_vec()],
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_partial_request_consumes_nothing_at_any_cut() {
        let whole = b"*3\r\n$3\r\nSET\r\n$5\r\nhello\r\n$0\r\n\r\n";
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert_eq!(parse(&mut buf, &Limits::default()), Ok(None), "cut {cut}");
            assert_eq!(buf.len(), cut);
        }
        let mut buf = BytesMut::from(&whole[..]);
        let req = parse(&mut buf, &Limits::default()).unwrap().unwrap();
        assert_eq!(req, vec![&b"SET"[..], b"hello", b""]);
    }

    #[test]
    fn refuses_lengths_past_the_limits_before_buffering() {
        let limits = Limits {
            max_bulk_bytes: 10,
            max_request_bytes: 100,
            max_args: 4,
        };
        for bad in [
            &b"*5\r\n"[..],
            b"*1\r\n$11\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$99999999999999999999999\r\n",
            b"*2\r\n$1\r\na\r\n:1\r\n",
            b"*1\r\n$1\r\nab\r\n",
            b"*x\r\n",
            b"*1\n",
            b"\"unbalanced\r\n",
        ] {
            let mut buf = BytesMut::from(bad);
            assert!(
                parse(&mut buf, &limits).is_err(),
                "{:?}",
                bad.escape_ascii()
            );
        }
        let mut long = BytesMut::from(&b"GET "[..]);
        long.extend_from_slice(&vec![b'a'; MAX_LINE_BYTES + 10]);
        assert!(parse(&mut long, &limits).is_err());
        let mut big = BytesMut::from(&b"*10\r\n"[..]);
        for _ in 0..10 {
            big.extend_from_slice(b"$10\r\n0123456789\r\n");
        }
        let limits = Limits {
            max_args: 10,
            ..limits
        };
        assert!(parse(&mut big, &limits).is_err(), "over max_request_bytes");
    }

    #[test]
    fn encodes_both_protocols() {
        let mut o = Out::new(Proto::Resp2);
        o.null();
        o.map(1);
        o.bulk(b"k");
        o.int(-3);
        o.error("ERR bad\nline");
        assert_eq!(
            &o.buf[..],
            b"$-1\r\n*2\r\n$1\r\nk\r\n:-3\r\n-ERR bad line\r\n"
        );
        let mut o = Out::new(Proto::Resp3);
        o.null();
        o.map(1);
        o.verbatim("hi");
        assert_eq!(&o.buf[..], b"_\r\n%1\r\n=6\r\ntxt:hi\r\n");
    }
}
