//! `tphdb crashtest`: a child process writes with several threads while
//! flushes and compactions run; the parent SIGKILLs it at a random moment,
//! reopens the database and checks it against the child's operation
//! streams, then starts the next child on the same database.
//!
//! Every thread's operations are a deterministic function of (seed, cycle,
//! thread), over keys only that thread writes, so the parent can replay
//! them. After a kill, each thread's keys must hold the state after some
//! prefix of its operations (a torn batch or a lost write in the middle
//! shows as no prefix matching), and that prefix must reach the last write
//! the thread logged as acknowledged. A SIGKILL keeps what the process had
//! handed to the OS, so every acknowledged write counts, synced or not;
//! losing unsynced writes to a power cut is what `tphdb/tests/crash/` checks
//! with the fault-injecting file system.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use tphdb::{IteratorMode, Options, WriteBatch, WriteOptions, DB};

type State = BTreeMap<Vec<u8>, Vec<u8>>;
type BoxError = Box<dyn std::error::Error>;

/// Options of the workload, shared by the parent and its children.
#[derive(Args, Clone, Debug)]
pub struct Workload {
    /// Writer threads in the child.
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Keys each writer thread owns.
    #[arg(long, default_value_t = 400)]
    keys_per_thread: u32,
    /// Mean value size in bytes (values are 0 to twice this).
    #[arg(long, default_value_t = 200)]
    value_size: u32,
    /// One write in this many is synced.
    #[arg(long, default_value_t = 8)]
    sync_every: u32,
    /// Memtable size in KiB: small, so that flushes and compactions run.
    #[arg(long, default_value_t = 128)]
    write_buffer_kb: usize,
    /// Operations per thread and cycle at most (the child then idles).
    #[arg(long, default_value_t = 200_000)]
    max_ops: u64,
    /// Compaction memory in KiB (0: the default): small, so that large
    /// merges run in passes over partitions and large folds in passes over
    /// their piece's slots.
    #[arg(long, default_value_t = 0)]
    compaction_memory_kb: usize,
}

#[derive(Args)]
pub struct CrashtestArgs {
    /// Kill-and-verify cycles.
    #[arg(long, default_value_t = 100)]
    cycles: u32,
    /// Longest time a child runs before it is killed (uniformly 0 to this).
    #[arg(long, default_value_t = 1500)]
    max_kill_ms: u64,
    /// Database directory (default: a temporary directory, removed after).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Seed of the operation streams and kill times (default: random).
    #[arg(long)]
    seed: Option<u64>,
    #[command(flatten)]
    workload: Workload,
}

/// Arguments of one child process (a hidden subcommand).
#[derive(Args)]
pub struct ChildArgs {
    #[arg(long)]
    db: PathBuf,
    #[arg(long)]
    acks: PathBuf,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    cycle: u32,
    #[command(flatten)]
    workload: Workload,
}

/// One operation of a thread's stream: puts (`Some`) and deletes (`None`)
/// of the thread's keys, applied atomically.
type Op = Vec<(u32, Option<Vec<u8>>)>;

/// The deterministic operation stream of one thread in one cycle.
struct Stream<'a> {
    rng: fastrand::Rng,
    w: &'a Workload,
    cycle: u32,
    thread: u32,
    next: u64,
}

