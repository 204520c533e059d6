//! The C API as a C program sees it: `tests/c/api_test.c` compiled against
//! `include/tphdb.h` and the shared library, run under valgrind (leaks and
//! memory errors fail it) when valgrind is installed; `TPHDB_REQUIRE_TOOLS`
//! makes a missing valgrind a failure instead of a plain run.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where cargo put the shared library it built with this test: beside the
/// test in `target/<profile>/deps` (a `cargo build` also copies it one level
/// up).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let found = [deps, deps.parent().unwrap()]
        .into_iter()
        .find(|d| d.join("libtphdb_c.so").exists())
        .unwrap_or(deps)
        .to_path_buf();
    found
}

#[test]
fn the_header_is_what_cbindgen_generates() {
    let generated = Path::new(env!("OUT_DIR")).join("tphdb.h");
    let committed = workspace().join("include/tphdb.h");
    assert!(
        std::fs::read(&generated).unwrap() == std::fs::read(&committed).unwrap(),
        "include/tphdb.h is stale: copy {} over it",
        generated.display()
    );
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn a_c_program_uses_the_api_without_leaks_or_memory_errors() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("api_test");
    let lib = library_dir();
    assert!(
        lib.join("libtphdb_c.so").exists(),
        "no libtphdb_c.so in {}",
        lib.display()
    );
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/api_test.c"))
        .arg(format!("-I{}", workspace().join("include").display()))
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-ltphdb_c")
        .status()
        .expect("a C compiler (cc)");
    assert!(status.success(), "compiling the C test failed");

    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let valgrind = have("valgrind");
    if !valgrind && std::env::var_os("TPHDB_REQUIRE_TOOLS").is_some() {
        panic!("valgrind is not installed (scripts/setup-peers.sh installs it)");
    }
    let mut run = if valgrind {
        let mut c = Command::new("valgrind");
        c.args([
            "--quiet",
            "--error-exitcode=99",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
        ])
        .arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let out = run.arg(&data).output().unwrap();
    assert!(
        out.status.success(),
        "the C test failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}
