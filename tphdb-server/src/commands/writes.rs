//! Writes: pipelined SETs gathered into one batch, the key stripes that
//! make read-then-write commands one step, SET with its options, FLUSHALL.

use bytes::Bytes;
use parking_lot::Mutex;
use parking_lot::MutexGuard;
use tphdb::IteratorMode;
use tphdb::WriteBatch;

use super::db_error;
use super::lower;
use super::syntax_error;
use crate::resp::Out;
use crate::server::Client;
use crate::server::Shared;

/// Plain SETs of one client's pipeline, gathered into one write: a
/// pipeline of SETs costs one WAL append (and one sync under
/// `appendfsync always`) instead of one each. Their `+OK` replies are
/// encoded at once but never sent before the write is done; any other
/// command, and every write to the socket, commits them first.
#[derive(Default)]
pub(crate) struct Pending {
    batch: WriteBatch,
    keys: Vec<Bytes>,
    /// Where in the reply buffer their replies start.
    out_start: usize,
}

impl Pending {
    /// Whether no write waits to be committed.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A pending write is committed past this many bytes.
const MAX_PENDING_BYTES: usize = 1 << 20;

/// Adds a plain `SET key value` to the client's pending write, answering
/// `+OK` once it is committed.
pub(super) fn add_pending_set(
    shared: &Shared,
    client: &mut Client,
    key: &Bytes,
    value: &[u8],
    out: &mut Out,
) {
    let p = &mut client.pending;
    if p.keys.is_empty() {
        p.out_start = out.buf.len();
    }
    p.batch.put(key, value);
    p.keys.push(key.clone());
    out.simple("OK");
    if p.batch.size_in_bytes() >= MAX_PENDING_BYTES {
        commit_pending(shared, client, out);
    }
}

/// Commits the pending SETs; if the write fails, their replies become the
/// error.
pub(crate) fn commit_pending(shared: &Shared, client: &mut Client, out: &mut Out) {
    let p = &mut client.pending;
    if p.keys.is_empty() {
        return;
    }
    let batch = std::mem::take(&mut p.batch);
    let result = {
        let _g = shared.stripes.lock(p.keys.iter().map(|k| &k[..]));
        shared.db.write(batch)
    };
    let n = p.keys.len();
    p.keys.clear();
    if let Err(e) = result {
        out.buf.truncate(p.out_start);
        for _ in 0..n {
            db_error(out, &e);
        }
    }
}

/// Locks that make a command's reads and writes of a key one step for
/// other clients (`SET NX` reads then writes): a key's stripe is held
/// around every write to it.
pub(crate) struct Stripes(Box<[Mutex<()>]>);

const STRIPES: usize = 1024;

impl Default for Stripes {
    fn default() -> Self {
        Stripes((0..STRIPES).map(|_| Mutex::new(())).collect())
    }
}

impl Stripes {
    fn index(key: &[u8]) -> usize {
        (tphdb::hash::key_hash(key) % STRIPES as u64) as usize
    }

    /// Locks the stripes of `keys`, in stripe order so that two commands
    /// never wait on each other.
    pub(super) fn lock<'a>(
        &self,
        keys: impl IntoIterator<Item = &'a [u8]>,
    ) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = keys.into_iter().map(Self::index).collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.0[i].lock()).collect()
    }
}

pub(super) fn set(shared: &Shared, args: &[Bytes], out: &mut Out) {
    let (mut nx, mut xx, mut get) = (false, false, false);
    for a in &args[3..] {
        match lower(a).as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "get" => get = true,
            "keepttl" => {}
            "ex" | "px" | "exat" | "pxat" => {
                return out
                    .error("ERR tphdb-server does not support key expiry (EX, PX, EXAT, PXAT)")
            }
            _ => return syntax_error(out),
        }
    }
    if nx && xx {
        return syntax_error(out);
    }
    let (key, value) = (&args[1], &args[2]);
    let db = &shared.db;
    let _g = shared.stripes.lock([&key[..]]);
    let old = if nx || xx || get {
        match db.get_pinned(key) {
            Ok(v) => v,
            Err(e) => return db_error(out, &e),
        }
    } else {
        None
    };
    let skip = (nx && old.is_some()) || (xx && old.is_none());
    if !skip {
        if let Err(e) = db.put(key, value) {
            return db_error(out, &e);
        }
    }
    if get {
        out.opt_bulk(old.as_deref());
    } else if skip {
        out.null();
    } else {
        out.simple("OK");
    }
}

/// Deletes every key, in batches, while other clients go on.
pub(super) fn flushall(shared: &Shared, cmd: &str, out: &mut Out) {
    if !shared.cfg.enable_flushall {
        return out.error(&format!(
            "ERR {} is disabled: start tphdb-server with --enable-flushall",
            cmd.to_ascii_uppercase()
        ));
    }
    let db = &shared.db;
    loop {
        let keys: Vec<Bytes> = db
            .iterator(IteratorMode::Start)
            .take(1024)
            .map(|r| r.map(|(k, _)| k))
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        if keys.is_empty() {
            break;
        }
        let _g = shared.stripes.lock(keys.iter().map(|k| &k[..]));
        let mut batch = WriteBatch::new();
        for k in &keys {
            batch.delete(k);
        }
        if let Err(e) = db.write(batch) {
            return db_error(out, &e);
        }
    }
    out.simple("OK");
}
