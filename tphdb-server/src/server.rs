//! Connections: accept, read requests, run them, write replies, shut down.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::commands::{self, Flow};
use crate::resp::{self, Limits, Out, Proto};

/// When acknowledged writes reach the disk (Redis's `appendfsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    /// Every write is synced before its reply: a crash loses no
    /// acknowledged write. Concurrent clients' writes share a sync.
    Always,
    /// The WAL is synced every second: a machine crash loses at most the
    /// last second; a killed server loses nothing.
    Everysec,
    /// Writes reach the page cache at once, the disk when the OS writes
    /// them back or a memtable fills.
    No,
}

/// What a server runs with.
#[derive(Clone, Debug)]
pub struct Config {
    /// The database directory (created if missing).
    pub dir: PathBuf,
    /// Address to listen on.
    pub bind: String,
    /// Port to listen on (0: any free one).
    pub port: u16,
    /// Clients must `AUTH` with this first.
    pub requirepass: Option<String>,
    /// Connections at once; more are refused with an error.
    pub maxclients: usize,
    /// Per request: argument, request and argument-count bounds.
    pub limits: Limits,
    /// Requests of one client run before their replies are written and
    /// more is read: a client pipelining deeper waits its turn.
    pub max_pipeline: usize,
    /// Close a client idle this long (none: never).
    pub timeout: Option<Duration>,
    /// When acknowledged writes reach the disk.
    pub appendfsync: Fsync,
    /// Allow FLUSHALL and FLUSHDB, which delete every key.
    pub enable_flushall: bool,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// The database's options; `sync_policy` is set from `appendfsync`.
    pub db_options: tphdb::Options,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dir: PathBuf::from("tphdb-data"),
            bind: "127.0.0.1".into(),
            port: 6379,
            requirepass: None,
            maxclients: 10_000,
            limits: Limits::default(),
            max_pipeline: 1024,
            timeout: None,
            appendfsync: Fsync::Everysec,
            enable_flushall: false,
            threads: 0,
            db_options: tphdb::Options::default(),
        }
    }
}

/// Replies are written once this much is encoded, so that a deep pipeline
/// of large replies holds a bounded buffer.
const OUT_FLUSH_BYTES: usize = 64 << 10;

/// What `CLIENT LIST` shows of a connection.
pub(crate) struct ClientInfo {
    pub(crate) id: u64,
    pub(crate) addr: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) since: Instant,
    pub(crate) last: Mutex<(Instant, &'static str)>,
    pub(crate) name: Mutex<Option<String>>,
    pub(crate) lib: Mutex<(String, String)>,
    pub(crate) proto: Mutex<Proto>,
}

/// Server-wide counters for INFO.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) connections: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
}

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) db: tphdb::DB,
    pub(crate) cfg: Config,
    pub(crate) started: Instant,
    pub(crate) port: u16,
    pub(crate) clients: Mutex<HashMap<u64, Arc<ClientInfo>>>,
    pub(crate) connected: AtomicUsize,
    pub(crate) next_id: AtomicU64,
    pub(crate) counters: Counters,
    pub(crate) cursors: Mutex<commands::Cursors>,
    pub(crate) stripes: commands::Stripes,
    /// Taken around committing a pipeline's gathered writes. A worker
    /// thread whose write would queue behind another's then awaits its turn
    /// and serves other connections meanwhile, instead of sleeping in the
    /// database's write queue: with two workers handing that queue to each
    /// other, a fifth of the server's time under pipelined SETs went to
    /// switching threads.
    pub(crate) write_gate: tokio::sync::Mutex<()>,
    /// Set by `SHUTDOWN`: the server stops as on SIGTERM.
    pub(crate) shutdown: watch::Sender<bool>,
}

/// One connection's own state.
pub(crate) struct Client {
    pub(crate) info: Arc<ClientInfo>,
    pub(crate) authed: bool,
    pub(crate) pending: commands::Pending,
    /// Plain GETs held back to be read together (see `commands::execute`).
    pub(crate) gets: Vec<Bytes>,
}

