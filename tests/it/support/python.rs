//! A Python interpreter that has the official `anthropic` and `openai` SDKs, for the real-client
//! tests (`sdk_clients.rs`).
//!
//! [`python`] returns `$CCMESH_TEST_PYTHON` when it is set (an interpreter that already has the
//! packages of `tests/sdk/requirements.txt`); otherwise `target/test-venv/bin/python`, creating
//! that venv on first use with `python3 -m venv` and `pip install -r tests/sdk/requirements.txt`.
//! The venv holds a stamp file with the requirements it was built from, so a changed pin rebuilds
//! it. A missing `python3`, venv module or a failing `pip` is a test failure with a message saying
//! what to install: these tests are never skipped silently.
//!
//! Concurrency: tests run on parallel threads, so one `OnceLock` builds the venv at most once per
//! process and the other callers wait for it. Several test processes (e.g. two `cargo test` runs)
//! may race: each builds in its own temporary directory beside the venv and renames it into place;
//! a loser finds a current venv there and uses it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Relative to the crate root.
const REQUIREMENTS: &str = "tests/sdk/requirements.txt";
/// Inside the venv: the requirements it was built from.
const STAMP: &str = "ccmesh-requirements.stamp";

const HOW_TO_INSTALL: &str = "the SDK tests need Python 3 with its venv module and pip \
     (Debian/Ubuntu: `apt-get install python3 python3-venv python3-pip`), or CCMESH_TEST_PYTHON set to \
     an interpreter that already has the packages of tests/sdk/requirements.txt";

/// The interpreter to run `tests/sdk/*.py` with. Panics (failing the test) if it cannot be had.
#[allow(clippy::panic)]
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(find_or_build) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn find_or_build() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("CCMESH_TEST_PYTHON").filter(|v| !v.is_empty()) {
        let given = PathBuf::from(given);
        check_packages(&given)?;
        return Ok(given);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let requirements_path = root.join(REQUIREMENTS);
    let requirements = std::fs::read_to_string(&requirements_path)
        .map_err(|e| format!("cannot read {}: {e}", requirements_path.display()))?;
    let venv = root.join("target").join("test-venv");
    if is_current(&venv, &requirements) {
        return Ok(interpreter(&venv));
    }
    build(&venv, &requirements_path, &requirements)
}

/// `bin/python` of a venv.
fn interpreter(venv: &Path) -> PathBuf {
    venv.join("bin").join("python")
}

fn is_current(venv: &Path, requirements: &str) -> bool {
    interpreter(venv).is_file() && std::fs::read_to_string(venv.join(STAMP)).is_ok_and(|stamp| stamp == requirements)
}

fn build(venv: &Path, requirements_path: &Path, requirements: &str) -> Result<PathBuf, String> {
    let parent = venv.parent().ok_or("the venv path has no parent")?;
    std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let tmp = parent.join(format!("test-venv.tmp-{}", unique_suffix()));
    let _cleanup = RemoveOnDrop(tmp.clone());
    let started = Instant::now();
    eprintln!("sdk tests: creating {} (python3 -m venv; pip install -r {REQUIREMENTS})", venv.display());

    let mut venv_cmd = Command::new("python3");
    venv_cmd.arg("-m").arg("venv").arg(&tmp);
    run(venv_cmd, "python3 -m venv", HOW_TO_INSTALL)?;
    let mut pip = Command::new(interpreter(&tmp));
    pip.args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-r"]).arg(requirements_path);
    let pip_hint = format!("{HOW_TO_INSTALL}; pip needs to reach PyPI (or a mirror set in pip's configuration)");
    run(pip, "pip install -r tests/sdk/requirements.txt", &pip_hint)?;
    std::fs::write(tmp.join(STAMP), requirements).map_err(|e| format!("cannot write the venv stamp: {e}"))?;

    // A venv invoked through its own `bin/python` does not depend on the directory's name, so it
    // can be built elsewhere and renamed into place (its entry-point scripts keep the temporary
    // path in their shebangs, and are not used).
    if venv.exists() && !is_current(venv, requirements) {
        // Stale (changed pins, or a half-made directory): move it aside, then delete it.
        let old = parent.join(format!("test-venv.old-{}", unique_suffix()));
        if std::fs::rename(venv, &old).is_ok() {
            let _ = std::fs::remove_dir_all(&old);
        }
    }
    match std::fs::rename(&tmp, venv) {
        Ok(()) => {}
        // Another process put its venv there first: use it if it is current.
        Err(_) if is_current(venv, requirements) => {}
        Err(e) => return Err(format!("cannot move {} to {}: {e}", tmp.display(), venv.display())),
    }
    eprintln!("sdk tests: {} ready after {:.1} s", venv.display(), started.elapsed().as_secs_f64());
    Ok(interpreter(venv))
}

/// Runs a setup command; on failure, says what failed, its output, and what to do (`hint`).
fn run(mut cmd: Command, what: &str, hint: &str) -> Result<Output, String> {
    let out = cmd.output().map_err(|e| format!("{what}: cannot run {:?} ({e}); {hint}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(out);
    }
    Err(format!(
        "{what} failed ({}); {hint}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    ))
}

/// `CCMESH_TEST_PYTHON` must import both SDKs.
fn check_packages(python: &Path) -> Result<(), String> {
    let mut cmd = Command::new(python);
    cmd.args(["-c", "import anthropic, openai, prometheus_client; print(anthropic.__version__, openai.__version__)"]);
    let hint = format!(
        "install the packages there (`{} -m pip install -r {REQUIREMENTS}`), or unset CCMESH_TEST_PYTHON to use \
         a venv in target/test-venv",
        python.display()
    );
    let out = run(cmd, &format!("CCMESH_TEST_PYTHON={} importing anthropic and openai", python.display()), &hint)?;
    eprintln!(
        "sdk tests: using CCMESH_TEST_PYTHON={} (anthropic, openai: {})",
        python.display(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(())
}

/// The last 4000 characters of a command's output.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.char_indices().rev().nth(4000).map_or(0, |(i, _)| i);
    text[start..].to_string()
}

fn unique_suffix() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// Deletes a temporary venv that was not renamed into place (a failed or lost build).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if self.0.exists() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
