//! The commands: each reads its arguments, works on the database and
//! encodes its reply, in Redis's words where a client may look at them.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use parking_lot::{Mutex, MutexGuard};
use tphdb::{Direction, IteratorMode, WriteBatch};

use crate::glob;
use crate::resp::{Out, Proto};
use crate::server::{Client, Shared};

/// Whether the connection goes on after a command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Close,
}

/// The version of Redis whose commands the server speaks, for clients
/// that read `redis_version` to pick features.
pub(crate) const REDIS_VERSION: &str = "7.2.0";

/// What `COMMAND` reports of a command.
struct Spec {
    name: &'static str,
    /// Arguments with the name; negative: at least that many.
    arity: i64,
    flags: &'static [&'static str],
    first_key: i64,
    last_key: i64,
    key_step: i64,
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    first_key: i64,
    last_key: i64,
    key_step: i64,
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key,
        last_key,
        key_step,
    }
}

const COMMANDS: &[Spec] = &[
    spec(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
    ),
    spec("client", -2, &["noscript", "loading", "stale"], 0, 0, 0),
    spec("command", -1, &["loading", "stale"], 0, 0, 0),
    spec(
        "config",
        -2,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
    ),
    spec("dbsize", 1, &["readonly", "fast"], 0, 0, 0),
    spec("del", -2, &["write"], 1, -1, 1),
    spec("echo", 2, &["fast"], 0, 0, 0),
    spec("exists", -2, &["readonly", "fast"], 1, -1, 1),
    spec("flushall", -1, &["write"], 0, 0, 0),
    spec("flushdb", -1, &["write"], 0, 0, 0),
    spec("get", 2, &["readonly", "fast"], 1, 1, 1),
    spec("getdel", 2, &["write", "fast"], 1, 1, 1),
    spec(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
    ),
    spec("info", -1, &["loading", "stale"], 0, 0, 0),
    spec("mget", -2, &["readonly", "fast"], 1, -1, 1),
    spec("mset", -3, &["write", "denyoom"], 1, -1, 2),
    spec("ping", -1, &["fast"], 0, 0, 0),
    spec("pttl", 2, &["readonly", "fast"], 1, 1, 1),
    spec(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth"],
        0,
        0,
        0,
    ),
    spec("scan", -2, &["readonly"], 0, 0, 0),
    spec("select", 2, &["loading", "stale", "fast"], 0, 0, 0),
    spec("set", -3, &["write", "denyoom"], 1, 1, 1),
    spec("setnx", 3, &["write", "denyoom", "fast"], 1, 1, 1),
    spec("strlen", 2, &["readonly", "fast"], 1, 1, 1),
    spec("ttl", 2, &["readonly", "fast"], 1, 1, 1),
    spec("type", 2, &["readonly", "fast"], 1, 1, 1),
];

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

/// A pending write is committed past this many bytes.
const MAX_PENDING_BYTES: usize = 1 << 20;

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
    fn lock<'a>(&self, keys: impl IntoIterator<Item = &'a [u8]>) -> Vec<MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = keys.into_iter().map(Self::index).collect();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.0[i].lock()).collect()
    }
}

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

fn lower(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_lowercase()
}

fn wrong_args(out: &mut Out, cmd: &str) {
    out.error(&format!(
        "ERR wrong number of arguments for '{cmd}' command"
    ));
}

fn db_error(out: &mut Out, e: &tphdb::Error) {
    out.error(&format!("ERR tphdb: {e}"));
}

fn syntax_error(out: &mut Out) {
    out.error("ERR syntax error");
}

fn parse_int(arg: &[u8]) -> Option<i64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

