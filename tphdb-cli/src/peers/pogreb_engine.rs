//! Pogreb (Go) runs in its own driver process, `tools/pogreb-driver`. In
//! the benchmark child, engine `pogreb` is this recorder: it writes the
//! operations the workload makes, one unit per timed operation, to
//! `ops.bin` in its directory; the driver then replays them against Pogreb
//! and times them. The format is documented in the driver.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use tphdb_cli::engines::{EngineConfig, Kv, Result};

const PUT: u8 = 1;
const GET: u8 = 2;
const DELETE: u8 = 3;
const MARKER: u8 = 255;
const SETTLE: u8 = 1;
const REOPEN: u8 = 2;
const RUN: u8 = 3;

pub struct Recorder {
    out: Mutex<BufWriter<File>>,
    /// Ops of the unit in progress, and how many.
    unit: Mutex<(Vec<u8>, u8)>,
}

impl Recorder {
    pub fn open(dir: &Path, _cfg: &EngineConfig) -> Result<Recorder> {
        let path = dir.join("ops.bin");
        let existed = path.exists();
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let r = Recorder {
            out: Mutex::new(BufWriter::with_capacity(1 << 20, file)),
            unit: Mutex::new((Vec::new(), 0)),
        };
        if existed {
            r.marker(REOPEN)?;
        }
        Ok(r)
    }

    fn marker(&self, tag: u8) -> Result<()> {
        Ok(self
            .out
            .lock()
            .expect("recorder")
            .write_all(&[MARKER, tag])?)
    }

    fn add(&self, code: u8, key: &[u8], tail: &[u8]) {
        let mut u = self.unit.lock().expect("recorder");
        u.0.push(code);
        u.0.extend_from_slice(&(key.len() as u32).to_le_bytes());
        u.0.extend_from_slice(key);
        u.0.extend_from_slice(tail);
        u.1 += 1;
    }
}

impl Kv for Recorder {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut tail = (value.len() as u32).to_le_bytes().to_vec();
        tail.extend_from_slice(value);
        self.add(PUT, key, &tail);
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        // The driver checks presence; the recording run does not know it.
        self.add(GET, key, &[1]);
        Ok(Some(0))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.add(DELETE, key, &[]);
        Ok(())
    }

    fn scan(&self, _start: &[u8], _n: usize) -> Result<usize> {
        Err("pogreb has no ordered scans: workloads with scans are not supported".into())
    }

    fn settle(&self) -> Result<()> {
        self.marker(SETTLE)?;
        Ok(self.out.lock().expect("recorder").flush()?)
    }

    fn end_op(&self, label: u8, expect_found: bool) {
        let mut u = self.unit.lock().expect("recorder");
        let (mut ops, count) = std::mem::take(&mut *u);
        if count == 0 {
            return;
        }
        // A get that should find nothing (readmissing) says so.
        if !expect_found && ops.first() == Some(&GET) {
            if let Some(last) = ops.last_mut() {
                *last = 0;
            }
        }
        let mut out = self.out.lock().expect("recorder");
        let _ = out.write_all(&[label, count]);
        let _ = out.write_all(&ops);
        ops.clear();
    }

    fn mark_run(&self) -> Result<()> {
        self.marker(RUN)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.out.lock().map(|mut o| o.flush());
    }
}
