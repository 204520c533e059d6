//! Commands that read and change a database from the shell, after
//! RocksDB's `ldb` and `sst_dump`: get, put, delete, scan, dump, load,
//! compact, checkpoint and inspect (pieces, WALs, MANIFESTs).

use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use tphdb::{IteratorMode, Options, ReadOptions, DB};

use crate::lines::{Encoding, LineReader, LineWriter};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Where the database is and how keys and values are spelled.
#[derive(Args)]
pub struct DbArgs {
    /// The database directory.
    #[arg(long)]
    db: PathBuf,
    /// How keys and values are written on the command line and printed:
    /// escaped (`\t`, `\n`, `\\`, `\xNN`) or hex.
    #[arg(long, value_enum, default_value = "escaped")]
    encoding: Encoding,
    /// Short for `--encoding hex`.
    #[arg(long, conflicts_with = "encoding")]
    hex: bool,
}

impl DbArgs {
    fn encoding(&self) -> Encoding {
        if self.hex {
            Encoding::Hex
        } else {
            self.encoding
        }
    }

    fn arg(&self, what: &str, text: &str) -> Result<Vec<u8>> {
        self.encoding()
            .decode(text.as_bytes())
            .map_err(|e| format!("{what} {text:?}: {e}").into())
    }

    fn read_only(&self) -> Result<DB> {
        Ok(DB::open_for_read_only(&Options::default(), &self.db)?)
    }

    /// Opens for writing; a database is created only by `put` and `load`.
    fn writable(&self, create: bool) -> Result<DB> {
        if !create && !self.db.join("CURRENT").exists() {
            return Err(format!("no database in {}", self.db.display()).into());
        }
        Ok(DB::open(&Options::default(), &self.db)?)
    }
}

#[derive(Args)]
pub struct ScanArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The first key of the range (inclusive), in key order also with
    /// `--reverse`.
    #[arg(long)]
    from: Option<String>,
    /// Stop before this key (exclusive).
    #[arg(long)]
    to: Option<String>,
    /// Only keys starting with this.
    #[arg(long)]
    prefix: Option<String>,
    /// At most this many entries.
    #[arg(long)]
    limit: Option<u64>,
    /// Largest key first.
    #[arg(long)]
    reverse: bool,
    /// Print keys without values.
    #[arg(long)]
    keys_only: bool,
}

#[derive(Subcommand)]
pub enum InspectWhat {
    /// A piece file's footer, sections, properties, perfect hash and
    /// blocks.
    Piece {
        /// The piece file (`NNNNNN.ph`).
        file: PathBuf,
        /// List this many blocks one by one.
        #[arg(long, default_value_t = 8)]
        blocks: u64,
        /// Also print the first N entries.
        #[arg(long, default_value_t = 0)]
        entries: u64,
        /// How keys and values are printed.
        #[arg(long, value_enum, default_value = "escaped")]
        encoding: Encoding,
    },
    /// A WAL's write batches: sequence numbers, puts and deletes.
    Wal {
        /// The WAL file (`NNNNNN.log`).
        file: PathBuf,
        /// Show at most this many bytes of each key.
        #[arg(long, default_value_t = 64)]
        key_bytes: usize,
    },
    /// A MANIFEST's version edits.
    Manifest {
        /// The MANIFEST file (`MANIFEST-NNNNNN`).
        file: PathBuf,
    },
}

/// Prints the value of a key; exits 1 if it is not there.
pub fn get(db: DbArgs, key: &str) -> Result<()> {
    let key = db.arg("key", key)?;
    let handle = db.read_only()?;
    match handle.get(&key)? {
        Some(v) => {
            let mut line = Vec::new();
            db.encoding().encode(&v, &mut line);
            line.push(b'\n');
            io::stdout().write_all(&line)?;
            Ok(())
        }
        None => Err("not found".into()),
    }
}

pub fn put(db: DbArgs, key: &str, value: &str) -> Result<()> {
    let (key, value) = (db.arg("key", key)?, db.arg("value", value)?);
    let handle = db.writable(true)?;
    handle.put_opt(&key, &value, &sync())?;
    Ok(handle.close()?)
}

pub fn delete(db: DbArgs, key: &str) -> Result<()> {
    let key = db.arg("key", key)?;
    let handle = db.writable(false)?;
    handle.delete_opt(&key, &sync())?;
    Ok(handle.close()?)
}

fn sync() -> tphdb::WriteOptions {
    tphdb::WriteOptions {
        sync: true,
        ..Default::default()
    }
}

