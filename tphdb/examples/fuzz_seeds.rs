//! Writes seed corpora for the fuzz targets from real encodings:
//! `cargo run -p tphdb --example fuzz_seeds -- fuzz/corpus`.

use std::path::{Path, PathBuf};

use tphdb::fs::MemFs;
use tphdb::hash::key_hash;
use tphdb::phf::{Phf, PhfConfig, PhfKind};
use tphdb::piece::{write_piece, write_piece_hashed, Compression, EntryRef, PieceOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let phf_dir = out.join("phf_decode");
    let piece_dir = out.join("piece_open");
    let db_dir = out.join("db_open");
    std::fs::create_dir_all(&phf_dir)?;
    std::fs::create_dir_all(&piece_dir)?;
    std::fs::create_dir_all(&db_dir)?;
    db_seeds(&out)?;
    block_seeds(&out.join("block_decode"))?;

    for (kind, n, c) in [
        (PhfKind::CpHash, 0, 1.1),
        (PhfKind::CpHash, 1, 1.0),
        (PhfKind::CpHash, 50, 1.1),
        (PhfKind::CpHash, 300, 1.0),
        (PhfKind::PtrHash, 50, 1.1),
    ] {
        let hashes: Vec<u64> = (0..n as u64).map(|i| key_hash(&i.to_le_bytes())).collect();
        let cfg = PhfConfig {
            table_factor: c,
            ..PhfConfig::default()
        };
        let mut bytes = Vec::new();
        Phf::build(kind, &hashes, &cfg)?.phf.encode(&mut bytes);
        std::fs::write(phf_dir.join(format!("seed-{}-{n}-{c}", kind.name())), bytes)?;
    }

    let fs = MemFs::new();
    let keys: Vec<Vec<u8>> = (0..40u32)
        .map(|i| format!("key{i:03}").into_bytes())
        .collect();
    let values: Vec<Vec<u8>> = (0..40u32)
        .map(|i| vec![b'v'; (i * 7 % 50) as usize])
        .collect();
    let entries: Vec<EntryRef> = keys
        .iter()
        .zip(&values)
        .enumerate()
        .map(|(i, (k, v))| EntryRef {
            key: k,
            value: (i % 9 != 0).then_some(&v[..]),
            seq: i as u64,
        })
        .collect();
    let path = Path::new("/seed.ph");
    let emit = |name: &str| -> Result<(), Box<dyn std::error::Error>> {
        std::fs::write(
            piece_dir.join(format!("seed-{name}.ph")),
            fs.read_file(path)?,
        )?;
        Ok(())
    };
    for (name, compression, page) in [
        ("plain", Compression::None, 256),
        ("lz4", Compression::Lz4, 512),
    ] {
        let opts = PieceOptions {
            compression,
            page_size: page,
            ..PieceOptions::default()
        };
        write_piece(&fs, path, &entries, &opts)?;
        emit(name)?;
    }
    write_piece(&fs, path, &[], &PieceOptions::default())?;
    emit("empty")?;
    let mut hashes: Vec<u64> = entries.iter().map(|e| key_hash(e.key)).collect();
    hashes[5] = hashes[4];
    write_piece_hashed(
        &fs,
        path,
        &entries,
        &hashes,
        &PieceOptions {
            page_size: 256,
            ..PieceOptions::default()
        },
    )?;
    emit("overflow")?;
    Ok(())
}

/// Blocks as the piece writer encodes them, framed for `block_decode`:
/// `count:u8 max_raw/16:u16 block`.
fn block_seeds(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(out)?;
    let keys: Vec<Vec<u8>> = (0..12u32)
        .map(|i| format!("key{i:03}").into_bytes())
        .collect();
    let values: Vec<Vec<u8>> = (0..12u32)
        .map(|i| vec![b'v'; (i * 11 % 40) as usize])
        .collect();
    let slots: Vec<Option<EntryRef>> = (0..12)
        .map(|i| {
            (i % 4 != 3).then(|| EntryRef {
                key: &keys[i],
                value: (i % 5 != 0).then_some(&values[i][..]),
                seq: i as u64 * 3,
            })
        })
        .collect();
    for (name, lz4) in [("plain", false), ("lz4", true)] {
        let (block, raw) = tphdb::fuzzing::encode_block(&slots, lz4)?;
        let mut framed = vec![slots.len() as u8];
        framed.extend_from_slice(&(raw.div_ceil(16) as u16).to_le_bytes());
        framed.extend_from_slice(&block);
        std::fs::write(out.join(format!("seed-{name}")), framed)?;
    }
    Ok(())
}

/// A real database's MANIFEST, WAL and pieces: framed for `db_open` as
/// `kind:u8 number:u32 len:u32 bytes` (kind 0 MANIFEST, 1 WAL, 2 piece),
/// and the bare log files for the log, WAL and MANIFEST targets.
fn db_seeds(root: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let out = &root.join("db_open");
    for t in ["log_reader", "wal_replay", "manifest_replay"] {
        std::fs::create_dir_all(root.join(t))?;
    }
    use std::sync::Arc;
    use tphdb::{Options, DB};
    for (name, flushes) in [("flushed", 3u32), ("wal-only", 0)] {
        let fs = MemFs::new();
        let opts = Options {
            file_system: Some(Arc::new(fs.clone())),
            write_buffer_bytes: 8 << 10,
            l0_compaction_trigger: 2,
            fanout: 2,
            ..Options::default()
        };
        let dir = Path::new("/db");
        let db = DB::open(&opts, dir)?;
        for round in 0..flushes + 1 {
            for i in 0..60u32 {
                db.put(
                    format!("key{:05}", i * 7 + round),
                    vec![b'v'; (i % 20) as usize],
                )?;
                if i % 11 == 0 {
                    db.delete(format!("key{:05}", i))?;
                }
            }
            if round < flushes {
                db.flush()?;
            }
        }
        db.wait_for_compactions()?;
        drop(db);
        let mut framed = Vec::new();
        let mut names = tphdb::fs::FileSystem::list(&fs, dir)?;
        // The MANIFEST first: CURRENT will name it.
        names.sort_by_key(|n| !n.starts_with("MANIFEST"));
        for n in names {
            let (kind, number) = if let Some(x) = n.strip_prefix("MANIFEST-") {
                (0u8, x.parse::<u32>()?)
            } else if let Some(x) = n.strip_suffix(".log") {
                (1, x.parse()?)
            } else if let Some(x) = n.strip_suffix(".ph") {
                (2, x.parse()?)
            } else {
                continue;
            };
            let bytes = fs.read_file(&dir.join(&n))?;
            let targets: &[&str] = match kind {
                0 => &["log_reader", "manifest_replay"],
                1 => &["log_reader", "wal_replay"],
                _ => &[],
            };
            for t in targets {
                std::fs::write(root.join(t).join(format!("seed-{name}-{n}")), &bytes)?;
            }
            framed.push(kind);
            framed.extend_from_slice(&number.to_le_bytes());
            framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            framed.extend_from_slice(&bytes);
        }
        std::fs::write(out.join(format!("seed-{name}")), framed)?;
    }
    Ok(())
}
