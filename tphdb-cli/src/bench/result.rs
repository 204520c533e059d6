//! One engine's figures from a side-by-side run: what its child process
//! measured, then the comparisons the runner adds. The child writes it as
//! JSON once; the runner reads it back, typed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Latency of one operation kind.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub avg_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// `(quantile, microseconds)` spaced evenly in `log(1 - q)`, for plots.
    pub cdf: Vec<(f64, f64)>,
}

/// What one engine did in one run. Amplifications are over the bytes of
/// keys and values the user wrote (load and run): `write_amp` counts what
/// flushes and compactions wrote (the paper's and RocksDB's definition;
/// only for engines that count it), `wal_amp` the WAL, and
/// `device_write_amp` what the device received (`/proc/self/io`
/// `write_bytes` less `cancelled_write_bytes`: data deleted before it was
/// written back never reached the disk).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EngineResult {
    pub engine: String,
    /// Why the run produced no figures (the process failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub ops: Option<u64>,
    pub ops_per_sec: Option<f64>,
    /// `readseq`: keys per second of the one scan.
    pub keys_per_sec: Option<f64>,
    pub avg_us: Option<f64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub load_ops_per_sec: Option<f64>,
    pub write_amp: Option<f64>,
    pub wal_amp: Option<f64>,
    pub device_write_amp: Option<f64>,
    /// Bytes read from the device over bytes the run's reads returned.
    pub read_amp: Option<f64>,
    pub disk_read_mb: Option<f64>,
    pub load_written_mb: Option<f64>,
    pub disk_written_mb: Option<f64>,
    pub device_written_mb: Option<f64>,
    pub final_settle_seconds: Option<f64>,
    pub space_mb: Option<f64>,
    pub peak_rss_mb: Option<f64>,
    /// Reads that found nothing where a value was written, or the reverse.
    pub unexpected_reads: Option<u64>,
    /// Operations completed in each whole second of the measured phase.
    #[serde(default, deserialize_with = "null_is_default")]
    pub throughput_per_sec: Vec<u64>,
    #[serde(default, deserialize_with = "null_is_default")]
    pub latency: BTreeMap<String, LatencySummary>,
    /// Resident set each second of the measured phase and the final
    /// settle, in MB.
    #[serde(default, deserialize_with = "null_is_default")]
    pub rss_mb_per_sec: Vec<f64>,
    /// What the engine's parts held each of those seconds, in MB.
    #[serde(default, deserialize_with = "null_is_default")]
    pub memory_parts_mb_per_sec: BTreeMap<String, Vec<f64>>,
    /// What writers waited each of those seconds, by cause, in ms (tphdb:
    /// stopped, or paced by what paced them).
    #[serde(default, deserialize_with = "null_is_default")]
    pub waited_ms_per_sec: BTreeMap<String, Vec<f64>>,
    /// The sampled resident set at its highest and the parts then, in MB.
    #[serde(default, deserialize_with = "null_is_default")]
    pub memory_at_peak_mb: BTreeMap<String, f64>,
    /// Pogreb's own benchmark's figures (the load and the run).
    pub write_ops_per_sec: Option<f64>,
    pub read_ops_per_sec: Option<f64>,
    /// Comparisons the runner adds.
    pub x_rocksdb_ops: Option<f64>,
    pub x_rocksdb_p99: Option<f64>,
    pub x_rocksdb_write_amp: Option<f64>,
    pub x_rocksdb_device_write_amp: Option<f64>,
    pub x_tuned_ops: Option<f64>,
    /// The slowest whole second over the median second (stalls).
    pub worst_second_x_median: Option<f64>,
    /// What writers waited in about that second, by cause, in ms (from
    /// `waited_ms_per_sec`, whose seconds start with the measured phase's
    /// to within the sampler's start).
    #[serde(default, deserialize_with = "null_is_default")]
    pub worst_second_waited_ms: BTreeMap<String, f64>,
    /// Disk rows: tphdb's throughput over this row's.
    pub tphdb_ratio: Option<f64>,
    /// What only this engine reports (tphdb: reads per get, index size,
    /// structure, write amplification by cause; RocksDB: cache misses).
    #[serde(flatten)]
    pub engine_figures: BTreeMap<String, Value>,
}

/// Reads a JSON `null` (the Go driver's empty list) as the default.
fn null_is_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl EngineResult {
    /// A row that only says why the engine has no figures.
    pub fn failed(engine: &str, why: String) -> EngineResult {
        EngineResult {
            engine: engine.to_string(),
            error: Some(why),
            ..EngineResult::default()
        }
    }

    /// The row as a JSON object, for reports and tables.
    pub fn to_json(&self) -> serde_json::Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        }
    }
}
