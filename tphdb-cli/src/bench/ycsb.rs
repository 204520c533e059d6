//! YCSB core workloads A–F, to the YCSB specification: request
//! distributions (zipfian with constant 0.99 scrambled over the key space,
//! latest), record keys `user` + FNV-1a hash of the record number,
//! E's scan lengths uniform in 1..=100, F's read-modify-write and D's and
//! E's inserts of new records.

/// Operation kinds, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
    /// Not in YCSB's core workloads; db_bench's deleterandom.
    Delete,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Insert => "insert",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "rmw",
            OpKind::Delete => "delete",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Zipfian,
    Latest,
}

/// One core workload: the operation mix and the request distribution.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// `(kind, proportion)`, proportions summing to 1.
    pub mix: &'static [(OpKind, f64)],
    pub distribution: Distribution,
}

pub fn spec(name: &str) -> Option<Spec> {
    use OpKind::*;
    let (mix, distribution): (&'static [(OpKind, f64)], _) = match name {
        "ycsb-a" => (&[(Read, 0.5), (Update, 0.5)], Distribution::Zipfian),
        "ycsb-b" => (&[(Read, 0.95), (Update, 0.05)], Distribution::Zipfian),
        "ycsb-c" => (&[(Read, 1.0)], Distribution::Zipfian),
        "ycsb-d" => (&[(Read, 0.95), (Insert, 0.05)], Distribution::Latest),
        "ycsb-e" => (&[(Scan, 0.95), (Insert, 0.05)], Distribution::Zipfian),
        "ycsb-f" => (
            &[(Read, 0.5), (ReadModifyWrite, 0.5)],
            Distribution::Zipfian,
        ),
        _ => return None,
    };
    Some(Spec { mix, distribution })
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// YCSB's `fnvhash64`: FNV-1a over the 8 bytes of `v`, low byte first,
/// then the absolute value as a signed 64-bit number.
pub fn fnv64(mut v: u64) -> u64 {
    let mut h = FNV_OFFSET;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(FNV_PRIME);
        v >>= 8;
    }
    (h as i64).unsigned_abs()
}

/// The key of record `n` (YCSB's hashed insert order), padded or cut to
/// `size` bytes.
pub fn record_key(n: u64, size: usize) -> Vec<u8> {
    let mut k = format!("user{:019}", fnv64(n)).into_bytes();
    k.resize(size.max(8), b'0');
    k
}

/// YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record
/// synthetic databases"): values in `[0, n)`, item 0 the most popular.
#[derive(Clone, Debug)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    zeta_n: f64,
    alpha: f64,
    eta: f64,
    zeta_2: f64,
}

pub const ZIPFIAN_CONSTANT: f64 = 0.99;

fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    (from..to).fold(initial, |s, i| s + 1.0 / ((i + 1) as f64).powf(theta))
}

impl Zipfian {
    pub fn new(items: u64) -> Zipfian {
        Zipfian::with_zeta(items, zeta(0, items, ZIPFIAN_CONSTANT, 0.0))
    }

    /// A generator over `items` whose zeta(items) is already known.
    fn with_zeta(items: u64, zeta_n: f64) -> Zipfian {
        let theta = ZIPFIAN_CONSTANT;
        let mut z = Zipfian {
            items,
            theta,
            zeta_n,
            alpha: 1.0 / (1.0 - theta),
            eta: 0.0,
            zeta_2: zeta(0, 2, theta, 0.0),
        };
        z.eta = z.eta_for(items);
        z
    }

    fn eta_for(&self, n: u64) -> f64 {
        (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta_2 / self.zeta_n)
    }

    /// Grows the item count (incrementally, as YCSB does for `latest`).
    pub fn grow_to(&mut self, items: u64) {
        if items > self.items {
            self.zeta_n = zeta(self.items, items, self.theta, self.zeta_n);
            self.items = items;
            self.eta = self.eta_for(items);
        }
    }

    pub fn next(&self, rng: &mut fastrand::Rng) -> u64 {
        let u = rng.f64();
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let v = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        v.min(self.items - 1)
    }
}

/// YCSB's ScrambledZipfianGenerator: zipfian popularity spread over the
/// key space by hashing (item count fixed at 10^10, zeta precomputed by
/// YCSB for that count with the 0.99 constant).
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    items: u64,
    zipf: Zipfian,
}

const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
/// YCSB's `ZETAN` for 10^10 items and constant 0.99.
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

