//! The server as clients see it: the `tphdb-server` binary, spoken to by
//! the `redis` crate, `redis-cli`, `redis-benchmark` and the Python `redis`
//! package. The external tools are skipped when missing unless
//! `TPHDB_REQUIRE_TOOLS` is set (CI sets it and installs them).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redis::Commands;

mod common;

use common::{have, raw, Server};

#[test]
fn strings_commands_answer_as_redis_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--enable-flushall"]);
    let mut c = server.client();
    let _: () = c.set("a", "1").unwrap();
    assert_eq!(
        c.get::<_, Option<String>>("a").unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(c.get::<_, Option<String>>("missing").unwrap(), None);
    // NX and XX, and GET returning the old value.
    let nx: Option<String> = redis::cmd("SET")
        .arg("a")
        .arg("2")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(nx, None);
    let xx: Option<String> = redis::cmd("SET")
        .arg("b")
        .arg("2")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(xx, None);
    let old: Option<String> = redis::cmd("SET")
        .arg("a")
        .arg("3")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(old.as_deref(), Some("1"));
    assert_eq!(c.set_nx::<_, _, i64>("a", "x").unwrap(), 0);
    let _: () = c.mset(&[("k1", "v1"), ("k2", "v2"), ("k3", "")]).unwrap();
    let got: Vec<Option<String>> = c.mget(&["k1", "nope", "k3"]).unwrap();
    assert_eq!(got, vec![Some("v1".into()), None, Some(String::new())]);
    assert_eq!(c.strlen::<_, i64>("k1").unwrap(), 2);
    assert_eq!(c.exists::<_, i64>(&["k1", "k2", "k1", "zz"]).unwrap(), 3);
    assert_eq!(c.del::<_, i64>(&["k1", "zz"]).unwrap(), 1);
    let gd: Option<String> = redis::cmd("GETDEL").arg("k2").query(&mut c).unwrap();
    assert_eq!(gd.as_deref(), Some("v2"));
    assert_eq!(c.exists::<_, i64>("k2").unwrap(), 0);
    // Binary keys and values survive untouched.
    let bin: Vec<u8> = (0..=255).collect();
    let _: () = c.set(&bin[..], &bin[..]).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>(&bin[..]).unwrap(), bin);
    // Errors are errors, and the connection goes on.
    let e = redis::cmd("SET")
        .arg("t")
        .arg("v")
        .arg("EX")
        .arg(10)
        .query::<()>(&mut c);
    assert!(e.unwrap_err().to_string().contains("expiry"));
    let e = redis::cmd("NOSUCH").arg("x").query::<()>(&mut c);
    assert!(e.unwrap_err().to_string().contains("unknown command"));
    let e = redis::cmd("GET").query::<()>(&mut c);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("wrong number of arguments"));
    assert_eq!(redis::cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    assert!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap() >= 3);
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(info.contains("redis_version:") && info.contains("# tphdb"));
    let tphdb: String = redis::cmd("INFO").arg("tphdb").query(&mut c).unwrap();
    for field in [
        "write_amplification:",
        "running_jobs:",
        "compaction_pending:",
        "low_priority_compactions:",
        "bytes_written_by_cause:wal=",
        "compaction_bytes_read_by_cause:l0_merge=",
    ] {
        assert!(tphdb.contains(field), "no {field} in {tphdb}");
    }
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let left: Vec<String> = c.scan().unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    drop(c);
    assert!(server.stop().success());
}

#[test]
fn scan_resumes_in_key_order_with_match_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let mut want = Vec::new();
    for i in 0..500 {
        let k = format!("user:{i:04}");
        let _: () = c.set(&k, i).unwrap();
        if i % 7 == 0 {
            want.push(k);
        }
        let _: () = c.set(format!("other:{i}"), i).unwrap();
    }
    let mut cursor = 0u64;
    let mut got = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("user:*[0-9]")
            .arg("COUNT")
            .arg(37)
            .query(&mut c)
            .unwrap();
        got.extend(keys.into_iter().filter(|k| k.parse::<u32>().is_err()));
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let all_users: Vec<String> = (0..500).map(|i| format!("user:{i:04}")).collect();
    assert_eq!(got, all_users, "every match once, in key order");
    assert!(want.iter().all(|k| got.contains(k)));
    let e = redis::cmd("SCAN").arg(987_654_321u64).query::<()>(&mut c);
    assert!(e.unwrap_err().to_string().contains("invalid cursor"));
}

