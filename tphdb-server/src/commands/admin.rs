//! Connection and server commands: AUTH, HELLO, CLIENT, CONFIG.

use std::fmt::Write as _;

use bytes::Bytes;

use super::lower;
use super::parse_int;
use super::syntax_error;
use crate::glob;
use crate::resp::Out;
use crate::resp::Proto;
use crate::server::Client;
use crate::server::Shared;

pub(super) fn check_password(
    shared: &Shared,
    user: &[u8],
    pass: &[u8],
) -> Result<(), &'static str> {
    match &shared.cfg.requirepass {
        None => Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        Some(p) if user == b"default" && p.as_bytes() == pass => Ok(()),
        Some(_) => Err("WRONGPASS invalid username-password pair or user is disabled."),
    }
}

pub(super) fn auth(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) {
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

pub(super) fn hello(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) {
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

pub(super) fn client_command(shared: &Shared, client: &mut Client, args: &[Bytes], out: &mut Out) {
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

/// CONFIG GET of the parameters clients ask for (`redis-benchmark` asks
/// for `save` and `appendonly`); CONFIG SET is refused.
pub(super) fn config(shared: &Shared, args: &[Bytes], out: &mut Out) {
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
