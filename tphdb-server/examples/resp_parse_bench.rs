//! The server's request parser against the `redis-protocol` crate's RESP2
//! decoder, on the same pipelined requests (what `redis-benchmark -P 16`
//! sends: `SET key:N <value>` and `GET key:N`). Both decode from a
//! `BytesMut` without copying arguments; each round parses a fresh copy of
//! the buffer. Prints a table and, with `--json FILE`, writes it as JSON.
//!
//! `cargo run --release -p tphdb-server --example resp_parse_bench -- [--requests N] [--rounds R] [--value-size B] [--json FILE]`

use std::time::Instant;

use bytes::BytesMut;
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::types::BytesFrame;
use tphdb_server::resp::{parse, Limits};

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn requests(n: usize, value_size: usize) -> BytesMut {
    let value = "x".repeat(value_size);
    let mut buf = BytesMut::new();
    for i in 0..n {
        let key = format!("key:{:012}", i);
        let req = if i % 2 == 0 {
            format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
                key.len(),
                value.len()
            )
        } else {
            format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len())
        };
        buf.extend_from_slice(req.as_bytes());
    }
    buf
}

/// Nanoseconds per request of the best of `rounds`, and the arguments seen
/// (a check that both parsed everything).
fn time(
    rounds: usize,
    input: &BytesMut,
    mut parse_all: impl FnMut(BytesMut) -> usize,
) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut args = 0;
    for _ in 0..rounds {
        let buf = input.clone();
        let t = Instant::now();
        args = parse_all(buf);
        best = best.min(t.elapsed().as_nanos() as f64);
    }
    (best, args)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, "--requests", 1_000_000);
    let rounds = arg(&args, "--rounds", 5);
    let value_size = arg(&args, "--value-size", 100);
    let json = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1));
    let input = requests(n, value_size);
    let limits = Limits::default();

    let (ours, ours_args) = time(rounds, &input, |mut buf| {
        let mut seen = 0;
        while let Some(req) = parse(&mut buf, &limits).expect("well-formed") {
            seen += req.len();
        }
        seen
    });
    let (theirs, theirs_args) = time(rounds, &input, |mut buf| {
        let mut seen = 0;
        while let Some((frame, _, _)) = decode_bytes_mut(&mut buf).expect("well-formed") {
            match frame {
                BytesFrame::Array(parts) => seen += parts.len(),
                other => panic!("not an array: {other:?}"),
            }
        }
        seen
    });
    assert_eq!(ours_args, theirs_args, "both parse every argument");
    let per = |t: f64| t / n as f64;
    println!("{n} pipelined requests (SET with {value_size}-byte values, GET), best of {rounds}");
    println!(
        "{:<26} {:>12} {:>14}",
        "parser", "ns/request", "M requests/s"
    );
    for (name, t) in [
        ("tphdb-server resp::parse", ours),
        ("redis-protocol 6 (resp2)", theirs),
    ] {
        println!("{name:<26} {:>12.1} {:>14.2}", per(t), 1e3 / per(t));
    }
    println!("redis-protocol / tphdb-server time: {:.2}x", theirs / ours);
    if let Some(path) = json {
        let out = serde_json::json!({
            "requests": n,
            "value_size": value_size,
            "rounds": rounds,
            "tphdb_server_ns_per_request": per(ours),
            "redis_protocol_ns_per_request": per(theirs),
            "redis_protocol_over_tphdb_server": theirs / ours,
        });
        std::fs::write(path, serde_json::to_string_pretty(&out).expect("json"))
            .expect("write JSON");
    }
}
