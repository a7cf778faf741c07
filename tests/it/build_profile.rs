//! `scripts/rustc-pgo`, the rustc wrapper of `.cargo/config.toml`: optimised compiles for x86-64
//! Linux get the profile `bench/pgo` writes, as an absolute path; every other compile runs rustc
//! unchanged. Run with `echo` in rustc's place, so the arguments it would get are its output.

use std::path::Path;
use std::process::Command;

fn wrapped(args: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/rustc-pgo")).arg("echo").args(args).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim_end().to_string()
}

#[test]
fn the_config_names_the_wrapper_and_the_profile_is_in_the_tree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
    assert!(config.contains("rustc-wrapper = \"scripts/rustc-pgo\""), "{config}");
    assert!(root.join("pgo/ccmesh.profdata").is_file());
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn optimised_compiles_for_this_host_get_the_profile_by_its_absolute_path() {
    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("pgo/ccmesh.profdata");
    let expected = format!("-Cprofile-use={}", profile.canonicalize().unwrap().display());
    for args in [
        &["--crate-name", "ccmesh", "-C", "opt-level=3"][..],
        &["--crate-name", "hyper", "-C", "opt-level=3", "--target", "x86_64-unknown-linux-gnu"][..],
    ] {
        let out = wrapped(args);
        assert_eq!(out, format!("{} {expected}", args.join(" ")));
    }
}

#[test]
fn every_other_compile_runs_rustc_unchanged() {
    for args in [
        &["--crate-name", "ccmesh", "-C", "debuginfo=2"][..],
        &["--crate-name", "ccmesh", "-C", "opt-level=3", "--target", "aarch64-apple-darwin"][..],
        &["--crate-name", "ccmesh", "-C", "opt-level=3", "-Cprofile-generate=/tmp/p"][..],
        &["-vV"][..],
    ] {
        assert_eq!(wrapped(args), args.join(" "));
    }
}
