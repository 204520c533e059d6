//! Stopping the server: by SIGKILL (acknowledged writes survive), SIGTERM
//! and `SHUTDOWN` (a clean close that keeps everything).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Commands;

mod common;

use common::Server;

/// Every write acknowledged under `--appendfsync always` is there after
/// the server is killed with SIGKILL in the middle of a load.
#[test]
fn acknowledged_writes_survive_sigkill_under_appendfsync_always() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--appendfsync", "always"]);
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let (acked, stop) = (acked.clone(), stop.clone());
            let mut c = server.client();
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let k = format!("t{t}-{i}");
                    match c.set::<_, _, ()>(&k, i) {
                        Ok(()) => acked.lock().unwrap().push(k),
                        Err(_) => break,
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    server.signal("-KILL");
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    drop(server);
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "only {} writes before the kill",
        acked.len()
    );
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    let missing: Vec<&String> = acked
        .iter()
        .filter(|k| !c.exists::<_, bool>(k.as_str()).unwrap())
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes lost",
        missing.len(),
        acked.len()
    );
}

/// SIGTERM lets connections finish, flushes and closes the database.
#[test]
fn sigterm_shuts_down_cleanly_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--appendfsync", "no"]);
    let mut c = server.client();
    for i in 0..1000 {
        let _: () = c.set(i, i).unwrap();
    }
    assert!(server.stop().success());
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    for i in 0..1000 {
        assert_eq!(c.get::<_, i64>(i).unwrap(), i);
    }
}

#[test]
fn shutdown_stops_the_server_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &["--appendfsync", "no"]);
    let mut c = server.client();
    for i in 0..1000 {
        let _: () = c.set(i, i).unwrap();
    }
    // Nothing to abort, and an unknown modifier: errors that stop nothing.
    let abort = redis::cmd("SHUTDOWN").arg("ABORT").query::<()>(&mut c);
    assert!(abort
        .unwrap_err()
        .to_string()
        .contains("No shutdown in progress"));
    let bad = redis::cmd("SHUTDOWN").arg("LATER").query::<()>(&mut c);
    assert!(bad.unwrap_err().to_string().contains("syntax error"));
    let _: () = c.set("last", 1).unwrap();
    // As in Redis, no reply: the connection closes and the server exits.
    assert!(redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query::<()>(&mut c)
        .is_err());
    assert!(server.child.wait().unwrap().success());
    let server = Server::start(dir.path(), &[]);
    let mut c = server.client();
    for i in 0..1000 {
        assert_eq!(c.get::<_, i64>(i).unwrap(), i);
    }
    assert_eq!(c.get::<_, i64>("last").unwrap(), 1);
}
