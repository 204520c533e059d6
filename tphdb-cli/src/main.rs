//! `tphdb`: benchmarks and tools for the tphdb storage engine.

fn main() {
    tphdb_cli::main()
}
