//! The line format of `scan`, `dump` and `load` (docs/cli.md): one entry
//! per line, key and value separated by a tab, each escaped or in hex.
//! A dump starts with a header line and ends with a trailer holding the
//! entry count and a CRC-32C of the entry lines, so a cut or damaged dump
//! is refused instead of loaded short.

use std::io::{self, BufRead, Write};

/// How keys and values are written in a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Encoding {
    /// Printable ASCII as is; `\\`, `\t`, `\n`, `\r` and `\xNN` for the rest
    /// (and for `#`, so no entry line starts like a header).
    Escaped,
    /// Lowercase hex.
    Hex,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::Escaped => "escaped",
            Encoding::Hex => "hex",
        }
    }

    pub fn encode(self, bytes: &[u8], out: &mut Vec<u8>) {
        match self {
            Encoding::Hex => {
                for b in bytes {
                    let _ = write!(out, "{b:02x}");
                }
            }
            Encoding::Escaped => {
                for &b in bytes {
                    match b {
                        b'\\' => out.extend_from_slice(b"\\\\"),
                        b'\t' => out.extend_from_slice(b"\\t"),
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b'\r' => out.extend_from_slice(b"\\r"),
                        b'#' => out.extend_from_slice(b"\\x23"),
                        0x20..=0x7e => out.push(b),
                        _ => {
                            let _ = write!(out, "\\x{b:02x}");
                        }
                    }
                }
            }
        }
    }

    pub fn decode(self, text: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Encoding::Hex => {
                if text.len() % 2 != 0 {
                    return Err("odd number of hex digits".into());
                }
                text.chunks(2).map(hex_byte).collect()
            }
            Encoding::Escaped => {
                let mut out = Vec::with_capacity(text.len());
                let mut i = 0;
                while i < text.len() {
                    let b = text[i];
                    i += 1;
                    if b != b'\\' {
                        out.push(b);
                        continue;
                    }
                    let (c, used) = match text.get(i) {
                        Some(b'\\') => (b'\\', 1),
                        Some(b't') => (b'\t', 1),
                        Some(b'n') => (b'\n', 1),
                        Some(b'r') => (b'\r', 1),
                        Some(b'x') => {
                            let digits =
                                text.get(i + 1..i + 3).ok_or("\\x needs two hex digits")?;
                            (hex_byte(digits)?, 3)
                        }
                        Some(other) => {
                            return Err(format!("unknown escape \\{}", char::from(*other)));
                        }
                        None => return Err("a line ends in a lone backslash".into()),
                    };
                    out.push(c);
                    i += used;
                }
                Ok(out)
            }
        }
    }
}

