//! The commands: each reads its arguments, works on the database and
//! encodes its reply, in Redis's words where a client may look at them.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use tphdb::WriteBatch;

use crate::resp::Out;
use crate::server::{Client, Shared};

mod admin;
mod scan;
mod table;
mod writes;

use admin::{auth, client_command, config, hello};
use scan::scan;
pub(crate) use scan::Cursors;
use table::{command, Spec, COMMANDS};
use writes::{add_pending_set, flushall, set};
pub(crate) use writes::{commit_pending, Pending, Stripes};

/// Whether the connection goes on after a command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Close,
}

/// The version of Redis whose commands the server speaks, for clients
/// that read `redis_version` to pick features.
pub(crate) const REDIS_VERSION: &str = "7.2.0";

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

/// Plain GETs of a client's pipeline held back, at most this many, to be
/// read together.
const MAX_PENDING_GETS: usize = 64;

/// Reads the client's held-back GETs together and encodes their replies.
/// Runs before any other reply is encoded and before the replies are sent.
pub(crate) fn flush_gets(shared: &Shared, client: &mut Client, out: &mut Out) {
    if client.gets.is_empty() {
        return;
    }
    for v in shared.db.multi_get_pinned(&client.gets) {
        match v {
            Ok(v) => {
                count_hit(shared, v.is_some());
                out.opt_bulk(v.as_deref());
            }
            Err(e) => db_error(out, &e),
        }
    }
    client.gets.clear();
}

/// Runs one request (`args` non-empty) and encodes its reply; a plain GET
/// is held back to be read with the pipeline's next ones (a batch of
/// lookups waits for memory side by side: see `DB::multi_get_pinned`).
pub(crate) fn execute(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) -> Flow {
    shared.counters.commands.fetch_add(1, Relaxed);
    let plain_get = args.len() == 2 && client.authed && args[0].eq_ignore_ascii_case(b"get");
    if !plain_get {
        // Its reply, whatever it is, follows theirs.
        flush_gets(shared, client, out);
    }
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
        add_pending_set(shared, client, &args[1], &args[2], out);
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
        "get" => {
            client.gets.push(args[1].clone());
            if client.gets.len() >= MAX_PENDING_GETS {
                flush_gets(shared, client, out);
            }
        }
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
            let values = db.multi_get_pinned(&args[1..]);
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
        "shutdown" => return shutdown(shared, &args[1..], out),
        _ => out.error("ERR command not implemented"),
    }
    Flow::Continue
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: stops the server as
/// SIGTERM does (connections finish, the database is flushed and closed);
/// as in Redis the client gets no reply, its connection closes. The
/// modifiers are accepted and change nothing: every acknowledged write is
/// in the WAL already, and the close syncs it. There is never a shutdown
/// to abort.
fn shutdown(shared: &Shared, args: &[Bytes], out: &mut Out) -> Flow {
    let mut abort = false;
    for a in args {
        match lower(a).as_str() {
            "nosave" | "save" | "now" | "force" => {}
            "abort" => abort = true,
            _ => {
                syntax_error(out);
                return Flow::Continue;
            }
        }
    }
    if abort {
        if args.len() > 1 {
            syntax_error(out);
        } else {
            out.error("ERR No shutdown in progress.");
        }
        return Flow::Continue;
    }
    let _ = shared.shutdown.send(true);
    Flow::Close
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