/// Runs one request (`args` non-empty) and encodes its reply.
pub(crate) fn execute(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) -> Flow {
    shared.counters.commands.fetch_add(1, Relaxed);
    // Matched without lowering a copy: this runs for every request.
    let spec = COMMANDS
        .iter()
        .find(|c| c.name.as_bytes().eq_ignore_ascii_case(&args[0]));
    *client.info.last.lock() = (
        std::time::Instant::now(),
        spec.map_or("unknown", |c| c.name),
    );
    let Some(&Spec {
        name: cmd, arity, ..
    }) = spec
    else {
        let mut msg = format!(
            "ERR unknown command '{}', with args beginning with: ",
            args[0].escape_ascii()
        );
        for a in args[1..].iter().take(8) {
            let _ = write!(msg, "'{}' ", a.escape_ascii());
        }
        out.error(&msg);
        return Flow::Continue;
    };
    if (arity > 0 && args.len() as i64 != arity) || (arity < 0 && (args.len() as i64) < -arity) {
        wrong_args(out, cmd);
        return Flow::Continue;
    }
    if !client.authed && !matches!(cmd, "auth" | "hello" | "quit") {
        out.error("NOAUTH Authentication required.");
        return Flow::Continue;
    }
    if cmd == "set" && args.len() == 3 {
        let p = &mut client.pending;
        if p.keys.is_empty() {
            p.out_start = out.buf.len();
        }
        p.batch.put(&args[1], &args[2]);
        p.keys.push(args[1].clone());
        out.simple("OK");
        if p.batch.size_in_bytes() >= MAX_PENDING_BYTES {
            commit_pending(shared, client, out);
        }
        return Flow::Continue;
    }
    commit_pending(shared, client, out);
    let db = &shared.db;
    match cmd {
        "ping" => match args.len() {
            1 => out.simple("PONG"),
            2 => out.bulk(&args[1]),
            _ => wrong_args(out, cmd),
        },
        "echo" => out.bulk(&args[1]),
        "quit" => {
            out.simple("OK");
            return Flow::Close;
        }
        "auth" => auth(shared, client, &args[1..], out),
        "hello" => hello(shared, client, args, out),
        "select" => match parse_int(&args[1]) {
            Some(0) => out.simple("OK"),
            Some(_) => out.error("ERR DB index is out of range"),
            None => out.error("ERR value is not an integer or out of range"),
        },
        "get" => match db.get_pinned(&args[1]) {
            Ok(v) => {
                count_hit(shared, v.is_some());
                out.opt_bulk(v.as_deref());
            }
            Err(e) => db_error(out, &e),
        },
        "strlen" => match db.get_pinned(&args[1]) {
            Ok(v) => out.int(v.map_or(0, |v| v.len() as i64)),
            Err(e) => db_error(out, &e),
        },
        "type" => match db.get_pinned(&args[1]) {
            Ok(Some(_)) => out.simple("string"),
            Ok(None) => out.simple("none"),
            Err(e) => db_error(out, &e),
        },
        "ttl" | "pttl" => match db.get_pinned(&args[1]) {
            Ok(v) => out.int(if v.is_some() { -1 } else { -2 }),
            Err(e) => db_error(out, &e),
        },
        "mget" => {
            let values = db.multi_get(&args[1..]);
            out.array(values.len());
            for v in values {
                match v {
                    Ok(v) => {
                        count_hit(shared, v.is_some());
                        out.opt_bulk(v.as_deref());
                    }
                    Err(_) => out.null(),
                }
            }
        }
        "exists" => {
            let mut n = 0;
            for k in &args[1..] {
                match db.get_pinned(k) {
                    Ok(v) => n += i64::from(v.is_some()),
                    Err(e) => {
                        db_error(out, &e);
                        return Flow::Continue;
                    }
                }
            }
            out.int(n);
        }
        "set" => set(shared, args, out),
        "setnx" => {
            let _g = shared.stripes.lock([&args[1][..]]);
            match db.get_pinned(&args[1]) {
                Ok(Some(_)) => out.int(0),
                Ok(None) => match db.put(&args[1], &args[2]) {
                    Ok(()) => out.int(1),
                    Err(e) => db_error(out, &e),
                },
                Err(e) => db_error(out, &e),
            }
        }
        "mset" => {
            if args.len() % 2 == 0 {
                wrong_args(out, cmd);
                return Flow::Continue;
            }
            let _g = shared
                .stripes
                .lock(args[1..].iter().step_by(2).map(|k| &k[..]));
            let mut batch = WriteBatch::new();
            for kv in args[1..].chunks(2) {
                batch.put(&kv[0], &kv[1]);
            }
            match db.write(batch) {
                Ok(()) => out.simple("OK"),
                Err(e) => db_error(out, &e),
            }
        }
        "del" => {
            let _g = shared.stripes.lock(args[1..].iter().map(|k| &k[..]));
            let mut batch = WriteBatch::new();
            let mut n = 0;
            for k in &args[1..] {
                match db.get_pinned(k) {
                    Ok(Some(_)) => {
                        n += 1;
                        batch.delete(k);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        db_error(out, &e);
                        return Flow::Continue;
                    }
                }
            }
            match if n > 0 { db.write(batch) } else { Ok(()) } {
                Ok(()) => out.int(n),
                Err(e) => db_error(out, &e),
            }
        }
        "getdel" => {
            let _g = shared.stripes.lock([&args[1][..]]);
            match db.get_pinned(&args[1]) {
                Ok(Some(v)) => match db.delete(&args[1]) {
                    Ok(()) => out.bulk(&v),
                    Err(e) => db_error(out, &e),
                },
                Ok(None) => out.null(),
                Err(e) => db_error(out, &e),
            }
        }
        "scan" => scan(shared, args, out),
        "dbsize" => out.int(dbsize(shared) as i64),
        "flushall" | "flushdb" => flushall(shared, cmd, out),
        "info" => out.verbatim(&crate::info::info(shared, args.get(1).map(|a| lower(a)))),
        "client" => client_command(shared, client, args, out),
        "command" => command(args, out),
        "config" => config(shared, args, out),
        _ => out.error("ERR command not implemented"),
    }
    Flow::Continue
}

