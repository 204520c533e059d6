//! The command table: what `COMMAND` reports, and what the dispatcher
//! checks arity against.

use bytes::Bytes;

use super::lower;
use crate::resp::Out;

/// What `COMMAND` reports of a command.
pub(super) struct Spec {
    pub(super) name: &'static str,
    /// Arguments with the name; negative: at least that many.
    pub(super) arity: i64,
    pub(super) flags: &'static [&'static str],
    pub(super) first_key: i64,
    pub(super) last_key: i64,
    pub(super) key_step: i64,
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

pub(super) const COMMANDS: &[Spec] = &[
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
    spec(
        "shutdown",
        -1,
        &["admin", "noscript", "loading", "stale", "no_multi"],
        0,
        0,
        0,
    ),
    spec("strlen", 2, &["readonly", "fast"], 1, 1, 1),
    spec("ttl", 2, &["readonly", "fast"], 1, 1, 1),
    spec("type", 2, &["readonly", "fast"], 1, 1, 1),
];

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

pub(super) fn command(args: &[Bytes], out: &mut Out) {
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
