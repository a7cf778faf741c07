//! `ccmesh migrate --from sqlite:PATH --to postgres://…`: move an installation from its SQLite
//! data dir into PostgreSQL (`store::migrate` says what is copied and when it is refused).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;

use crate::store::Store;

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// The installation to move: `sqlite:PATH`, PATH being its data dir or its ccmesh.db.
    #[arg(long)]
    pub from: String,
    /// The PostgreSQL database to move it into (empty): `postgres://user:password@host:port/db`.
    #[arg(long, env = "CCMESH_DATABASE_URL", hide_env_values = true)]
    pub to: String,
}

pub fn run(args: MigrateArgs) -> ExitCode {
    match migrate(&args) {
        Ok(summary) => {
            use std::io::Write;
            let _ = writeln!(std::io::stdout().lock(), "{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ccmesh: {}", crate::store::postgres::address::redact(&super::error_text(&e)));
            ExitCode::FAILURE
        }
    }
}

/// The SQLite file `--from` names.
fn sqlite_file(from: &str) -> anyhow::Result<PathBuf> {
    let Some(path) = from.strip_prefix("sqlite://").or_else(|| from.strip_prefix("sqlite:")) else {
        bail!("--from {from}: give the installation as sqlite:PATH (its data dir or its ccmesh.db)");
    };
    let path = PathBuf::from(path);
    let file = if path.is_dir() { path.join("ccmesh.db") } else { path };
    if !file.is_file() {
        bail!("--from: there is no SQLite database at {}", file.display());
    }
    Ok(file)
}

fn migrate(args: &MigrateArgs) -> anyhow::Result<String> {
    let file = sqlite_file(&args.from)?;
    // The data dir's lock: a gateway still serving it would write records the copy misses.
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    let _locked = crate::store::data_dir::DataDir::open(dir)?;
    let from = Store::open(&file).with_context(|| format!("cannot open {}", file.display()))?;
    let shown = crate::store::postgres::address::redact(&args.to);
    let to = Store::open_postgres(&args.to).with_context(|| format!("cannot open the database {shown}"))?;
    let moved = crate::store::migrate::sqlite_to_postgres(&from, &to)?;
    Ok(format!("moved {} from {} into {}", moved, file.display(), to.describe()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_names_a_data_dir_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ccmesh.db"), b"").unwrap();
        let shown = dir.path().display();
        assert_eq!(sqlite_file(&format!("sqlite:{shown}")).unwrap(), dir.path().join("ccmesh.db"));
        assert_eq!(sqlite_file(&format!("sqlite:{shown}/ccmesh.db")).unwrap(), dir.path().join("ccmesh.db"));
        assert!(sqlite_file(&format!("{shown}")).unwrap_err().to_string().contains("sqlite:PATH"));
        assert!(sqlite_file("sqlite:/no/such/dir").is_err());
    }
}