/// Keys, estimated: live entries of the tables plus the memtables' entries
/// (overwrites counted again until flushed), as `INFO keyspace` says.
pub(crate) fn dbsize(shared: &Shared) -> u64 {
    shared
        .db
        .property_value("tphdb.estimate-num-keys")
        .ok()
        .flatten()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn count_hit(shared: &Shared, hit: bool) {
    if hit {
        shared.counters.hits.fetch_add(1, Relaxed);
    } else {
        shared.counters.misses.fetch_add(1, Relaxed);
    }
}

fn check_password(shared: &Shared, user: &[u8], pass: &[u8]) -> Result<(), &'static str> {
    match &shared.cfg.requirepass {
        None => Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        Some(p) if user == b"default" && p.as_bytes() == pass => Ok(()),
        Some(_) => Err("WRONGPASS invalid username-password pair or user is disabled."),
    }
}

fn auth(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) {
    let (user, pass) = match args {
        [pass] => (&b"default"[..], pass),
        [user, pass] => (&user[..], pass),
        _ => return syntax_error(out),
    };
    match check_password(shared, user, pass) {
        Ok(()) => {
            client.authed = true;
            out.simple("OK");
        }
        Err(e) => out.error(e),
    }
}

fn hello(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) {
    let mut proto = *client.info.proto.lock();
    let mut i = 1;
    if let Some(v) = args.get(1) {
        match parse_int(v) {
            Some(2) => proto = Proto::Resp2,
            Some(3) => proto = Proto::Resp3,
            Some(_) => return out.error("NOPROTO unsupported protocol version"),
            None => return out.error("ERR Protocol version is not an integer or out of range"),
        }
        i = 2;
    }
    let mut name = None;
    while i < args.len() {
        match lower(&args[i]).as_str() {
            "auth" if i + 2 < args.len() => {
                if let Err(e) = check_password(shared, &args[i + 1], &args[i + 2]) {
                    return out.error(e);
                }
                client.authed = true;
                i += 3;
            }
            "setname" if i + 1 < args.len() => {
                name = Some(String::from_utf8_lossy(&args[i + 1]).into_owned());
                i += 2;
            }
            _ => return syntax_error(out),
        }
    }
    if !client.authed {
        return out.error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
    }
    if name.is_some() {
        *client.info.name.lock() = name;
    }
    *client.info.proto.lock() = proto;
    out.proto = proto;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"tphdb");
    out.bulk(b"version");
    out.bulk(env!("CARGO_PKG_VERSION").as_bytes());
    out.bulk(b"proto");
    out.int(if proto == Proto::Resp3 { 3 } else { 2 });
    out.bulk(b"id");
    out.int(client.info.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
}