fn hex_byte(pair: &[u8]) -> Result<u8, String> {
    let digit = |c: u8| {
        (c as char)
            .to_digit(16)
            .ok_or(format!("not a hex digit: {:?}", c as char))
    };
    Ok((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
}

/// Writes entry lines, counting them and their checksum for the trailer.
pub struct LineWriter<W: Write> {
    out: W,
    encoding: Encoding,
    line: Vec<u8>,
    pub count: u64,
    crc: u32,
}

impl<W: Write> LineWriter<W> {
    pub fn new(out: W, encoding: Encoding) -> Self {
        LineWriter {
            out,
            encoding,
            line: Vec::new(),
            count: 0,
            crc: 0,
        }
    }

    pub fn header(&mut self) -> io::Result<()> {
        writeln!(self.out, "{HEADER} format={}", self.encoding.name())
    }

    /// One entry; without a value, the key alone (`--keys-only`).
    pub fn entry(&mut self, key: &[u8], value: Option<&[u8]>) -> io::Result<()> {
        self.line.clear();
        self.encoding.encode(key, &mut self.line);
        if let Some(v) = value {
            self.line.push(b'\t');
            self.encoding.encode(v, &mut self.line);
        }
        self.line.push(b'\n');
        self.crc = crc32c::crc32c_append(self.crc, &self.line);
        self.count += 1;
        self.out.write_all(&self.line)
    }

    pub fn trailer(&mut self) -> io::Result<()> {
        writeln!(
            self.out,
            "{TRAILER} entries={} crc32c={:08x}",
            self.count, self.crc
        )
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

const HEADER: &str = "# tphdb dump v1";
const TRAILER: &str = "# end";

/// Reads entry lines: from a dump (header first, trailer checked at the
/// end) or from lines without either.
pub struct LineReader<R: BufRead> {
    input: R,
    encoding: Encoding,
    line: Vec<u8>,
    number: u64,
    count: u64,
    crc: u32,
    /// A header was read: a trailer must end the input.
    is_dump: bool,
    done: bool,
}

impl<R: BufRead> LineReader<R> {
    /// `encoding` applies to input without a header; a header names its
    /// own.
    pub fn new(input: R, encoding: Encoding) -> Self {
        LineReader {
            input,
            encoding,
            line: Vec::new(),
            number: 0,
            count: 0,
            crc: 0,
            is_dump: false,
            done: false,
        }
    }

    fn fail(&self, what: impl std::fmt::Display) -> String {
        format!("line {}: {what}", self.number)
    }

    /// The next entry, or `None` at the end of a well-formed input.
    pub fn next_entry(&mut self) -> Result<Option<Entry>, String> {
        loop {
            if self.done {
                return Ok(None);
            }
            self.line.clear();
            let n = self
                .input
                .read_until(b'\n', &mut self.line)
                .map_err(|e| format!("reading the input: {e}"))?;
            if n == 0 {
                if self.is_dump {
                    return Err("the dump ends without its trailer: it was cut short".into());
                }
                self.done = true;
                return Ok(None);
            }
            self.number += 1;
            if self.line.last() != Some(&b'\n') {
                return Err(self.fail("the last line has no newline: the input was cut short"));
            }
            if self.line.starts_with(b"#") {
                self.control_line()?;
                continue;
            }
            if self.line == b"\n" {
                return Err(self.fail("an empty line"));
            }
            self.crc = crc32c::crc32c_append(self.crc, &self.line);
            self.count += 1;
            let text = &self.line[..self.line.len() - 1];
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let mut parts = text.splitn(2, |&b| b == b'\t');
            let key = parts.next().unwrap_or_default();
            let value = parts
                .next()
                .ok_or_else(|| self.fail("no tab between key and value"))?;
            let key = self
                .encoding
                .decode(key)
                .map_err(|e| self.fail(format!("key: {e}")))?;
            let value = self
                .encoding
                .decode(value)
                .map_err(|e| self.fail(format!("value: {e}")))?;
            return Ok(Some((key, value)));
        }
    }

    fn control_line(&mut self) -> Result<(), String> {
        let text = String::from_utf8_lossy(&self.line).trim_end().to_string();
        if let Some(rest) = text.strip_prefix(HEADER) {
            if self.number != 1 {
                return Err(self.fail("a dump header after the first line"));
            }
            self.encoding = match rest.trim() {
                "format=escaped" => Encoding::Escaped,
                "format=hex" => Encoding::Hex,
                other => return Err(self.fail(format!("unknown dump format {other:?}"))),
            };
            self.is_dump = true;
            return Ok(());
        }
        if let Some(rest) = text.strip_prefix(TRAILER) {
            let want = format!(" entries={} crc32c={:08x}", self.count, self.crc);
            if rest != want {
                return Err(self.fail(format!(
                    "the trailer says{rest} but the lines before it have{want}: the dump is damaged"
                )));
            }
            let more = self
                .input
                .fill_buf()
                .map_err(|e| format!("reading the input: {e}"))?;
            if !more.is_empty() {
                return Err(self.fail("lines after the dump's trailer"));
            }
            self.done = true;
            return Ok(());
        }
        Err(self.fail("a line starting with # that is neither a dump header nor its trailer"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_in_both_encodings() {
        let all: Vec<u8> = (0..=255).collect();
        for enc in [Encoding::Escaped, Encoding::Hex] {
            let mut text = Vec::new();
            enc.encode(&all, &mut text);
            assert!(!text.contains(&b'\n') && !text.contains(&b'\t') && !text.contains(&b'#'));
            assert_eq!(enc.decode(&text).unwrap(), all);
        }
    }

    #[test]
    fn a_dump_reads_back_and_damage_is_refused() {
        let mut w = LineWriter::new(Vec::new(), Encoding::Escaped);
        w.header().unwrap();
        w.entry(b"a\tb", Some(b"#1\n")).unwrap();
        w.entry(b"", Some(b"")).unwrap();
        w.trailer().unwrap();
        let dump = w.into_inner();
        let read = |bytes: &[u8]| -> Result<Vec<Entry>, String> {
            let mut r = LineReader::new(bytes, Encoding::Hex);
            let mut out = Vec::new();
            while let Some(e) = r.next_entry()? {
                out.push(e);
            }
            Ok(out)
        };
        assert_eq!(
            read(&dump).unwrap(),
            vec![(b"a\tb".to_vec(), b"#1\n".to_vec()), (vec![], vec![])]
        );
        // Cut anywhere before the trailer's end: refused.
        for cut in 1..dump.len() {
            assert!(read(&dump[..cut]).is_err(), "cut at {cut}");
        }
        // A changed byte in an entry line: refused.
        let mut bad = dump.clone();
        let first_entry = dump.iter().position(|&b| b == b'\n').unwrap() + 1;
        let at = first_entry + dump[first_entry..].iter().position(|&b| b == b'a').unwrap();
        bad[at] = b'c';
        assert!(read(&bad).unwrap_err().contains("damaged"));
        // Lines after the trailer: refused.
        let mut longer = dump.clone();
        longer.extend_from_slice(b"x\ty\n");
        assert!(read(&longer)
            .unwrap_err()
            .contains("after the dump's trailer"));
    }
}
