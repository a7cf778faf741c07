//! Writing a client's settings file safely: the new bytes go to a temporary file in the same
//! directory, get the old file's permissions, are flushed to disk, and replace the old file with
//! one `rename` — a crash or a full disk leaves either the old file or the new one, never half of
//! each (cc-switch's whole-file rewrites lost settings exactly there). A settings path that is a
//! symbolic link (dotfile managers) is written through to the file it points at, so the link
//! stays a link.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The file's bytes, or `None` when it does not exist.
pub fn read_optional(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Where writing `path` actually lands: the target of a symbolic link, else `path`.
pub fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

/// Replace `path` with `bytes` atomically, keeping its permissions (a new file gets `new_mode`,
/// on Unix). Missing parent directories are created.
pub fn atomic_write(path: &Path, bytes: &[u8], new_mode: u32) -> std::io::Result<()> {
    let target = resolve(path);
    let dir = target.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "file".into());
    let tmp = dir.join(format!(".{name}.ccmesh-{}.tmp", std::process::id()));
    let existing = std::fs::metadata(&target).ok();
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all(bytes)?;
        match &existing {
            Some(m) => f.set_permissions(m.permissions())?,
            None => set_mode(&f, new_mode)?,
        }
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &target)?;
        // The rename itself is durable once the directory is flushed.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Remove `path` (a file `connect` created); absent is fine.
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(resolve(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(unix)]
fn set_mode(f: &std::fs::File, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn set_mode(_f: &std::fs::File, _mode: u32) -> std::io::Result<()> {
    Ok(())
}

/// A private directory (backups hold the keys the client files held).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_keeping_permissions_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("settings.json");
        std::fs::write(&p, b"old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        }
        atomic_write(&p, b"new", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
        }
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn new_files_get_the_given_mode_and_their_directory() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b/.env");
        atomic_write(&p, b"K=v\n", 0o600).unwrap();
        assert_eq!(read_optional(&p).unwrap().unwrap(), b"K=v\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
        }
        remove(&p).unwrap();
        remove(&p).unwrap();
        assert_eq!(read_optional(&p).unwrap(), None);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_settings_file_stays_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("dotfiles-settings.json");
        std::fs::write(&real, b"{}").unwrap();
        let link = dir.path().join("settings.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        atomic_write(&link, b"{\"a\": 1}", 0o600).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&real).unwrap(), b"{\"a\": 1}");
    }

    #[test]
    fn sha256_is_hex() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
