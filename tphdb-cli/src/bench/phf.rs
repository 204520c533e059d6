//! `tphdb bench phf`: CPHash side by side with PtrHash and FMPH, and the
//! global index each makes against a binary fuse (`fuse`), which stores
//! the index's values without a perfect hash; `xorf_fuse16`, the `xorf`
//! crate's binary fuse filter, is the reference for a fuse's build.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use serde_json::json;
use tphdb::phf::fuse::Fuse;
use tphdb::phf::{CpHash, PerfectHash, PhfConfig, PtrHashPhf};

use super::report::round;
use super::{all_threads, with_threads, Report};

#[derive(Args)]
pub struct PhfArgs {
    /// Number of keys (random 64-bit key hashes).
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Table size over key count (c); 1.0 is minimal.
    #[arg(long, default_value_t = 1.1)]
    table_factor: f64,
    /// Average keys per bucket; default depends on the table factor.
    #[arg(long)]
    lambda: Option<f64>,
    /// Target keys per CPHash segment.
    #[arg(long, default_value_t = PhfConfig::default().segment_keys)]
    segment_keys: usize,
    /// Engines to run, comma separated: cphash, ptr_hash, fmph, fuse,
    /// xorf_fuse16 (the `xorf` crate's 3-wise binary fuse of 16-bit
    /// fingerprints, built on one thread: what a fuse build can cost; it
    /// stores fingerprints, not chosen values, and 4-wise `fuse` takes
    /// fewer bits a value).
    #[arg(long, default_value = "cphash,ptr_hash,fmph", value_delimiter = ',')]
    engines: Vec<String>,
    /// Bits of a global index's value (signature and piece) per key: the
    /// `index_bits_per_key` column adds a slot of this many bits per table
    /// entry to a perfect hash, and `fuse` stores values of this width.
    #[arg(long, default_value_t = 12)]
    value_bits: u32,
    /// Rounds of builds; the fastest build of each engine is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Query passes per round; the fastest is reported.
    #[arg(long, default_value_t = 3)]
    query_passes: usize,
    /// Write results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seed of the key generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// The operations the benchmark needs, for our trait and for `ph`'s FMPH.
trait Bench: Send + Sync {
    fn query(&self, key: u64) -> usize;
    fn table_size(&self) -> usize;
    fn size_bytes(&self) -> usize;
}

impl<P: PerfectHash> Bench for P {
    fn query(&self, key: u64) -> usize {
        self.slot(key)
    }
    fn table_size(&self) -> usize {
        PerfectHash::table_size(self)
    }
    fn size_bytes(&self) -> usize {
        let mut v = Vec::new();
        self.encode(&mut v);
        v.len()
    }
}

struct Fmph(ph::fmph::Function);

/// A fuse stores a value per key instead of mapping keys to slots: its
/// query is the value, its table the cells.
struct FuseIndex(Fuse);

/// The value a fuse engine stores for `key`.
fn fuse_value(key: u64, bits: u32) -> u64 {
    key.rotate_left(17) & ((1 << bits) - 1)
}

impl Bench for FuseIndex {
    fn query(&self, key: u64) -> usize {
        self.0.get(key) as usize
    }
    fn table_size(&self) -> usize {
        0
    }
    fn size_bytes(&self) -> usize {
        let mut v = Vec::new();
        self.0.encode(&mut v);
        v.len()
    }
}

/// The `xorf` crate's binary fuse filter: its query is whether the key is
/// in it.
struct XorfFuse16(xorf::BinaryFuse16);

impl Bench for XorfFuse16 {
    fn query(&self, key: u64) -> usize {
        usize::from(xorf::Filter::contains(&self.0, &key))
    }
    fn table_size(&self) -> usize {
        0
    }
    fn size_bytes(&self) -> usize {
        self.0.fingerprints.len() * 2
    }
}

impl Bench for Fmph {
    fn query(&self, key: u64) -> usize {
        self.0.get_or_panic(&key) as usize
    }
    fn table_size(&self) -> usize {
        self.0.len()
    }
    fn size_bytes(&self) -> usize {
        self.0.write_bytes()
    }
}

fn build(
    engine: &str,
    keys: &[u64],
    cfg: &PhfConfig,
    value_bits: u32,
) -> Result<Box<dyn Bench>, String> {
    fn ours<P: PerfectHash>(keys: &[u64], cfg: &PhfConfig) -> Result<Box<dyn Bench>, String> {
        let b = P::build(keys, cfg).map_err(|e| format!("perfect hash build: {e}"))?;
        assert!(b.duplicate_hashes.is_empty());
        Ok(Box::new(b.phf))
    }
    Ok(match engine {
        "cphash" => ours::<CpHash>(keys, cfg)?,
        "ptr_hash" => ours::<PtrHashPhf>(keys, cfg)?,
        "fmph" => {
            let mt = rayon::current_num_threads() > 1;
            let conf = ph::fmph::BuildConf::mt(mt);
            Box::new(Fmph(ph::fmph::Function::from_slice_with_conf(keys, conf)))
        }
        "fuse" => {
            let value = |k: u64, _| fuse_value(k, value_bits);
            let b = Fuse::build(keys, value_bits, cfg.seed, &value)
                .map_err(|e| format!("fuse: {e}"))?;
            Box::new(FuseIndex(b.fuse))
        }
        "xorf_fuse16" => Box::new(XorfFuse16(
            xorf::BinaryFuse16::try_from(keys).map_err(|e| format!("xorf: {e}"))?,
        )),
        other => return Err(format!("unknown phf engine {other:?}")),
    })
}

/// Builds with `threads` threads; returns the function and ns per key.
fn timed_build(
    engine: &str,
    keys: &[u64],
    cfg: &PhfConfig,
    value_bits: u32,
    threads: usize,
) -> Result<(Box<dyn Bench>, f64), String> {
    with_threads(threads, || {
        let t = Instant::now();
        let b = build(engine, keys, cfg, value_bits)?;
        Ok((b, t.elapsed().as_nanos() as f64 / keys.len().max(1) as f64))
    })
}

fn query_ns(phf: &dyn Bench, keys: &[u64]) -> f64 {
    let t = Instant::now();
    let mut acc = 0usize;
    for &k in keys {
        acc = acc.wrapping_add(phf.query(black_box(k)));
    }
    black_box(acc);
    t.elapsed().as_nanos() as f64 / keys.len().max(1) as f64
}

/// A benchmark of a wrong function is worthless: check it is perfect (a
/// fuse: that it gives every key its value).
fn check_perfect(
    engine: &str,
    phf: &dyn Bench,
    keys: &[u64],
    value_bits: u32,
) -> Result<(), String> {
    if engine == "xorf_fuse16" {
        return match keys.iter().all(|&k| phf.query(k) == 1) {
            true => Ok(()),
            false => Err("xorf's fuse lost a key".into()),
        };
    }
    if engine == "fuse" {
        return match keys
            .iter()
            .all(|&k| phf.query(k) as u64 == fuse_value(k, value_bits))
        {
            true => Ok(()),
            false => Err("fuse gave a key another value".into()),
        };
    }
    let mut seen = vec![false; phf.table_size()];
    for &k in keys {
        let s = phf.query(k);
        if s >= seen.len() || seen[s] {
            return Err(format!("{engine} is not perfect on this key set"));
        }
        seen[s] = true;
    }
    Ok(())
}

pub fn run(a: PhfArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut rng = fastrand::Rng::with_seed(a.seed);
    let mut keys: Vec<u64> = (0..a.keys).map(|_| rng.u64(..)).collect();
    keys.sort_unstable();
    keys.dedup();
    rng.shuffle(&mut keys);
    let cfg = PhfConfig {
        table_factor: a.table_factor,
        keys_per_bucket: a.lambda,
        segment_keys: a.segment_keys,
        ..PhfConfig::default()
    };
    let mut report = Report::new("phf");
    report.param("keys", keys.len());
    report.param("table_factor", a.table_factor);
    report.param("lambda", a.lambda);
    report.param("segment_keys", a.segment_keys);
    report.param("value_bits", a.value_bits);
    report.param("threads", all_threads());
    eprintln!(
        "phf: {} keys, c = {}, {} threads",
        keys.len(),
        a.table_factor,
        all_threads()
    );
    // Engines take turns in every round, so that noise from other work on
    // the machine falls on all of them alike; the fastest round counts.
    let n = a.engines.len();
    let (mut b1, mut bmt, mut q) = (
        vec![f64::INFINITY; n],
        vec![f64::INFINITY; n],
        vec![f64::INFINITY; n],
    );
    let mut built: Vec<Option<Box<dyn Bench>>> = (0..n).map(|_| None).collect();
    for round in 0..a.rounds.max(1) {
        eprintln!("  round {}/{}", round + 1, a.rounds.max(1));
        for (i, engine) in a.engines.iter().enumerate() {
            let (_, t1) = timed_build(engine, &keys, &cfg, a.value_bits, 1)?;
            let (phf, tmt) = timed_build(engine, &keys, &cfg, a.value_bits, all_threads())?;
            b1[i] = b1[i].min(t1);
            bmt[i] = bmt[i].min(tmt);
            if round == 0 {
                check_perfect(engine, phf.as_ref(), &keys, a.value_bits)?;
            }
            built[i] = Some(phf);
        }
        for _ in 0..a.query_passes.max(1) {
            for (i, phf) in built.iter().enumerate() {
                let phf = phf.as_deref().expect("built above");
                q[i] = q[i].min(query_ns(phf, &keys));
            }
        }
    }
    for (i, engine) in a.engines.iter().enumerate() {
        let phf = built[i].as_deref().expect("built above");
        let per_key = |bits: f64| bits / keys.len().max(1) as f64;
        let bits = per_key(phf.size_bytes() as f64 * 8.0);
        let index_bits = bits + per_key(phf.table_size() as f64 * a.value_bits as f64);
        report.result(
            engine,
            vec![
                ("bits_per_key", json!(round(bits, 3))),
                ("index_bits_per_key", json!(round(index_bits, 3))),
                ("build_ns_per_key_1t", json!(round(b1[i], 2))),
                ("build_ns_per_key_mt", json!(round(bmt[i], 2))),
                ("query_ns_per_key", json!(round(q[i], 2))),
            ],
        );
    }
    report.print_table();
    if let Some(path) = &a.json {
        report.write_json(path)?;
    }
    Ok(())
}
