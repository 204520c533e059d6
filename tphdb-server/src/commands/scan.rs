//! SCAN and the cursors it resumes from.

use std::collections::HashMap;
use std::collections::VecDeque;

use bytes::Bytes;
use tphdb::Direction;
use tphdb::IteratorMode;

use super::db_error;
use super::lower;
use super::parse_int;
use super::syntax_error;
use crate::glob;
use crate::resp::Out;
use crate::server::Shared;

/// Resume points of SCAN cursors. Clients take cursors for integers
/// (`redis-cli` parses them as 64-bit), so a cursor names the key to
/// resume from, kept here; the oldest are forgotten past the bounds, and a
/// forgotten cursor is an error rather than a silent restart.
#[derive(Default)]
pub(crate) struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    order: VecDeque<u64>,
    bytes: usize,
}

/// Cursors kept at most, and bytes of their keys.
const MAX_CURSORS: usize = 100_000;

const MAX_CURSOR_BYTES: usize = 64 << 20;

impl Cursors {
    fn add(&mut self, resume: Vec<u8>) -> u64 {
        while self.keys.len() >= MAX_CURSORS || self.bytes + resume.len() > MAX_CURSOR_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(k) = self.keys.remove(&old) {
                self.bytes -= k.len();
            }
        }
        self.next += 1;
        self.bytes += resume.len();
        self.keys.insert(self.next, resume);
        self.order.push_back(self.next);
        self.next
    }

    fn take(&mut self, cursor: u64) -> Option<Vec<u8>> {
        let k = self.keys.remove(&cursor)?;
        self.bytes -= k.len();
        Some(k)
    }
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: up to `count`
/// keys examined in key order from where the cursor left off.
pub(super) fn scan(shared: &Shared, args: &[Bytes], out: &mut Out) {
    let Some(cursor) = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return out.error("ERR invalid cursor");
    };
    let (mut pattern, mut count, mut only_strings) = (None, 10usize, true);
    let mut i = 2;
    while i < args.len() {
        let opt = lower(&args[i]);
        let Some(v) = args.get(i + 1) else {
            return syntax_error(out);
        };
        match opt.as_str() {
            "match" => pattern = Some(v.clone()),
            "count" => match parse_int(v) {
                Some(n) if n >= 1 => count = (n as usize).min(1 << 20),
                _ => return syntax_error(out),
            },
            "type" => only_strings = lower(v) == "string",
            _ => return syntax_error(out),
        }
        i += 2;
    }
    let start = if cursor == 0 {
        Vec::new()
    } else {
        match shared.cursors.lock().take(cursor) {
            Some(k) => k,
            None => return out.error("ERR invalid cursor"),
        }
    };
    let mut keys = Vec::new();
    let mut next = None;
    if only_strings {
        let iter = shared
            .db
            .iterator(IteratorMode::From(&start, Direction::Forward));
        for (n, item) in iter.enumerate() {
            let (k, _) = match item {
                Ok(kv) => kv,
                Err(e) => return db_error(out, &e),
            };
            if n == count {
                next = Some(k.to_vec());
                break;
            }
            if pattern.as_ref().is_none_or(|p| glob::matches(p, &k)) {
                keys.push(k);
            }
        }
    }
    let next = next.map_or(0, |k| shared.cursors.lock().add(k));
    out.array(2);
    out.bulk(next.to_string().as_bytes());
    out.array(keys.len());
    for k in keys {
        out.bulk(&k);
    }
}