/// Prints entries in key order, one per line (docs/cli.md).
pub fn scan(a: ScanArgs) -> Result<()> {
    let decode =
        |what, text: &Option<String>| text.as_deref().map(|t| a.db.arg(what, t)).transpose();
    let (from, to, prefix) = (
        decode("--from", &a.from)?,
        decode("--to", &a.to)?,
        decode("--prefix", &a.prefix)?,
    );
    let db = a.db.read_only()?;
    // One range in key order; --reverse walks it from the end.
    let (lower_bound, upper_bound) = tphdb::prefix_bounds(from, to, prefix.as_deref());
    let opts = ReadOptions {
        lower_bound,
        upper_bound,
        ..ReadOptions::default()
    };
    let mode = if a.reverse {
        IteratorMode::End
    } else {
        IteratorMode::Start
    };
    let mut out = LineWriter::new(BufWriter::new(io::stdout().lock()), a.db.encoding());
    for item in db.iterator_opt(mode, opts) {
        if a.limit.is_some_and(|l| out.count >= l) {
            break;
        }
        let (k, v) = item?;
        let value = (!a.keys_only).then_some(&v[..]);
        if let Err(e) = out.entry(&k, value) {
            // A closed pipe (`| head`) ends the scan quietly.
            if e.kind() == io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
    }
    out.into_inner().flush()?;
    Ok(())
}

/// Writes every entry, with a header and a checked trailer, to `out` (a
/// file, or standard output for `-`).
pub fn dump(db: DbArgs, out: &Path) -> Result<()> {
    let handle = db.read_only()?;
    let started = Instant::now();
    let sink: Box<dyn Write> = if out == Path::new("-") {
        Box::new(io::stdout().lock())
    } else {
        Box::new(std::fs::File::create(out)?)
    };
    let mut w = LineWriter::new(BufWriter::with_capacity(1 << 20, sink), db.encoding());
    w.header()?;
    // One consistent view, however long the dump takes.
    let snapshot = handle.snapshot();
    let opts = ReadOptions {
        snapshot: Some(&snapshot),
        ..ReadOptions::default()
    };
    for item in handle.iterator_opt(IteratorMode::Start, opts) {
        let (k, v) = item?;
        w.entry(&k, Some(&v))?;
    }
    w.trailer()?;
    let count = w.count;
    let mut inner = w.into_inner();
    inner.flush()?;
    drop(inner);
    if out != Path::new("-") {
        std::fs::File::open(out)?.sync_all()?;
        eprintln!(
            "dumped {count} entries to {} in {:.1} s",
            out.display(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// Loads lines (a dump, or `key<TAB>value` lines in any order) with the
/// bulk loader: no WAL, sorted in memory in chunks. With `put_loop`, with
/// `put` instead. Either way it waits for the compactions the load caused,
/// so the time covers a settled database.
pub fn load(db: DbArgs, input: &Path, put_loop: bool) -> Result<()> {
    let reader: Box<dyn BufRead> = if input == Path::new("-") {
        Box::new(BufReader::new(io::stdin().lock()))
    } else {
        // A dump in a file is checked whole before anything is loaded.
        let open = || -> Result<BufReader<std::fs::File>> {
            Ok(BufReader::with_capacity(
                1 << 20,
                std::fs::File::open(input)?,
            ))
        };
        let mut file = open()?;
        if file.fill_buf()?.starts_with(b"#") {
            let mut check = LineReader::new(file, db.encoding());
            while check.next_entry()?.is_some() {}
            file = open()?;
        }
        Box::new(file)
    };
    let handle = db.writable(true)?;
    let started = Instant::now();
    let mut lines = LineReader::new(reader, db.encoding());
    let mut loader = (!put_loop).then(|| handle.bulk_loader());
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut last_report = Instant::now();
    while let Some((k, v)) = lines.next_entry()? {
        match &mut loader {
            Some(l) => l.put(&k, &v)?,
            None => handle.put(&k, &v)?,
        }
        entries += 1;
        bytes += (k.len() + v.len()) as u64;
        if last_report.elapsed().as_secs() >= 5 {
            last_report = Instant::now();
            eprintln!("loaded {entries} entries so far");
        }
    }
    let chunks = match loader.take() {
        Some(l) => format!("{} sorted chunks", l.finish()?.chunks),
        None => "puts".to_string(),
    };
    drop(loader);
    handle.wait_for_compactions()?;
    handle.close()?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "loaded {entries} entries ({:.1} MB, {chunks}) in {secs:.1} s, compactions included: \
         {:.0} entries/s",
        bytes as f64 / 1e6,
        entries as f64 / secs.max(1e-9)
    );
    Ok(())
}

pub fn compact(db: DbArgs) -> Result<()> {
    let handle = db.writable(false)?;
    let started = Instant::now();
    handle.compact_range(None, None)?;
    handle.close()?;
    eprintln!("compacted in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

pub fn checkpoint(db: DbArgs, to: &Path) -> Result<()> {
    let handle = db.writable(false)?;
    handle.checkpoint(to)?;
    handle.close()?;
    eprintln!("checkpoint of {} in {}", db.db.display(), to.display());
    Ok(())
}

pub fn inspect(what: InspectWhat) -> Result<()> {
    match what {
        InspectWhat::Piece {
            file,
            blocks,
            entries,
            encoding,
        } => {
            let fs = tphdb::fs::PosixFs;
            let reader = tphdb::piece::PieceReader::open(&fs, &file, tphdb::ReadMode::Pread)?;
            print!("{}", reader.inspect(blocks)?);
            let mut out = Vec::new();
            for e in reader.iter().take(entries as usize) {
                let e = e?;
                out.clear();
                encoding.encode(&e.key, &mut out);
                out.push(b'\t');
                match &e.value {
                    Some(v) => encoding.encode(v, &mut out),
                    None => out.extend_from_slice(b"(tombstone)"),
                }
                println!("  seq {:>10} {}", e.seq, String::from_utf8_lossy(&out));
            }
            Ok(())
        }
        InspectWhat::Wal { file, key_bytes } => {
            let mut out = BufWriter::new(io::stdout().lock());
            tphdb::inspect::wal(&file, key_bytes, &mut out)?;
            Ok(out.flush()?)
        }
        InspectWhat::Manifest { file } => {
            let mut out = BufWriter::new(io::stdout().lock());
            tphdb::inspect::manifest(&file, &mut out)?;
            Ok(out.flush()?)
        }
    }
}