/// Opens the database and serves until SIGTERM, SIGINT or `SHUTDOWN`,
/// then flushes and closes it. Prints `ready on ADDR` once it accepts
/// connections.
pub fn run(cfg: Config) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if cfg.threads > 0 {
        builder.worker_threads(cfg.threads);
    }
    let runtime = builder.enable_all().build()?;
    runtime.block_on(async move {
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = stop_tx.send(true);
        });
        serve(cfg, stop_rx, |addr| {
            println!("ready on {addr}");
        })
        .await
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without handlers the default action (exit) stands.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Serves until `stop` turns true or a client sends `SHUTDOWN`; `ready`
/// gets the bound address.
pub async fn serve(
    cfg: Config,
    mut stop: watch::Receiver<bool>,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (shutdown, mut stopping) = watch::channel(false);
    let from_outside = shutdown.clone();
    tokio::spawn(async move {
        // A caller that drops its sender without sending never stops us.
        if stop.wait_for(|&stopped| stopped).await.is_ok() {
            let _ = from_outside.send(true);
        }
    });
    let mut db_options = cfg.db_options.clone();
    db_options.sync_policy = match cfg.appendfsync {
        Fsync::Always => tphdb::SyncPolicy::EveryWrite,
        Fsync::Everysec => tphdb::SyncPolicy::IntervalMs(1000),
        Fsync::No => tphdb::SyncPolicy::Never,
    };
    let dir = cfg.dir.clone();
    let db = tokio::task::spawn_blocking(move || tphdb::DB::open(&db_options, dir)).await??;
    let listener = TcpListener::bind((cfg.bind.as_str(), cfg.port)).await?;
    let addr = listener.local_addr()?;
    let shared = Arc::new(Shared {
        db,
        port: addr.port(),
        cfg,
        started: Instant::now(),
        clients: Mutex::new(HashMap::new()),
        connected: AtomicUsize::new(0),
        next_id: AtomicU64::new(1),
        counters: Counters::default(),
        cursors: Mutex::new(commands::Cursors::default()),
        stripes: commands::Stripes::default(),
        write_gate: tokio::sync::Mutex::new(()),
        shutdown,
    });
    ready(addr);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stopping.changed() => break,
            accepted = listener.accept() => {
                let Ok((stream, peer)) = accepted else { continue };
                // Reap finished connections as new ones come.
                while tasks.try_join_next().is_some() {}
                let shared = shared.clone();
                let stop = stopping.clone();
                tasks.spawn(async move { accept(shared, stream, peer, stop).await });
            }
        }
    }
    drop(listener);
    // Connections finish the requests they hold, then close.
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let shared = Arc::into_inner(shared).ok_or("a connection outlived shutdown")?;
    tokio::task::spawn_blocking(move || -> tphdb::Result<()> {
        shared.db.flush()?;
        shared.db.close()
    })
    .await??;
    Ok(())
}

async fn accept(
    shared: Arc<Shared>,
    mut stream: TcpStream,
    peer: SocketAddr,
    stop: watch::Receiver<bool>,
) {
    shared.counters.connections.fetch_add(1, Relaxed);
    if shared.connected.fetch_add(1, Relaxed) >= shared.cfg.maxclients {
        shared.connected.fetch_sub(1, Relaxed);
        shared.counters.rejected.fetch_add(1, Relaxed);
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    let _ = stream.set_nodelay(true);
    let id = shared.next_id.fetch_add(1, Relaxed);
    let now = Instant::now();
    let info = Arc::new(ClientInfo {
        id,
        addr: peer,
        local: stream.local_addr().unwrap_or(peer),
        since: now,
        last: Mutex::new((now, "NULL")),
        name: Mutex::new(None),
        lib: Mutex::new((String::new(), String::new())),
        proto: Mutex::new(Proto::Resp2),
    });
    shared.clients.lock().insert(id, info.clone());
    let client = Client {
        info,
        authed: shared.cfg.requirepass.is_none(),
        pending: commands::Pending::default(),
        gets: Vec::new(),
    };
    let _ = connection(&shared, client, stream, stop).await;
    shared.clients.lock().remove(&id);
    shared.connected.fetch_sub(1, Relaxed);
}

/// Reads the client's held-back GETs and commits its gathered writes (in
/// turn with other connections): what must happen before replies leave.
async fn commit(shared: &Shared, client: &mut Client, out: &mut Out) {
    commands::flush_gets(shared, client, out);
    if !client.pending.is_empty() {
        let _turn = shared.write_gate.lock().await;
        commands::commit_pending(shared, client, out);
    }
}

/// Reads requests and answers them until the client leaves, breaks the
/// protocol, idles out, or the server stops.
async fn connection(
    shared: &Shared,
    mut client: Client,
    mut stream: TcpStream,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let limits = shared.cfg.limits;
    let mut inb = BytesMut::with_capacity(16 << 10);
    let mut out = Out::new(Proto::Resp2);
    loop {
        // Run what the buffer holds, a bounded number of requests at a time.
        let mut ran = 0;
        let mut close = false;
        loop {
            match resp::parse(&mut inb, &limits) {
                Ok(Some(args)) => {
                    if args.is_empty() {
                        continue;
                    }
                    ran += 1;
                    if commands::execute(shared, &mut client, &args, &mut out) == Flow::Close {
                        close = true;
                        break;
                    }
                    if out.buf.len() >= OUT_FLUSH_BYTES {
                        commit(shared, &mut client, &mut out).await;
                        stream.write_all(&out.buf).await?;
                        out.buf.clear();
                    }
                    if ran >= shared.cfg.max_pipeline {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    out.error(&format!("ERR {e}"));
                    close = true;
                    break;
                }
            }
        }
        // No reply leaves before the writes it acknowledges are done.
        commit(shared, &mut client, &mut out).await;
        if !out.buf.is_empty() {
            stream.write_all(&out.buf).await?;
            out.buf.clear();
        }
        if close {
            return stream.shutdown().await;
        }
        if ran >= shared.cfg.max_pipeline {
            // More may be whole in the buffer: others had their turn.
            tokio::task::yield_now().await;
            continue;
        }
        if *stop.borrow() {
            return Ok(());
        }
        inb.reserve(16 << 10);
        let read = async {
            match shared.cfg.timeout {
                Some(t) => tokio::time::timeout(t, stream.read_buf(&mut inb))
                    .await
                    .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())),
                None => stream.read_buf(&mut inb).await,
            }
        };
        tokio::select! {
            n = read => {
                if n? == 0 {
                    return Ok(());
                }
            }
            _ = stop.changed() => return Ok(()),
        }
    }
}