#[test]
fn auth_limits_and_protocol_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            "--requirepass",
            "s3cret",
            "--max-request-bytes",
            "1000",
            "--maxclients",
            "3",
        ],
    );
    let p = server.port;
    assert!(raw(p, b"GET a\r\n").starts_with(b"-NOAUTH"));
    assert!(raw(p, b"AUTH wrong\r\n").starts_with(b"-WRONGPASS"));
    assert_eq!(
        raw(p, b"AUTH s3cret\r\nSET a 1\r\nGET a\r\n"),
        b"+OK\r\n+OK\r\n$1\r\n1\r\n"
    );
    // HELLO 3 with AUTH switches the protocol: nulls are RESP3's.
    let r = raw(p, b"HELLO 3 AUTH default s3cret\r\nGET nope\r\n");
    assert!(
        r.starts_with(b"%7\r\n") && r.ends_with(b"_\r\n"),
        "{}",
        r.escape_ascii()
    );
    // A request past the limit is refused before it is buffered, and the
    // connection closed.
    let big = format!(
        "AUTH s3cret\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5000\r\n{}\r\n",
        "v".repeat(5000)
    );
    let r = raw(p, big.as_bytes());
    assert!(
        String::from_utf8_lossy(&r).contains("-ERR Protocol error"),
        "{}",
        r.escape_ascii()
    );
    assert!(raw(p, b"*1\r\n$x\r\n").starts_with(b"-ERR Protocol error"));
    // Past maxclients a new connection is refused with an error.
    let held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
            s.write_all(b"AUTH s3cret\r\n").unwrap();
            let mut ok = [0u8; 5];
            s.read_exact(&mut ok).unwrap();
            s
        })
        .collect();
    assert!(raw(p, b"PING\r\n").starts_with(b"-ERR max number of clients"));
    drop(held);
}

