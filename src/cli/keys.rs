//! `ccmesh key add|list|show|edit|rm|rotate|usage`: client keys through the admin API
//! (`/api/keys`), and `usage` for a key holder through `GET /api/me` with the client key itself.

use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::api::{Client, Common};
use super::output::{cell, path, pretty, table};

/// The fields `key add` and `key edit` share; on edit only the flags given change.
#[derive(Args, Debug, Default)]
pub struct KeyFields {
    /// What the key is for (who holds it).
    #[arg(long)]
    pub description: Option<String>,
    /// When the key stops working: an RFC 3339 time (2026-12-31T23:59:59Z), a date, or `never`.
    #[arg(long)]
    pub expires_at: Option<String>,
    /// A model the key may use (repeatable; `*` globs). Replaces the list on edit.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// Let the key use every model again (edit).
    #[arg(long, conflicts_with = "models")]
    pub all_models: bool,
    /// An endpoint the key may use (repeatable). Replaces the list on edit.
    #[arg(long = "endpoint")]
    pub endpoints: Vec<String>,
    /// Let the key use every endpoint again (edit).
    #[arg(long, conflicts_with = "endpoints")]
    pub all_endpoints: bool,
    /// Requests per minute (a sliding 60 s window), or `none`.
    #[arg(long)]
    pub rpm: Option<String>,
    /// Input + output tokens per minute, or `none`.
    #[arg(long)]
    pub tpm: Option<String>,
    /// Requests in flight at once, or `none`.
    #[arg(long)]
    pub concurrency: Option<String>,
    /// US dollars per UTC day, or `none`.
    #[arg(long)]
    pub usd_per_day: Option<String>,
    /// US dollars per rolling 5 hours, or `none`.
    #[arg(long = "usd-per-5h")]
    pub usd_per_5h: Option<String>,
    /// US dollars per UTC month, or `none`.
    #[arg(long)]
    pub usd_per_month: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Make a client key; its secret is printed once.
    Add {
        name: String,
        #[command(flatten)]
        fields: KeyFields,
        /// Make it disabled.
        #[arg(long)]
        disabled: bool,
        #[command(flatten)]
        common: Common,
    },
    /// List the client keys with their spend.
    List(Common),
    /// Show one key: its fields, limits, spend and what remains.
    Show {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Change a key (only the flags given).
    Edit {
        name: String,
        #[command(flatten)]
        fields: KeyFields,
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        #[arg(long)]
        disable: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Delete a key (its records stay).
    Rm {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// Give a key a new secret (printed once); the old one stops working at once.
    Rotate {
        name: String,
        #[command(flatten)]
        common: Common,
    },
    /// What a key may still use: limits, spend and what remains. With a client key (--key or
    /// CCMESH_CLIENT_KEY) it asks as that key's holder; with a NAME, as the admin.
    Usage {
        /// A key's name (admin view).
        name: Option<String>,
        /// The client key itself (the holder's view, through GET /api/me).
        #[arg(long, env = "CCMESH_CLIENT_KEY", hide_env_values = true)]
        key: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

/// A limit flag: a number, or `none`/`off` for no limit.
fn limit_value(flag: &str, raw: &str) -> anyhow::Result<Value> {
    let raw = raw.trim();
    if matches!(raw, "none" | "off" | "null" | "") {
        return Ok(Value::Null);
    }
    match raw.parse::<f64>() {
        Ok(n) if n.fract() == 0.0 && n >= 0.0 => Ok(json!(n as u64)),
        Ok(n) => Ok(json!(n)),
        Err(_) => bail!("--{flag} expects a number or `none`, got '{raw}'"),
    }
}

fn fields_json(f: &KeyFields) -> anyhow::Result<Map<String, Value>> {
    let mut obj = Map::new();
    if let Some(d) = &f.description {
        obj.insert("description".into(), json!(d));
    }
    if let Some(e) = &f.expires_at {
        obj.insert("expires_at".into(), if e == "never" { Value::Null } else { json!(e) });
    }
    if !f.models.is_empty() || f.all_models {
        obj.insert("models".into(), json!(f.models));
    }
    if !f.endpoints.is_empty() || f.all_endpoints {
        obj.insert("endpoints".into(), json!(f.endpoints));
    }
    let mut limits = Map::new();
    for (flag, name, v) in [
        ("rpm", "rpm", &f.rpm),
        ("tpm", "tpm", &f.tpm),
        ("concurrency", "concurrency", &f.concurrency),
        ("usd-per-day", "usd_per_day", &f.usd_per_day),
        ("usd-per-5h", "usd_per_5h", &f.usd_per_5h),
        ("usd-per-month", "usd_per_month", &f.usd_per_month),
    ] {
        if let Some(raw) = v {
            limits.insert(name.into(), limit_value(flag, raw)?);
        }
    }
    if !limits.is_empty() {
        obj.insert("limits".into(), Value::Object(limits));
    }
    Ok(obj)
}

pub async fn run(cmd: KeyCommand) -> anyhow::Result<String> {
    use reqwest::Method;
    match cmd {
        KeyCommand::Add { name, fields, disabled, common } => {
            let mut obj = fields_json(&fields)?;
            obj.insert("name".into(), json!(name));
            if disabled {
                obj.insert("enabled".into(), json!(false));
            }
            let v = Client::new(&common)?.call(Method::POST, "/api/keys", Some(Value::Object(obj))).await?;
            Ok(if common.json {
                pretty(&v)
            } else {
                format!(
                    "added client key '{name}'\nsecret: {}\n  shown this once: give it to the key's holder now (as ANTHROPIC_AUTH_TOKEN, OPENAI_API_KEY, x-api-key …); `ccmesh key rotate {name}` makes a new one\n{}",
                    v["secret"].as_str().unwrap_or("?"),
                    key_detail(&v)
                )
            })
        }
        KeyCommand::List(common) => {
            let v = Client::new(&common)?.call(Method::GET, "/api/keys", None).await?;
            Ok(if common.json { pretty(&v) } else { key_table(&v) })
        }
        KeyCommand::Show { name, common } => {
            let v = Client::new(&common)?.call(Method::GET, &format!("/api/keys/{}", path(&name)), None).await?;
            Ok(if common.json { pretty(&v) } else { key_detail(&v) })
        }
        KeyCommand::Edit { name, fields, enable, disable, common } => {
            let mut obj = fields_json(&fields)?;
            if enable || disable {
                obj.insert("enabled".into(), json!(enable));
            }
            if obj.is_empty() {
                bail!("nothing to change: give at least one flag (see `ccmesh key edit --help`)");
            }
            let v = Client::new(&common)?
                .call(Method::PATCH, &format!("/api/keys/{}", path(&name)), Some(Value::Object(obj)))
                .await?;
            Ok(if common.json { pretty(&v) } else { format!("updated client key '{name}'\n{}", key_detail(&v)) })
        }
        KeyCommand::Rm { name, common } => {
            Client::new(&common)?.call(Method::DELETE, &format!("/api/keys/{}", path(&name)), None).await?;
            Ok(if common.json { json!({"deleted": name}).to_string() } else { format!("deleted client key '{name}'") })
        }
        KeyCommand::Rotate { name, common } => {
            let v =
                Client::new(&common)?.call(Method::POST, &format!("/api/keys/{}/rotate", path(&name)), None).await?;
            Ok(if common.json {
                pretty(&v)
            } else {
                format!(
                    "new secret for client key '{name}' (the old one no longer works):\nsecret: {}\n  shown this once",
                    v["secret"].as_str().unwrap_or("?")
                )
            })
        }
        KeyCommand::Usage { name, key, common } => {
            let v = match (key.filter(|k| !k.is_empty()), name) {
                (Some(key), _) => {
                    // The holder's view: the client key is the credential, not the admin token.
                    let mut client = Client::new(&common)?;
                    client.token = Some(key);
                    client.call(Method::GET, "/api/me", None).await?
                }
                (None, Some(name)) => {
                    Client::new(&common)?.call(Method::GET, &format!("/api/keys/{}", path(&name)), None).await?
                }
                (None, None) => bail!(
                    "give the client key (--key ccm-… or CCMESH_CLIENT_KEY) to see its usage, or a key's NAME with the admin token"
                ),
            };
            Ok(if common.json { pretty(&v) } else { key_detail(&v) })
        }
    }
}

fn money(v: &Value) -> String {
    v.as_f64().map(|n| format!("${n:.4}")).unwrap_or_else(|| "-".into())
}

/// `used / limit` of one window, for the list.
fn window(v: &Value, name: &str, dollars: bool) -> String {
    let w = &v["usage"][name];
    let used = if dollars { money(&w["used"]) } else { cell(&w["used"]) };
    if w["limit"].is_null() {
        used
    } else {
        format!("{used}/{}", if dollars { money(&w["limit"]) } else { cell(&w["limit"]) })
    }
}

fn key_table(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|k| {
            let state = match (k["enabled"].as_bool(), k["expired"].as_bool()) {
                (Some(false), _) => "disabled",
                (_, Some(true)) => "expired",
                _ => "enabled",
            };
            vec![
                cell(&k["name"]),
                cell(&k["prefix"]),
                state.into(),
                cell(&k["models"]),
                cell(&k["endpoints"]),
                window(k, "rpm", false),
                window(k, "usd_per_day", true),
                window(k, "usd_per_month", true),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no client keys: the proxy is open to whoever can reach it (loopback by default); make one with `ccmesh key add NAME`".into();
    }
    table(&["NAME", "SECRET", "STATE", "MODELS", "ENDPOINTS", "RPM", "TODAY", "MONTH"], &rows)
}

fn key_detail(k: &Value) -> String {
    let fields =
        ["name", "description", "enabled", "expires_at", "models", "endpoints", "prefix", "declared", "created_at"];
    let rows: Vec<Vec<String>> = fields
        .iter()
        .map(|f| {
            let label = if *f == "prefix" { "secret:".to_string() } else { format!("{f}:") };
            let value = match (*f, &k[*f]) {
                ("models" | "endpoints", Value::Array(a)) if a.is_empty() => "every one".into(),
                (_, v) => cell(v),
            };
            vec![label, value]
        })
        .collect();
    let fields = table(&["", ""], &rows).trim_start().to_string();
    let windows: Vec<Vec<String>> = [
        ("rpm", "requests in the last 60 s", false),
        ("tpm", "tokens in the last 60 s", false),
        ("concurrency", "requests in flight", false),
        ("usd_per_day", "spent this UTC day", true),
        ("usd_per_5h", "spent in the last 5 h", true),
        ("usd_per_month", "spent this UTC month", true),
    ]
    .iter()
    .map(|(name, what, dollars)| {
        let w = &k["usage"][*name];
        let show = |v: &Value| if *dollars { money(v) } else { cell(v) };
        vec![
            name.to_string(),
            what.to_string(),
            show(&w["used"]),
            if w["limit"].is_null() { "none".into() } else { show(&w["limit"]) },
            if w["remaining"].is_null() { "-".into() } else { show(&w["remaining"]) },
            cell(&w["resets_at"]),
        ]
    })
    .collect();
    format!("{fields}\n\n{}", table(&["LIMIT", "", "USED", "LIMIT", "REMAINING", "RESETS"], &windows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_flags_take_numbers_or_none() {
        assert_eq!(limit_value("rpm", "60").unwrap(), json!(60));
        assert_eq!(limit_value("usd-per-day", "2.5").unwrap(), json!(2.5));
        assert_eq!(limit_value("rpm", "none").unwrap(), Value::Null);
        assert!(limit_value("rpm", "lots").unwrap_err().to_string().contains("--rpm expects a number"));
        let f = KeyFields {
            rpm: Some("60".into()),
            all_models: true,
            expires_at: Some("never".into()),
            ..KeyFields::default()
        };
        let obj = fields_json(&f).unwrap();
        assert_eq!(Value::Object(obj), json!({"limits": {"rpm": 60}, "models": [], "expires_at": null}));
    }

    #[test]
    fn the_detail_shows_every_window() {
        let k = json!({"name": "alice", "enabled": true, "models": [], "endpoints": ["a"], "prefix": "ccm-abc…",
            "usage": {"rpm": {"used": 3, "limit": 60, "remaining": 57},
                      "usd_per_day": {"used": 1.5, "limit": 5.0, "remaining": 3.5, "resets_at": "2027-01-16T00:00:00Z"}}});
        let text = key_detail(&k);
        assert!(text.contains("models:") && text.contains("every one"), "{text}");
        assert!(text.contains("secret:") && text.contains("ccm-abc…"), "{text}");
        let rpm = text.lines().find(|l| l.starts_with("rpm")).unwrap();
        assert!(rpm.contains("3") && rpm.contains("60") && rpm.contains("57"), "{rpm}");
        let day = text.lines().find(|l| l.starts_with("usd_per_day")).unwrap();
        assert!(day.contains("$1.5000") && day.contains("$3.5000") && day.contains("2027-01-16T00:00:00Z"), "{day}");
        assert!(key_table(&json!([])).contains("ccmesh key add NAME"));
    }
}