impl<'a> Stream<'a> {
    fn new(w: &'a Workload, seed: u64, cycle: u32, thread: u32) -> Self {
        let mix =
            seed ^ (u64::from(cycle) << 32 | u64::from(thread)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        Stream {
            rng: fastrand::Rng::with_seed(mix),
            w,
            cycle,
            thread,
            next: 0,
        }
    }

    /// The next operation and whether it is written with `sync`.
    fn next_op(&mut self) -> (Op, bool) {
        let i = self.next;
        self.next += 1;
        let n = match self.rng.u32(..100) {
            0..=69 => 1,
            _ => self.rng.u32(2..9),
        };
        let op = (0..n)
            .map(|sub| {
                let k = self.rng.u32(..self.w.keys_per_thread);
                let delete = self.rng.u32(..100) < 15;
                let len = self.rng.u32(..=2 * self.w.value_size) as usize;
                (k, (!delete).then(|| self.value(i, sub, k, len)))
            })
            .collect();
        (op, self.rng.u32(..self.w.sync_every) == 0)
    }

    /// A value that names its write and has a checkable filler, so a value
    /// from the wrong write or with damaged bytes never matches.
    fn value(&self, i: u64, sub: u32, k: u32, len: usize) -> Vec<u8> {
        let mut v = format!("c{}.t{}.i{i}.s{sub}.k{k}|", self.cycle, self.thread).into_bytes();
        let mut x = ((i << 8) | u64::from(sub)) ^ (u64::from(k) << 40);
        while v.len() < len {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            v.push((x >> 56) as u8);
        }
        v
    }
}

fn key(thread: u32, k: u32) -> Vec<u8> {
    format!("t{thread:02}.k{k:06}").into_bytes()
}

fn options(w: &Workload) -> Options {
    Options {
        write_buffer_bytes: w.write_buffer_kb << 10,
        tph_target_bytes: (4 * w.write_buffer_kb as u64) << 10,
        background_threads: 2,
        compaction_memory_bytes: match w.compaction_memory_kb {
            0 => Options::default().compaction_memory_bytes,
            kb => kb << 10,
        },
        ..Options::default()
    }
}

/// The child: writes until killed.
pub fn child(a: ChildArgs) -> Result<(), BoxError> {
    let db = Arc::new(DB::open(&options(&a.workload), &a.db)?);
    let a = Arc::new(a);
    let writers: Vec<_> = (0..a.workload.threads)
        .map(|t| {
            let (db, a) = (db.clone(), a.clone());
            std::thread::spawn(move || write_stream(&db, &a, t))
        })
        .collect();
    // Reads and explicit flushes alongside the writers.
    std::thread::spawn({
        let (db, w) = (db.clone(), a.workload.clone());
        move || {
            let mut rng = fastrand::Rng::new();
            loop {
                for _ in 0..200 {
                    let _ = db.get(key(rng.u32(..w.threads), rng.u32(..w.keys_per_thread)));
                }
                let _ = db.iterator(IteratorMode::Start).take(100).count();
                if rng.u32(..10) == 0 {
                    let _ = db.flush();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    });
    for w in writers {
        w.join()
            .expect("writer thread")
            .map_err(|e| e.to_string())?;
    }
    // All streams done: wait for the kill.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// One writer thread: applies its stream, and appends the number of each
/// acknowledged operation to its ack file (fsynced after synced writes).
fn write_stream(
    db: &DB,
    a: &ChildArgs,
    t: u32,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(ack_path(&a.acks, a.cycle, t))?;
    let mut stream = Stream::new(&a.workload, a.seed, a.cycle, t);
    for i in 0..a.workload.max_ops {
        let (op, sync) = stream.next_op();
        let mut batch = WriteBatch::default();
        for (k, v) in op {
            match v {
                Some(v) => batch.put(key(t, k), v),
                None => batch.delete(key(t, k)),
            }
        }
        db.write_opt(
            batch,
            &WriteOptions {
                sync,
                ..WriteOptions::default()
            },
        )?;
        acks.write_all(&(i + 1).to_le_bytes())?;
        if sync {
            acks.sync_data()?;
        }
    }
    Ok(())
}

fn ack_path(dir: &Path, cycle: u32, thread: u32) -> PathBuf {
    dir.join(format!("c{cycle}.t{thread}"))
}

/// Operations acknowledged to a thread (the last whole record of its file).
fn acked(dir: &Path, cycle: u32, thread: u32) -> u64 {
    let bytes = std::fs::read(ack_path(dir, cycle, thread)).unwrap_or_default();
    let whole = bytes.len() / 8 * 8;
    match whole {
        0 => 0,
        _ => u64::from_le_bytes(bytes[whole - 8..whole].try_into().unwrap()),
    }
}

struct CycleResult {
    recovered_ops: u64,
    acked_ops: u64,
}

/// Finds, for each thread, the prefix of its stream that turns `before`
/// into `after`, and checks that it covers every acknowledged operation.
fn check_cycle(
    w: &Workload,
    seed: u64,
    cycle: u32,
    acks: &Path,
    before: &State,
    after: &State,
) -> Result<CycleResult, String> {
    let mut result = CycleResult {
        recovered_ops: 0,
        acked_ops: 0,
    };
    let owner = |k: &[u8]| -> Option<u32> {
        let s = std::str::from_utf8(k).ok()?;
        let t: u32 = s.strip_prefix('t')?.get(..2)?.parse().ok()?;
        (t < w.threads).then_some(t)
    };
    if let Some(k) = after.keys().find(|k| owner(k).is_none()) {
        return Err(format!(
            "a key no thread writes: {:?}",
            String::from_utf8_lossy(k)
        ));
    }
    for t in 0..w.threads {
        let acked = acked(acks, cycle, t);
        // model[k] against after[k], with a count of the keys that differ.
        let mut model: Vec<Option<Vec<u8>>> = (0..w.keys_per_thread)
            .map(|k| before.get(&key(t, k)).cloned())
            .collect();
        let target: Vec<Option<&Vec<u8>>> = (0..w.keys_per_thread)
            .map(|k| after.get(&key(t, k)))
            .collect();
        let mut differ = (0..w.keys_per_thread as usize)
            .filter(|&k| model[k].as_ref() != target[k])
            .count();
        let mut stream = Stream::new(w, seed, cycle, t);
        let mut applied = 0u64;
        loop {
            if differ == 0 && applied >= acked {
                break;
            }
            if applied == w.max_ops {
                return Err(format!(
                    "thread {t}: the recovered state is the state after no prefix of its {acked} acknowledged operations or more \
                     ({differ} keys differ after all of them)"
                ));
            }
            let (op, _) = stream.next_op();
            for (k, v) in op {
                let k = k as usize;
                let was = model[k].as_ref() != target[k];
                model[k] = v;
                let is = model[k].as_ref() != target[k];
                differ = differ + usize::from(is) - usize::from(was);
            }
            applied += 1;
        }
        result.recovered_ops += applied;
        result.acked_ops += acked;
    }
    Ok(result)
}

/// Opens the database after a kill and reads its whole state, checking
/// point reads against the scan.
fn recover(w: &Workload, dir: &Path, rng: &mut fastrand::Rng) -> Result<State, BoxError> {
    let db = DB::open(&options(w), dir)?;
    let state = db
        .iterator(IteratorMode::Start)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<State, _>>()?;
    for _ in 0..200 {
        let k = key(rng.u32(..w.threads), rng.u32(..w.keys_per_thread));
        if db.get(&k)?.as_ref() != state.get(&k) {
            return Err(format!(
                "get({}) disagrees with the scan",
                String::from_utf8_lossy(&k)
            )
            .into());
        }
    }
    db.close()?;
    Ok(state)
}

pub fn run(a: CrashtestArgs) -> Result<(), BoxError> {
    let tmp = tempfile::tempdir()?;
    let dir = a.db.clone().unwrap_or_else(|| tmp.path().join("db"));
    let acks = tmp.path().join("acks");
    std::fs::create_dir_all(&acks)?;
    let seed = a.seed.unwrap_or_else(|| fastrand::u64(..));
    let mut rng = fastrand::Rng::with_seed(seed);
    let exe = std::env::current_exe()?;
    println!(
        "crashtest: {} cycles, {} writer threads, kill within {} ms, seed {seed}, db {}",
        a.cycles,
        a.workload.threads,
        a.max_kill_ms,
        dir.display()
    );
    let mut state = recover(&a.workload, &dir, &mut rng)?;
    let (mut recovered, mut acked, mut killed_running) = (0u64, 0u64, 0u32);
    let started = Instant::now();
    let mut last_report = Instant::now();
    for cycle in 0..a.cycles {
        let stderr_path = tmp.path().join("child.stderr");
        let w = &a.workload;
        let mut child = crate::orphan::die_with_parent(&mut Command::new(&exe))
            .arg("crashtest-child")
            .args([
                "--db".as_ref(),
                dir.as_os_str(),
                "--acks".as_ref(),
                acks.as_os_str(),
            ])
            .args(["--seed", &seed.to_string(), "--cycle", &cycle.to_string()])
            .args([
                "--threads",
                &w.threads.to_string(),
                "--keys-per-thread",
                &w.keys_per_thread.to_string(),
            ])
            .args([
                "--value-size",
                &w.value_size.to_string(),
                "--sync-every",
                &w.sync_every.to_string(),
            ])
            .args([
                "--write-buffer-kb",
                &w.write_buffer_kb.to_string(),
                "--max-ops",
                &w.max_ops.to_string(),
                "--compaction-memory-kb",
                &w.compaction_memory_kb.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(File::create(&stderr_path)?)
            .spawn()?;
        let delay = Duration::from_millis(rng.u64(..=a.max_kill_ms));
        std::thread::sleep(delay);
        if let Some(status) = child.try_wait()? {
            let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            return Err(
                format!("cycle {cycle}: the child exited on its own ({status}): {err}").into(),
            );
        }
        killed_running += 1;
        child.kill()?; // SIGKILL
        child.wait()?;
        let after = recover(w, &dir, &mut rng)
            .map_err(|e| format!("cycle {cycle}: reopening after the kill: {e}"))?;
        let r = check_cycle(w, seed, cycle, &acks, &state, &after)
            .map_err(|e| format!("cycle {cycle} (killed after {delay:?}, seed {seed}): {e}"))?;
        recovered += r.recovered_ops;
        acked += r.acked_ops;
        state = after;
        for t in 0..w.threads {
            let _ = std::fs::remove_file(ack_path(&acks, cycle, t));
        }
        if last_report.elapsed() >= Duration::from_secs(5) || cycle + 1 == a.cycles {
            last_report = Instant::now();
            println!(
                "  {}/{} cycles verified, {recovered} operations recovered ({acked} acknowledged), {} keys, {:.0} s",
                cycle + 1,
                a.cycles,
                state.len(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "crashtest passed: {killed_running} kills, {recovered} operations recovered, every one of {acked} acknowledged operations present, seed {seed}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload() -> Workload {
        Workload {
            threads: 2,
            keys_per_thread: 20,
            value_size: 10,
            sync_every: 2,
            write_buffer_kb: 64,
            max_ops: 1000,
            compaction_memory_kb: 0,
        }
    }

    fn apply(state: &mut State, t: u32, op: Op) {
        for (k, v) in op {
            match v {
                Some(v) => state.insert(key(t, k), v),
                None => state.remove(&key(t, k)),
            };
        }
    }

    #[test]
    fn the_checker_finds_prefixes_and_rejects_anything_else() {
        let w = workload();
        let dir = tempfile::tempdir().unwrap();
        let mut state = State::new();
        let mut s0 = Stream::new(&w, 7, 3, 0);
        let mut s1 = Stream::new(&w, 7, 3, 1);
        for _ in 0..30 {
            apply(&mut state, 0, s0.next_op().0);
        }
        for _ in 0..5 {
            apply(&mut state, 1, s1.next_op().0);
        }
        let r = check_cycle(&w, 7, 3, dir.path(), &State::new(), &state).unwrap();
        assert!(r.recovered_ops <= 35 && r.recovered_ops > 0);
        // Acknowledged beyond what is there: lost writes.
        std::fs::write(ack_path(dir.path(), 3, 1), 40u64.to_le_bytes()).unwrap();
        assert!(check_cycle(&w, 7, 3, dir.path(), &State::new(), &state).is_err());
        std::fs::remove_file(ack_path(dir.path(), 3, 1)).unwrap();
        // A damaged value, or a write of another thread's stream.
        let mut bad = state.clone();
        bad.values_mut().next().unwrap().push(0);
        assert!(check_cycle(&w, 7, 3, dir.path(), &State::new(), &bad).is_err());
        let mut bad = state.clone();
        bad.insert(b"zz".to_vec(), vec![]);
        assert!(check_cycle(&w, 7, 3, dir.path(), &State::new(), &bad).is_err());
    }
}
