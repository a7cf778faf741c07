//! The data directory: created private, locked by one gateway at a time.
//!
//! It holds every upstream key, so it is created `0700` and the database files `0600` whatever
//! the umask says. Two gateways on one directory would route on stale endpoint lists, lose each
//! other's settings and drop each other's records, so `serve` takes an advisory lock on
//! `ccmesh.lock` (released by the kernel when the process ends, however it ends) and refuses to
//! start when another process holds it, naming that process.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

#[cfg(unix)]
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

pub const LOCK_FILE: &str = "ccmesh.lock";

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot create the data dir {path}: {source}")]
    Create { path: String, source: std::io::Error },
    #[error(
        "another ccmesh (pid {pid}) is already serving the data dir {path}; stop it first, or give this one its own directory with --data-dir"
    )]
    Locked { path: String, pid: String },
    #[error("cannot lock {path}: {source}")]
    Lock { path: String, source: std::io::Error },
}

/// The data directory, locked for as long as this value lives.
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Create (private) and lock the directory.
    pub fn open(path: &Path) -> Result<DataDir, DataDirError> {
        let shown = path.display().to_string();
        std::fs::create_dir_all(path).map_err(|source| DataDirError::Create { path: shown.clone(), source })?;
        // Existing directories are tightened too: the keys inside are the user's.
        set_mode(path, 0o700);
        let lock_path = path.join(LOCK_FILE);
        let mut lock = match open_private(&lock_path, true) {
            Ok(file) => file,
            // A read-only directory: lock the file a writable run left, if any (a shared lock
            // file opened for reading locks just the same).
            Err(source) => match File::open(&lock_path) {
                Ok(file) => file,
                Err(_) if read_only(&source) => {
                    tracing::warn!(event = "data_dir_unlocked", path = %shown, "the data dir is read-only and has no lock file; another gateway could share it");
                    File::open("/dev/null").map_err(|source| DataDirError::Lock { path: shown.clone(), source })?
                }
                Err(_) => return Err(DataDirError::Lock { path: shown, source }),
            },
        };
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = lock.read_to_string(&mut pid);
                let pid = pid.trim();
                let pid = if pid.is_empty() { "unknown".to_string() } else { pid.to_string() };
                return Err(DataDirError::Locked { path: shown, pid });
            }
            Err(std::fs::TryLockError::Error(source)) => return Err(DataDirError::Lock { path: shown, source }),
        }
        // Say who holds it, for the next one that tries.
        let _ = lock.set_len(0).and_then(|()| lock.rewind()).and_then(|()| write!(lock, "{}", std::process::id()));
        let _ = lock.flush();
        Ok(DataDir { path: path.to_path_buf(), _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Create the database file private before SQLite opens it (SQLite gives its `-wal` and
    /// `-shm` files the database file's permissions), and tighten the files if they exist.
    pub fn prepare_database(&self, db: &Path) {
        let _ = open_private(db, false);
        for suffix in ["", "-wal", "-shm"] {
            let mut name = db.as_os_str().to_owned();
            name.push(suffix);
            set_mode(Path::new(&name), 0o600);
        }
    }

    /// Whether the gateway can write here: the directory (SQLite creates files beside the
    /// database) and the database file. A read-only data dir still serves, but loses records
    /// and changes.
    pub fn writable(&self, db: &Path) -> Result<(), std::io::Error> {
        let probe = self.path.join(".ccmesh-write-check");
        let result = File::create(&probe).and_then(|mut f| f.write_all(b"ok"));
        let _ = std::fs::remove_file(&probe);
        result?;
        if db.exists() {
            OpenOptions::new().write(true).open(db)?;
        }
        Ok(())
    }
}

fn read_only(e: &std::io::Error) -> bool {
    // EROFS (a read-only file system) and EACCES / EPERM (no write permission).
    matches!(e.kind(), std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem)
        || e.raw_os_error() == Some(30)
}

fn open_private(path: &Path, read: bool) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(false).write(true).read(read).truncate(false);
    #[cfg(unix)]
    options.mode(0o600);
    options.open(path)
}

fn set_mode(path: &Path, mode: u32) {
    #[cfg(unix)]
    if path.exists() {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_open_of_a_locked_dir_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDir::open(dir.path()).unwrap();
        let err = DataDir::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(err.contains("--data-dir"), "{err}");
        drop(first);
        DataDir::open(dir.path()).expect("free again once the holder is gone");
    }

    #[cfg(unix)]
    #[test]
    fn the_dir_and_the_database_are_private_whatever_the_umask() {
        let parent = tempfile::tempdir().unwrap();
        let path = parent.path().join("data");
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = DataDir::open(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o700);
        let db = path.join("ccmesh.db");
        std::fs::write(&db, b"").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        dir.prepare_database(&db);
        assert_eq!(mode(&db), 0o600);
        assert_eq!(mode(&path.join(LOCK_FILE)), 0o600);
    }
}
