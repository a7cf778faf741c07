//! What the gateway knows about the machine it runs on: where clients reach it, the home whose
//! client settings it may edit, and whether a service manager started it.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::Environment;

/// What the gateway knows about the machine it runs on.
#[derive(Debug, Clone)]
pub struct LocalHost {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    /// The home and variables the gateway process runs with; `None` without a home directory.
    pub env: Option<Environment>,
    /// The gateway was started by a service manager (systemd, launchd).
    pub service_managed: bool,
}

impl LocalHost {
    /// The base URL clients on this machine reach the gateway at.
    pub fn url(&self) -> String {
        match self.listen {
            SocketAddr::V4(a) if a.ip().is_unspecified() => format!("http://127.0.0.1:{}", a.port()),
            SocketAddr::V6(a) if a.ip().is_unspecified() => format!("http://[::1]:{}", a.port()),
            other => format!("http://{other}"),
        }
    }

    /// Why the admin API may not edit client files here, if it may not.
    pub fn refusal(&self) -> Option<String> {
        if !self.listen.ip().is_loopback() {
            return Some(format!(
                "this gateway listens on {}, beyond this machine, so the API does not edit its user's client settings; \
                 run `ccmesh connect CLIENT` on the machine instead",
                self.listen
            ));
        }
        if self.env.is_none() {
            return Some("the gateway runs without a home directory, so it has no client settings to edit".into());
        }
        None
    }
}

/// Whether the process was started by systemd or launchd, from the variables each sets.
pub fn started_by_service_manager(var: impl Fn(&str) -> Option<String>) -> bool {
    var("INVOCATION_ID").is_some_and(|v| !v.is_empty())
        || var("XPC_SERVICE_NAME").is_some_and(|v| v == super::service::LAUNCHD_LABEL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(listen: &str) -> LocalHost {
        LocalHost {
            listen: listen.parse().unwrap(),
            data_dir: "/d".into(),
            env: Some(Environment::with_home("/h")),
            service_managed: false,
        }
    }

    #[test]
    fn only_a_loopback_gateway_edits_client_files() {
        assert_eq!(host("127.0.0.1:3999").refusal(), None);
        assert_eq!(host("[::1]:3999").refusal(), None);
        let why = host("0.0.0.0:3999").refusal().unwrap();
        assert!(why.contains("`ccmesh connect CLIENT`"), "{why}");
        assert!(host("192.0.2.7:3999").refusal().is_some());
        assert!(LocalHost { env: None, ..host("127.0.0.1:1") }.refusal().is_some());
    }

    #[test]
    fn urls_clients_can_reach() {
        assert_eq!(host("127.0.0.1:3999").url(), "http://127.0.0.1:3999");
        assert_eq!(host("[::1]:4000").url(), "http://[::1]:4000");
        assert_eq!(host("0.0.0.0:3999").url(), "http://127.0.0.1:3999");
    }

    #[test]
    fn service_managers_are_recognised_by_their_variables() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert!(started_by_service_manager(vars(&[("INVOCATION_ID", "abc")])));
        assert!(started_by_service_manager(vars(&[("XPC_SERVICE_NAME", "dev.ccmesh.gateway")])));
        assert!(!started_by_service_manager(vars(&[("XPC_SERVICE_NAME", "com.apple.Terminal")])));
        assert!(!started_by_service_manager(vars(&[])));
    }
}
