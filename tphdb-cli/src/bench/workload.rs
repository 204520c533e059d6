//! The workloads the side-by-side runner knows, and what each one does
//! before and during its measured phase.

use serde::{Deserialize, Serialize};

use super::ycsb;

/// A side-by-side workload: db_bench's, YCSB's core A–F, and Pogreb's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Fillseq,
    Fillrandom,
    Overwrite,
    Readrandom,
    Readmissing,
    Readhot,
    Readseq,
    Seekrandom,
    Readwhilewriting,
    Deleterandom,
    YcsbA,
    YcsbB,
    YcsbC,
    YcsbD,
    YcsbE,
    YcsbF,
    Pogreb,
}

/// How a workload names its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyStyle {
    /// db_bench's: a padded decimal index.
    Bench,
    /// YCSB's: `user` and a hash of the record number.
    Ycsb,
    /// Pogreb's: random bytes of a random length.
    Pogreb,
}

impl Workload {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Fillseq => "fillseq",
            Workload::Fillrandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::Readrandom => "readrandom",
            Workload::Readmissing => "readmissing",
            Workload::Readhot => "readhot",
            Workload::Readseq => "readseq",
            Workload::Seekrandom => "seekrandom",
            Workload::Readwhilewriting => "readwhilewriting",
            Workload::Deleterandom => "deleterandom",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::YcsbC => "ycsb-c",
            Workload::YcsbD => "ycsb-d",
            Workload::YcsbE => "ycsb-e",
            Workload::YcsbF => "ycsb-f",
            Workload::Pogreb => "pogreb",
        }
    }

    /// Whether the measured phase starts from a loaded store (fills start
    /// from an empty one).
    pub fn loads(self) -> bool {
        !matches!(self, Workload::Fillseq | Workload::Fillrandom)
    }

    /// The YCSB workload, for A–F.
    pub fn ycsb(self) -> Option<ycsb::Spec> {
        ycsb::spec(self.name())
    }

    pub fn key_style(self) -> KeyStyle {
        match self {
            _ if self.ycsb().is_some() => KeyStyle::Ycsb,
            Workload::Pogreb => KeyStyle::Pogreb,
            _ => KeyStyle::Bench,
        }
    }

    /// Operations of the measured phase, for `keys` loaded keys and `ops`
    /// asked for: fills and deletes touch every key once, `readseq` is one
    /// scan.
    pub fn measured_ops(self, keys: u64, ops: u64) -> u64 {
        match self {
            Workload::Fillseq
            | Workload::Fillrandom
            | Workload::Deleterandom
            | Workload::Pogreb => keys,
            Workload::Readseq => 1,
            _ => ops,
        }
    }

    /// Whether one more thread overwrites at full speed beside the
    /// measured readers.
    pub fn has_background_writer(self) -> bool {
        self == Workload::Readwhilewriting
    }

    /// Why Pogreb cannot run the workload, if it cannot: it has no ordered
    /// iteration, and its driver replays one recorded stream in one thread.
    pub fn pogreb_unsupported(self, threads: usize) -> Option<&'static str> {
        match self {
            Workload::YcsbE | Workload::Seekrandom | Workload::Readseq => Some("no ordered scans"),
            Workload::Readwhilewriting => Some("needs a concurrent writer"),
            _ if threads > 1 => Some("the driver replays one thread"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json() {
        for w in [
            Workload::Fillrandom,
            Workload::YcsbE,
            Workload::Readwhilewriting,
        ] {
            let json = serde_json::to_string(&w).unwrap();
            assert_eq!(json, format!("\"{}\"", w.name()));
            assert_eq!(serde_json::from_str::<Workload>(&json).unwrap(), w);
        }
        assert_eq!(Workload::YcsbA.key_style(), KeyStyle::Ycsb);
        assert!(!Workload::Fillseq.loads());
        assert_eq!(Workload::Readseq.measured_ops(10, 99), 1);
    }
}
