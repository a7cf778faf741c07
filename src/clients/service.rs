//! `ccmesh service install`: start the gateway at login, so a connected client never meets a dead
//! port (a client config pointing at a gateway that is not running is the failure cc-switch users
//! hit most). A systemd user unit on Linux, a launchd agent on macOS. The files are generated
//! here; the commands that load them are printed, never run.

use std::path::{Path, PathBuf};

pub const SYSTEMD_UNIT: &str = "ccmesh.service";
pub const LAUNCHD_LABEL: &str = "dev.ccmesh.gateway";

/// What the service runs.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Absolute path of the `ccmesh` binary.
    pub binary: PathBuf,
    pub listen: String,
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    pub fn for_this_os() -> Manager {
        if cfg!(target_os = "macos") { Manager::Launchd } else { Manager::Systemd }
    }

    /// Where the file goes for the user whose home is `home`.
    pub fn path(self, home: &Path) -> PathBuf {
        match self {
            Manager::Systemd => home.join(".config/systemd/user").join(SYSTEMD_UNIT),
            Manager::Launchd => home.join("Library/LaunchAgents").join(format!("{LAUNCHD_LABEL}.plist")),
        }
    }

    pub fn render(self, spec: &ServiceSpec) -> String {
        match self {
            Manager::Systemd => systemd_unit(spec),
            Manager::Launchd => launchd_plist(spec),
        }
    }

    /// The commands that load and start it.
    pub fn activate_hint(self, path: &Path) -> String {
        match self {
            Manager::Systemd => "systemctl --user daemon-reload && systemctl --user enable --now ccmesh \
                 (and `loginctl enable-linger $USER` to keep it running while you are logged out)"
                .to_string(),
            Manager::Launchd => format!("launchctl bootstrap gui/$(id -u) {}", path.display()),
        }
    }
}

/// systemd quotes arguments with double quotes and `\`-escapes; `%` is a specifier.
fn systemd_quote(arg: &str) -> String {
    let escaped = arg.replace('\\', "\\\\").replace('"', "\\\"").replace('%', "%%");
    if escaped.chars().any(|c| c.is_whitespace() || c == '"') { format!("\"{escaped}\"") } else { escaped }
}

/// What the service manager runs: the same for every manager, quoted the manager's way.
fn command_line(spec: &ServiceSpec) -> [String; 6] {
    [
        spec.binary.display().to_string(),
        "serve".into(),
        "--listen".into(),
        spec.listen.clone(),
        "--data-dir".into(),
        spec.data_dir.display().to_string(),
    ]
}

pub fn systemd_unit(spec: &ServiceSpec) -> String {
    let exec = command_line(spec).iter().map(|a| systemd_quote(a)).collect::<Vec<_>>().join(" ");
    format!(
        "# Written by `ccmesh service install`. Remove with `systemctl --user disable --now ccmesh`\n\
         # and by deleting this file.\n\
         [Unit]\n\
         Description=ccmesh LLM API gateway\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         # SIGTERM drains in-flight requests (up to the shutdown grace).\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec=40\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n"
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

pub fn launchd_plist(spec: &ServiceSpec) -> String {
    let args =
        command_line(spec).iter().map(|a| format!("    <string>{}</string>\n", xml_escape(a))).collect::<String>();
    let log = xml_escape(&spec.data_dir.join("ccmesh.log").display().to_string());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `ccmesh service install`. Remove with `launchctl bootout gui/$(id -u)/{LAUNCHD_LABEL}` and by deleting this file. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \x20 <key>Label</key>\n\
         \x20 <string>{LAUNCHD_LABEL}</string>\n\
         \x20 <key>ProgramArguments</key>\n\
         \x20 <array>\n{args}\x20 </array>\n\
         \x20 <key>RunAtLoad</key>\n\
         \x20 <true/>\n\
         \x20 <key>KeepAlive</key>\n\
         \x20 <dict>\n\
         \x20   <key>SuccessfulExit</key>\n\
         \x20   <false/>\n\
         \x20 </dict>\n\
         \x20 <key>StandardErrorPath</key>\n\
         \x20 <string>{log}</string>\n\
         </dict>\n\
         </plist>\n"
    )
}

/// Whether a service file for the gateway is installed for this user.
pub fn installed(home: &Path) -> Option<PathBuf> {
    [Manager::Systemd, Manager::Launchd].iter().map(|m| m.path(home)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            binary: "/opt/cc mesh/bin/ccmesh".into(),
            listen: "127.0.0.1:3999".into(),
            data_dir: "/home/u/.local/share/ccmesh".into(),
        }
    }

    #[test]
    fn the_unit_quotes_paths_with_spaces_and_escapes_specifiers() {
        let unit = systemd_unit(&ServiceSpec { data_dir: "/data/100%".into(), ..spec() });
        assert!(
            unit.contains(
                "ExecStart=\"/opt/cc mesh/bin/ccmesh\" serve --listen 127.0.0.1:3999 --data-dir /data/100%%\n"
            ),
            "{unit}"
        );
        assert!(unit.contains("[Install]\nWantedBy=default.target\n"));
    }

    #[test]
    fn the_plist_escapes_xml() {
        let plist = launchd_plist(&ServiceSpec { data_dir: "/d/<&>".into(), ..spec() });
        assert!(plist.contains("<string>/d/&lt;&amp;&gt;</string>"), "{plist}");
        assert!(plist.contains(&format!("<string>{LAUNCHD_LABEL}</string>")));
    }

    #[test]
    fn paths_per_manager() {
        let home = Path::new("/home/u");
        assert_eq!(Manager::Systemd.path(home), Path::new("/home/u/.config/systemd/user/ccmesh.service"));
        assert_eq!(Manager::Launchd.path(home), Path::new("/home/u/Library/LaunchAgents/dev.ccmesh.gateway.plist"));
        assert_eq!(installed(home), None);
    }
}