fn set(shared: &Shared, args: &[Bytes], out: &mut Out) {
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

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: up to `count`
/// keys examined in key order from where the cursor left off.
fn scan(shared: &Shared, args: &[Bytes], out: &mut Out) {
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

/// Deletes every key, in batches, while other clients go on.
fn flushall(shared: &Shared, cmd: &str, out: &mut Out) {
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

fn client_command(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) {
    match lower(&args[1]).as_str() {
        "id" => out.int(client.info.id as i64),
        "setname" if args.len() == 3 => {
            if args[2].iter().any(|&b| b <= b' ' || b > b'~') {
                return out.error(
                    "ERR Client names cannot contain spaces, newlines or special characters.",
                );
            }
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            *client.info.name.lock() = (!name.is_empty()).then_some(name);
            out.simple("OK");
        }
        "getname" => match client.info.name.lock().as_deref() {
            Some(n) => out.bulk(n.as_bytes()),
            None => out.null(),
        },
        "setinfo" if args.len() == 4 => {
            let value = String::from_utf8_lossy(&args[3]).into_owned();
            match lower(&args[2]).as_str() {
                "lib-name" => client.info.lib.lock().0 = value,
                "lib-ver" => client.info.lib.lock().1 = value,
                _ => return out.error("ERR Unrecognized option"),
            }
            out.simple("OK");
        }
        "list" | "info" => {
            let mut text = String::new();
            let clients: Vec<_> = if lower(&args[1]) == "info" {
                vec![client.info.clone()]
            } else {
                let mut all: Vec<_> = shared.clients.lock().values().cloned().collect();
                all.sort_by_key(|c| c.id);
                all
            };
            let now = std::time::Instant::now();
            for c in clients {
                let (last, cmd) = *c.last.lock();
                let lib = c.lib.lock().clone();
                let _ = writeln!(
                    text,
                    "id={} addr={} laddr={} fd=0 name={} age={} idle={} flags=N db=0 cmd={} resp={} lib-name={} lib-ver={}",
                    c.id,
                    c.addr,
                    c.local,
                    c.name.lock().as_deref().unwrap_or(""),
                    now.duration_since(c.since).as_secs(),
                    now.duration_since(last).as_secs(),
                    cmd,
                    if *c.proto.lock() == Proto::Resp3 { 3 } else { 2 },
                    lib.0,
                    lib.1
                );
            }
            out.verbatim(&text);
        }
        _ => out.error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            args[1].escape_ascii()
        )),
    }
}

fn command_info(out: &mut Out, c: &Spec) {
    out.array(6);
    out.bulk(c.name.as_bytes());
    out.int(c.arity);
    out.array(c.flags.len());
    for f in c.flags {
        out.simple(f);
    }
    out.int(c.first_key);
    out.int(c.last_key);
    out.int(c.key_step);
}

fn command(args: &[Bytes], out: &mut Out) {
    match args.get(1).map(|a| lower(a)).as_deref() {
        None => {
            out.array(COMMANDS.len());
            for c in COMMANDS {
                command_info(out, c);
            }
        }
        Some("count") => out.int(COMMANDS.len() as i64),
        Some("list") => {
            out.array(COMMANDS.len());
            for c in COMMANDS {
                out.bulk(c.name.as_bytes());
            }
        }
        Some("info") => {
            out.array(args.len() - 2);
            for a in &args[2..] {
                match COMMANDS.iter().find(|c| c.name == lower(a)) {
                    Some(c) => command_info(out, c),
                    None => out.null(),
                }
            }
        }
        // No documentation to give: an empty map, as for unknown names.
        Some("docs") => out.map(0),
        Some(_) => out.error("ERR unknown subcommand. Try COMMAND HELP."),
    }
}

/// CONFIG GET of the parameters clients ask for (`redis-benchmark` asks
/// for `save` and `appendonly`); CONFIG SET is refused.
fn config(shared: &Shared, args: &[Bytes], out: &mut Out) {
    if lower(&args[1]) != "get" || args.len() < 3 {
        return out
            .error("ERR CONFIG supports only GET here; tphdb-server takes its settings as flags");
    }
    let cfg = &shared.cfg;
    let fsync = format!("{:?}", cfg.appendfsync).to_ascii_lowercase();
    let params: Vec<(&str, String)> = vec![
        ("save", String::new()),
        (
            "appendonly",
            if cfg.appendfsync == crate::server::Fsync::No {
                "no"
            } else {
                "yes"
            }
            .into(),
        ),
        ("appendfsync", fsync),
        ("maxclients", cfg.maxclients.to_string()),
        (
            "timeout",
            cfg.timeout.map_or(0, |t| t.as_secs()).to_string(),
        ),
        ("proto-max-bulk-len", cfg.limits.max_bulk_bytes.to_string()),
        ("port", shared.port.to_string()),
        ("bind", cfg.bind.clone()),
        ("databases", "1".into()),
        ("dir", cfg.dir.display().to_string()),
    ];
    let wanted: Vec<String> = args[2..].iter().map(|a| lower(a)).collect();
    let hits: Vec<_> = params
        .iter()
        .filter(|(k, _)| {
            wanted
                .iter()
                .any(|w| glob::matches(w.as_bytes(), k.as_bytes()))
        })
        .collect();
    out.map(hits.len());
    for (k, v) in hits {
        out.bulk(k.as_bytes());
        out.bulk(v.as_bytes());
    }
}