#[test]
fn redis_cli_and_redis_benchmark_work() {
    if !have("redis-cli", &["--version"]) || !have("redis-benchmark", &["--version"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let port = server.port.to_string();
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(cli(&["SET", "greeting", "hello world"]), "OK\n");
    assert_eq!(cli(&["GET", "greeting"]), "hello world\n");
    assert_eq!(cli(&["--scan", "--pattern", "greet*"]), "greeting\n");
    let out = Command::new("redis-benchmark")
        .args([
            "-p", &port, "-t", "set,get", "-n", "20000", "-P", "16", "-c", "8", "-q",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SET:") && text.contains("GET:"), "{text}");
    // The keys redis-benchmark wrote are there.
    assert_eq!(cli(&["EXISTS", "key:__rand_int__"]), "1\n");
}

#[test]
fn the_python_redis_package_works() {
    if !have("python3", &["-c", "import redis"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let script = format!(
        r#"
import redis
for proto in (2, 3):
    r = redis.Redis(port={port}, protocol=proto)
    assert r.ping()
    r.set(b"k", b"\x00\xff")
    assert r.get(b"k") == b"\x00\xff"
    assert r.set("n", 1, nx=True) in (True, None)
    assert r.set("n", 2, nx=True) is None
    r.mset({{"a": 1, "b": 2}})
    assert r.mget(["a", "b", "zz"]) == [b"1", b"2", None]
    assert r.delete("a", "zz") == 1
    assert sorted(r.scan_iter(match="[bn]")) == [b"b", b"n"]
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set(f"p{{i}}", i)
    assert all(p.execute())
    assert r.get("p99") == b"99"
    assert r.info()["redis_version"]
    r.close()
print("ok")
"#,
        port = server.port
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Pipelined SETs are written as one batch: a later command of the same
/// pipeline sees them, and the last SET of a key wins.
#[test]
fn a_pipeline_of_sets_reads_its_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut req = Vec::new();
    for i in 0..300 {
        req.extend_from_slice(format!("SET k {i}\r\nSET j{i} x\r\n").as_bytes());
    }
    req.extend_from_slice(b"GET k\r\nEXISTS j0 j299\r\nSET k last\r\nGET k\r\n");
    let mut want = b"+OK\r\n".repeat(600);
    want.extend_from_slice(b"$3\r\n299\r\n:2\r\n+OK\r\n$4\r\nlast\r\n");
    assert_eq!(raw(server.port, &req), want);
}

/// Pipelined GETs are read together: their replies keep the pipeline's
/// order around every other reply (errors included), a GET sees the SETs
/// before it and none after it, and more GETs than a batch holds are read
/// in several batches.
#[test]
fn a_pipeline_of_gets_answers_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut req = b"SET a 1\r\nGET a\r\nGET b\r\nSET b 2\r\nGET b\r\nFOO\r\nGET a\r\n".to_vec();
    req.extend_from_slice(b"GET\r\nget a\r\nDEL a\r\nGET a\r\n");
    req.extend_from_slice(&b"GET b\r\n".repeat(150));
    req.extend_from_slice(b"SET a 3\r\nGET a\r\nMGET a b c\r\n");
    let mut want = b"+OK\r\n$1\r\n1\r\n$-1\r\n+OK\r\n$1\r\n2\r\n".to_vec();
    want.extend_from_slice(
        b"-ERR unknown command 'FOO', with args beginning with: \r\n$1\r\n1\r\n",
    );
    want.extend_from_slice(b"-ERR wrong number of arguments for 'get' command\r\n$1\r\n1\r\n");
    want.extend_from_slice(b":1\r\n$-1\r\n");
    want.extend_from_slice(&b"$1\r\n2\r\n".repeat(150));
    want.extend_from_slice(b"+OK\r\n$1\r\n3\r\n*3\r\n$1\r\n3\r\n$1\r\n2\r\n$-1\r\n");
    assert_eq!(
        String::from_utf8_lossy(&raw(server.port, &req)),
        String::from_utf8_lossy(&want)
    );
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// docs/server.md's sharding setup on loopback: three servers behind
/// twemproxy (Debian's `nutcracker`), spoken to through the proxy.
#[test]
fn a_twemproxy_pool_shards_keys_over_three_servers() {
    if !have("nutcracker", &["--version"]) || !have("redis-cli", &["--version"]) {
        return;
    }
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path(), &[])).collect();
    let conf_dir = tempfile::tempdir().unwrap();
    let (listen, stats) = (free_port(), free_port());
    let pool: String = servers
        .iter()
        .enumerate()
        .map(|(i, s)| format!("    - 127.0.0.1:{}:1 shard-{i}\n", s.port))
        .collect();
    let conf = conf_dir.path().join("tphdb.yml");
    std::fs::write(
        &conf,
        format!(
            "tphdb:\n  listen: 127.0.0.1:{listen}\n  hash: murmur\n  distribution: ketama\n  \
             redis: true\n  auto_eject_hosts: false\n  servers:\n{pool}"
        ),
    )
    .unwrap();
    let _proxy = Proxy(
        Command::new("nutcracker")
            .arg("-c")
            .arg(&conf)
            .args(["-s", &stats.to_string(), "-v", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", listen)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nutcracker did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Through the proxy with redis-cli: redis-rs opens a connection with
    // CLIENT SETINFO, which twemproxy does not forward (it hangs up).
    let keys: Vec<String> = (0..300).map(|i| format!("user:{i}")).collect();
    let mut script: String = keys
        .iter()
        .map(|k| format!("SET {k} value-of-{k}\n"))
        .collect();
    // MGET and DEL spanning shards: the proxy splits and joins them.
    script += &format!("MGET {}\nDEL {}\n", keys.join(" "), keys[..30].join(" "));
    let mut cli = Command::new("redis-cli")
        .args(["-p", &listen.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    cli.stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = cli.wait_with_output().unwrap();
    assert!(out.status.success());
    let replies = String::from_utf8(out.stdout).unwrap();
    let mut lines = replies.lines();
    assert!(lines.by_ref().take(300).all(|l| l == "OK"), "{replies}");
    for k in &keys {
        assert_eq!(lines.next(), Some(format!("value-of-{k}").as_str()));
    }
    // Not a terminal: redis-cli prints replies bare.
    assert_eq!(lines.next(), Some("30"));
    // Each key lives on exactly one server, and every server has some.
    let mut per_server = Vec::new();
    for s in &servers {
        let mut c = s.client();
        let held = keys[30..]
            .iter()
            .filter(|k| c.exists::<_, bool>(k.as_str()).unwrap())
            .count();
        assert!(!keys[..30]
            .iter()
            .any(|k| c.exists::<_, bool>(k.as_str()).unwrap()));
        per_server.push(held);
    }
    assert_eq!(per_server.iter().sum::<usize>(), 270, "{per_server:?}");
    assert!(per_server.iter().all(|&n| n > 30), "{per_server:?}");
}
