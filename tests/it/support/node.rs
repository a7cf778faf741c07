//! Node.js and the npm packages of `tests/js` (the Vercel AI SDK), for the real-client matrix
//! (`sdk_matrix.rs`). Node is used by tests only, never by the build.
//!
//! [`node_modules`] returns `tests/js/node_modules`, installing it on first use with
//! `npm ci --no-audit --no-fund` from the committed `tests/js/package-lock.json`. The install leaves
//! a stamp (a copy of the lock file it was made from) inside `node_modules`; a changed lock file
//! re-runs `npm ci`. `npm ci` deletes `node_modules` before installing, so a failed or interrupted
//! install has no stamp and is redone next time. A missing `node` or `npm`, or a failing `npm ci`,
//! is a test failure with a message saying what to install: these tests are never skipped
//! silently.
//!
//! Concurrency: one `OnceLock` installs at most once per process and makes the other threads wait
//! for it. Several test processes (e.g. two `cargo test` runs) take an exclusive file lock
//! (`target/tests-js-npm.lock`) around the check-and-install, so only one runs `npm ci` and the
//! others find a current stamp when they get the lock.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

/// Relative to the crate root.
const JS_DIR: &str = "tests/js";
/// Inside `node_modules`: the `package-lock.json` it was installed from.
const STAMP: &str = ".ccmesh-package-lock.stamp";

const HOW_TO_INSTALL: &str = "the SDK matrix tests need Node.js >= 20 and npm on PATH \
     (Debian 13: `apt-get install nodejs npm`; Debian 12's nodejs is 18, too old), and npm must reach \
     its registry to install tests/js/package-lock.json";

/// `tests/js/node_modules`, installed and current. Panics (failing the test) if it cannot be had.
#[allow(clippy::panic)]
pub fn node_modules() -> PathBuf {
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match MODULES.get_or_init(|| install_if_needed(&js_dir(), "tests-js-npm.lock")) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

/// `tests/clients/node_modules`: the real coding-agent CLIs (Claude Code, Codex CLI, Gemini CLI)
/// at the versions `tests/clients/package-lock.json` pins, installed the same way.
#[allow(clippy::panic)]
pub fn client_modules() -> PathBuf {
    static MODULES: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    match MODULES.get_or_init(|| install_if_needed(&dir, "tests-clients-npm.lock")) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

/// The `tests/js` directory (scripts and `package.json`).
pub fn js_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(JS_DIR)
}

fn install_if_needed(dir: &Path, lock_name: &str) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lock_path = dir.join("package-lock.json");
    let lock = std::fs::read_to_string(&lock_path).map_err(|e| format!("cannot read {}: {e}", lock_path.display()))?;
    let modules = dir.join("node_modules");
    check_node()?;
    if is_current(&modules, &lock) {
        return Ok(modules);
    }

    // Other test processes: one installs, the others wait here and then find the stamp.
    let target = root.join("target");
    std::fs::create_dir_all(&target).map_err(|e| format!("cannot create {}: {e}", target.display()))?;
    let lock_file_path = target.join(lock_name);
    let lock_file =
        File::create(&lock_file_path).map_err(|e| format!("cannot create {}: {e}", lock_file_path.display()))?;
    lock_file.lock().map_err(|e| format!("cannot lock {}: {e}", lock_file_path.display()))?;
    if is_current(&modules, &lock) {
        return Ok(modules);
    }

    let started = Instant::now();
    eprintln!("sdk matrix: npm ci in {} (first use or changed package-lock.json)", dir.display());
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"]).current_dir(dir).env("CI", "true");
    let out = npm.output().map_err(|e| format!("npm ci: cannot run npm ({e}); {HOW_TO_INSTALL}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm ci in {} failed ({}); {HOW_TO_INSTALL}\n--- stdout\n{}\n--- stderr\n{}",
            dir.display(),
            out.status,
            tail(&out.stdout),
            tail(&out.stderr)
        ));
    }
    std::fs::write(modules.join(STAMP), &lock).map_err(|e| format!("cannot write the node_modules stamp: {e}"))?;
    eprintln!("sdk matrix: {} ready after {:.1} s", modules.display(), started.elapsed().as_secs_f64());
    drop(lock_file); // releases the lock
    Ok(modules)
}

fn is_current(modules: &Path, lock: &str) -> bool {
    std::fs::read_to_string(modules.join(STAMP)).is_ok_and(|stamp| stamp == lock)
}

/// `node` must run and be version 20 or later (what `package.json`'s `engines` says).
fn check_node() -> Result<(), String> {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run node ({e}); {HOW_TO_INSTALL}"))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let major = version.trim_start_matches('v').split('.').next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if out.status.success() && m >= 20 => Ok(()),
        _ => Err(format!("node --version said {version:?} ({}); {HOW_TO_INSTALL}", out.status)),
    }
}

/// The last 4000 characters of a command's output.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.char_indices().rev().nth(4000).map_or(0, |(i, _)| i);
    text[start..].to_string()
}
