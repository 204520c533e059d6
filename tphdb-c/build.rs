//! Generates the C header from the `extern "C"` functions into OUT_DIR; a
//! test checks that `include/tphdb.h` is that header.

fn main() {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config =
        cbindgen::Config::from_file(format!("{crate_dir}/cbindgen.toml")).expect("cbindgen.toml");
    cbindgen::generate_with_config(&crate_dir, config)
        .expect("generate the C header")
        .write_to_file(out.join("tphdb.h"));
}
