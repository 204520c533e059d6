//! INFO: Redis's sections where clients read them, tphdb's own after.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::commands::REDIS_VERSION;
use crate::server::Shared;

/// The INFO text of `section` (all sections if `None`, `all` or
/// `everything`).
pub(crate) fn info(shared: &Shared, section: Option<String>) -> String {
    let want = |s: &str| {
        section
            .as_deref()
            .is_none_or(|w| matches!(w, "all" | "everything" | "default") || w == s)
    };
    let stats = shared.db.stats();
    let c = &shared.counters;
    let cfg = &shared.cfg;
    let mut t = String::new();
    if want("server") {
        let _ = write!(
            t,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\ntphdb_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nexecutable:tphdb-server\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            shared.port,
            shared.started.elapsed().as_secs(),
        );
    }
    if want("clients") {
        let _ = write!(
            t,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            shared.connected.load(Relaxed),
            cfg.maxclients
        );
    }
    if want("memory") {
        let used = stats.memtable_bytes
            + stats.pinned_memtable_bytes
            + stats.index_memory_bytes
            + stats.block_cache_bytes
            + stats.job_memory_bytes;
        let _ = write!(
            t,
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{:.2}M\r\ntphdb_memtable_bytes:{}\r\ntphdb_index_bytes:{}\r\ntphdb_block_cache_bytes:{}\r\ntphdb_job_bytes:{}\r\nmaxmemory:{}\r\n\r\n",
            used as f64 / (1 << 20) as f64,
            stats.memtable_bytes + stats.pinned_memtable_bytes,
            stats.index_memory_bytes,
            stats.block_cache_bytes,
            stats.job_memory_bytes,
            cfg.db_options.memory_budget_bytes.unwrap_or(0),
        );
    }
    if want("persistence") {
        let _ = write!(
            t,
            "# Persistence\r\nloading:0\r\naof_enabled:{}\r\nappendfsync:{}\r\nrdb_changes_since_last_save:0\r\n\r\n",
            u8::from(cfg.appendfsync != crate::server::Fsync::No),
            format!("{:?}", cfg.appendfsync).to_ascii_lowercase(),
        );
    }
    if want("stats") {
        let _ = write!(
            t,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\nexpired_keys:0\r\nevicted_keys:0\r\n\r\n",
            c.connections.load(Relaxed),
            c.commands.load(Relaxed),
            c.rejected.load(Relaxed),
            c.hits.load(Relaxed),
            c.misses.load(Relaxed),
        );
    }
    if want("keyspace") {
        let keys = crate::commands::dbsize(shared);
        let _ = write!(
            t,
            "# Keyspace\r\ndb0:keys={keys},expires=0,avg_ttl=0\r\n\r\n"
        );
    }
    if want("tphdb") {
        let _ = write!(
            t,
            "# tphdb\r\nwrites:{}\r\nuser_bytes_written:{}\r\nwrite_amplification:{:.3}\r\nwal_amplification:{:.3}\r\nreads_per_get:{:.3}\r\nindex_bytes_per_key:{:.3}\r\nflushes:{}\r\ncompactions:{}\r\nlow_priority_compactions:{}\r\nstall_micros:{}\r\nmemtable_stall_micros:{}\r\nlevel0_stall_micros:{}\r\nrunning_jobs:{}\r\ncompaction_pending:{}\r\nlevels:{}\r\n",
            stats.writes,
            stats.user_bytes_written,
            stats.write_amplification,
            stats.wal_amplification,
            stats.reads_per_get,
            stats.index_bytes_per_key,
            stats.flushes,
            stats.compactions,
            stats.low_priority_compactions,
            stats.stall_micros,
            stats.memtable_stall_micros,
            stats.level0_stall_micros,
            stats.running_jobs,
            u8::from(stats.work_pending),
            stats.levels.len(),
        );
        for l in &stats.levels {
            let _ = write!(
                t,
                "level{}:tphs={},pieces={},live_entries={},index_bytes={}\r\n",
                l.level, l.tphs, l.pieces, l.live_entries, l.index_bytes
            );
        }
        // What the write amplification is made of, as `tphdb stats` gives it.
        let w = &stats.writes_by_cause;
        let r = &stats.compaction_reads;
        let _ = write!(
            t,
            "bytes_written_by_cause:wal={},flush={},l0_merge={},push_down={},gc_fold={},index={},manifest={}\r\n\
             compaction_bytes_read_by_cause:l0_merge={},push_down={},gc_fold={},key_hashes={},values_again={}\r\n",
            w.wal, w.flush, w.l0_merge, w.push_down, w.gc_fold, w.index, w.manifest,
            r.l0_merge, r.push_down, r.gc_fold, r.key_hashes, r.values_again,
        );
    }
    t
}