impl ScrambledZipfian {
    pub fn new(items: u64) -> ScrambledZipfian {
        ScrambledZipfian {
            items,
            zipf: Zipfian::with_zeta(SCRAMBLED_ITEMS, SCRAMBLED_ZETAN),
        }
    }

    pub fn next(&self, rng: &mut fastrand::Rng) -> u64 {
        fnv64(self.zipf.next(rng)) % self.items
    }
}

/// Draws operations of a workload: kind, record number, scan length.
pub struct OpStream {
    spec: Spec,
    rng: fastrand::Rng,
    /// Records that exist (loaded plus inserted so far).
    pub records: u64,
    scrambled: ScrambledZipfian,
    latest: Zipfian,
}

#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub kind: OpKind,
    pub record: u64,
    pub scan_len: usize,
}

impl OpStream {
    pub fn new(spec: Spec, records: u64, seed: u64) -> OpStream {
        OpStream {
            spec,
            rng: fastrand::Rng::with_seed(seed),
            records,
            scrambled: ScrambledZipfian::new(records),
            latest: Zipfian::new(records),
        }
    }

    fn chosen_record(&mut self) -> u64 {
        match self.spec.distribution {
            Distribution::Zipfian => self.scrambled.next(&mut self.rng),
            Distribution::Latest => {
                self.latest.grow_to(self.records);
                let back = self.latest.next(&mut self.rng);
                self.records - 1 - back.min(self.records - 1)
            }
        }
    }

    pub fn next_op(&mut self) -> Op {
        let mut u = self.rng.f64();
        let mut kind = self.spec.mix[self.spec.mix.len() - 1].0;
        for &(k, p) in self.spec.mix {
            if u < p {
                kind = k;
                break;
            }
            u -= p;
        }
        match kind {
            OpKind::Insert => {
                let record = self.records;
                self.records += 1;
                Op {
                    kind,
                    record,
                    scan_len: 0,
                }
            }
            OpKind::Scan => Op {
                kind,
                record: self.chosen_record(),
                scan_len: self.rng.usize(1..=100),
            },
            _ => Op {
                kind,
                record: self.chosen_record(),
                scan_len: 0,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_ycsb() {
        // Values of YCSB's Utils.fnvhash64.
        assert_eq!(fnv64(0), 0x5738_07cd_d7e5_c63b);
        assert_eq!(fnv64(1), 0x7632_ced6_e2d5_105c);
        assert_eq!(fnv64(12345), 0x18e1_4e7a_1d12_33b4);
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let z = Zipfian::new(1000);
        let mut rng = fastrand::Rng::with_seed(1);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        // Item 0 of a 0.99 zipfian over 1000 items draws about 13%.
        assert!((10_000..16_000).contains(&counts[0]), "{}", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
    }

    #[test]
    fn scrambled_zipfian_spreads_the_hot_keys() {
        let z = ScrambledZipfian::new(10_000);
        let mut rng = fastrand::Rng::with_seed(2);
        let mut counts = vec![0u32; 10_000];
        for _ in 0..200_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        let hottest = (0..10_000).max_by_key(|&i| counts[i]).unwrap();
        assert_ne!(hottest, 0, "scrambled: the hottest record is not record 0");
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top1pct: u32 = sorted[..100].iter().sum();
        assert!(
            top1pct > 200_000 / 5,
            "the top 1% draws a large share: {top1pct}"
        );
    }

    #[test]
    fn mixes_follow_the_spec_and_inserts_extend_the_key_space() {
        let mut s = OpStream::new(spec("ycsb-d").unwrap(), 1000, 3);
        let mut inserts = 0;
        let mut recent = 0;
        for _ in 0..20_000 {
            let op = s.next_op();
            match op.kind {
                OpKind::Insert => {
                    inserts += 1;
                    assert_eq!(op.record, s.records - 1);
                }
                OpKind::Read => {
                    assert!(op.record < s.records);
                    recent += u32::from(op.record + 100 >= s.records);
                }
                k => panic!("{k:?} in ycsb-d"),
            }
        }
        assert!((800..1200).contains(&inserts), "{inserts}");
        // A 0.99 zipfian over 1000-2000 records puts about 2/3 of the
        // draws on the newest 100.
        assert!(
            recent > 19_000 * 6 / 10,
            "latest favours recent records: {recent}"
        );
        let mut e = OpStream::new(spec("ycsb-e").unwrap(), 1000, 4);
        for _ in 0..1000 {
            let op = e.next_op();
            if op.kind == OpKind::Scan {
                assert!((1..=100).contains(&op.scan_len));
            }
        }
    }
}
