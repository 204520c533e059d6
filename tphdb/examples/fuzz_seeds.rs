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
    std::fs::create_dir_all(&phf_dir)?;
    std::fs::create_dir_all(&piece_dir)?;

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
