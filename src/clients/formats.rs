//! The three file formats the clients keep their settings in, behind one small interface: read
//! the raw value at a key path, set or remove it, drop an object or table left empty. Raw values
//! are the format's own text (`"http://…"` for JSON and TOML strings, a whole `KEY=VALUE` line for
//! a `.env` file, an inline table `{ base_url = "…", … }` for a TOML table), so what `connect`
//! saw can be put back as it was.

use serde::{Deserialize, Serialize};

use super::{dotenv, json_edit};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    Json,
    Toml,
    Dotenv,
}

impl FileFormat {
    pub fn validate(self, text: &str) -> Result<(), String> {
        match self {
            FileFormat::Json => json_edit::validate(text).map_err(|e| format!("not valid JSON ({e})")),
            FileFormat::Toml => parse_toml(text).map(|_| ()),
            FileFormat::Dotenv => Ok(()),
        }
    }

    /// The raw value at `key`.
    pub fn get(self, text: &str, key: &[String]) -> Result<Option<String>, String> {
        let path: Vec<&str> = key.iter().map(String::as_str).collect();
        match self {
            FileFormat::Json => json_edit::get(text, &path).map_err(|e| format!("not valid JSON ({e})")),
            FileFormat::Toml => {
                let doc = parse_toml(text)?;
                Ok(toml_item(doc.as_item(), &path).and_then(item_raw))
            }
            FileFormat::Dotenv => Ok(path.first().and_then(|k| dotenv::get_line(text, k))),
        }
    }

    /// Set `key` to `raw`, or remove it (`None`).
    pub fn set(self, text: &str, key: &[String], raw: Option<&str>) -> Result<String, String> {
        let path: Vec<&str> = key.iter().map(String::as_str).collect();
        match self {
            FileFormat::Json => json_edit::set(text, &path, raw).map_err(|e| format!("not valid JSON ({e})")),
            FileFormat::Toml => toml_set(text, &path, raw),
            FileFormat::Dotenv => match path.first() {
                Some(k) => Ok(dotenv::set_line(text, k, raw)),
                None => Err("empty key".into()),
            },
        }
    }

    /// For a key about to be removed: the sibling after it, so a restore can put it back there.
    pub fn anchor(self, text: &str, key: &[String]) -> Option<String> {
        let path: Vec<&str> = key.iter().map(String::as_str).collect();
        match self {
            FileFormat::Json => json_edit::next_key(text, &path).ok().flatten(),
            FileFormat::Toml | FileFormat::Dotenv => None,
        }
    }

    /// Put a removed key back, before `anchor` when the format keeps an order and it still exists.
    pub fn restore(
        self,
        text: &str,
        key: &[String],
        raw: Option<&str>,
        anchor: Option<&str>,
    ) -> Result<String, String> {
        match (self, raw, anchor) {
            (FileFormat::Json, Some(raw), Some(anchor)) => {
                let path: Vec<&str> = key.iter().map(String::as_str).collect();
                json_edit::insert_before(text, &path, raw, anchor).map_err(|e| format!("not valid JSON ({e})"))
            }
            _ => self.set(text, key, raw),
        }
    }

    /// Remove the object or table at `key` when it exists and is empty.
    pub fn prune(self, text: &str, key: &[String]) -> Result<String, String> {
        let path: Vec<&str> = key.iter().map(String::as_str).collect();
        match self {
            FileFormat::Json => {
                if json_edit::is_empty_object(text, &path).map_err(|e| e.to_string())? {
                    json_edit::set(text, &path, None).map_err(|e| e.to_string())
                } else {
                    Ok(text.to_string())
                }
            }
            FileFormat::Toml => {
                let doc = parse_toml(text)?;
                let empty =
                    toml_item(doc.as_item(), &path).and_then(|i| i.as_table_like()).is_some_and(|t| t.is_empty());
                if empty { toml_set(text, &path, None) } else { Ok(text.to_string()) }
            }
            FileFormat::Dotenv => Ok(text.to_string()),
        }
    }

    /// Whether two raw values mean the same (a reformatted value is still the one we wrote).
    pub fn same(self, a: &str, b: &str) -> bool {
        match self {
            FileFormat::Json => {
                match (serde_json::from_str::<serde_json::Value>(a), serde_json::from_str::<serde_json::Value>(b)) {
                    (Ok(x), Ok(y)) => x == y,
                    _ => a == b,
                }
            }
            FileFormat::Toml => match (toml_value(a), toml_value(b)) {
                (Some(x), Some(y)) => x == y,
                _ => a.trim() == b.trim(),
            },
            FileFormat::Dotenv => {
                let value = |l: &str| {
                    l.split_once('=')
                        .map(|(k, v)| (k.trim().trim_start_matches("export ").trim().to_string(), v.trim().to_string()))
                };
                value(a) == value(b)
            }
        }
    }

    /// The text of a file that does not exist yet.
    pub fn empty_document(self) -> &'static str {
        match self {
            FileFormat::Json => "{}\n",
            FileFormat::Toml | FileFormat::Dotenv => "",
        }
    }
}

fn parse_toml(text: &str) -> Result<toml_edit::DocumentMut, String> {
    text.parse::<toml_edit::DocumentMut>().map_err(|e| format!("not valid TOML ({})", e.to_string().trim()))
}

fn toml_item<'a>(root: &'a toml_edit::Item, path: &[&str]) -> Option<&'a toml_edit::Item> {
    let mut item = root;
    for key in path {
        item = item.as_table_like()?.get(key)?;
    }
    Some(item)
}

/// A value as TOML text: tables as inline tables, everything else as written (without the
/// whitespace and comments around it).
fn item_raw(item: &toml_edit::Item) -> Option<String> {
    match item {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(v) => Some(v.clone().decorated("", "").to_string()),
        toml_edit::Item::Table(t) => {
            let mut inline = t.clone().into_inline_table();
            inline.fmt();
            Some(inline.to_string().trim().to_string())
        }
        toml_edit::Item::ArrayOfTables(a) => {
            let mut array = a.clone().into_array();
            array.fmt();
            Some(array.to_string().trim().to_string())
        }
    }
}

/// A raw TOML value (`"x"`, `{ a = 1 }`, `[1, 2]`) for comparison.
fn toml_value(raw: &str) -> Option<toml::Value> {
    let doc: toml::Table = toml::from_str(&format!("v = {raw}")).ok()?;
    doc.get("v").cloned()
}

fn toml_set(text: &str, path: &[&str], raw: Option<&str>) -> Result<String, String> {
    let mut doc = parse_toml(text)?;
    let Some((last, parents)) = path.split_last() else { return Err("empty key".into()) };
    let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
    for (i, key) in parents.iter().enumerate() {
        if table.get(key).is_none() {
            if raw.is_none() {
                return Ok(text.to_string());
            }
            // A parent made only to hold tables (`[model_providers.ccmesh]` without a
            // `[model_providers]` header of its own).
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            table.insert(key, toml_edit::Item::Table(t));
        }
        table = table
            .get_mut(key)
            .and_then(|item| item.as_table_like_mut())
            .ok_or_else(|| format!("'{}' is not a table", path[..=i].join(".")))?;
    }
    match raw {
        None => {
            table.remove(last);
        }
        Some(raw) => {
            let value: toml_edit::Value =
                raw.parse().map_err(|e: toml_edit::TomlError| format!("bad TOML value {raw}: {e}"))?;
            match (value, table.get_mut(last)) {
                // A table is written as a `[a.b]` section, as people write provider tables.
                (toml_edit::Value::InlineTable(inline), _) => {
                    let mut t = inline.into_table();
                    t.set_implicit(false);
                    t.fmt();
                    match table.get_mut(last) {
                        Some(toml_edit::Item::Table(existing)) => {
                            // Keep the section's place and the comments above it.
                            let decor = existing.decor().clone();
                            *existing = t;
                            *existing.decor_mut() = decor;
                        }
                        _ => {
                            table.insert(last, toml_edit::Item::Table(t));
                        }
                    }
                }
                (value, Some(toml_edit::Item::Value(existing))) => {
                    // Keep the whitespace and comment around the old value.
                    let decor = existing.decor().clone();
                    *existing = value;
                    *existing.decor_mut() = decor;
                }
                (value, _) => {
                    table.insert(last, toml_edit::Item::Value(value));
                }
            }
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    const CODEX: &str = r#"# Codex settings, by hand
model = "gpt-5.5" # the default
approval_policy = "on-request"

# MCP servers
[mcp_servers.docs]
command = "npx"
args = ["-y", "@acme/docs-mcp"]

[model_providers.azure]
name = "Azure"
base_url = "https://acme.openai.azure.com/openai"
env_key = "AZURE_OPENAI_API_KEY"
"#;

    #[test]
    fn toml_values_are_replaced_in_place_and_new_ones_added_at_the_top_level() {
        let f = FileFormat::Toml;
        let out = f.set(CODEX, &key(&["model"]), Some("\"o3\"")).unwrap();
        assert_eq!(out, CODEX.replace("model = \"gpt-5.5\" # the default", "model = \"o3\" # the default"));
        let out = f.set(CODEX, &key(&["model_provider"]), Some("\"ccmesh\"")).unwrap();
        assert_eq!(
            out,
            CODEX.replace(
                "approval_policy = \"on-request\"\n",
                "approval_policy = \"on-request\"\nmodel_provider = \"ccmesh\"\n"
            )
        );
        assert_eq!(f.set(&out, &key(&["model_provider"]), None).unwrap(), CODEX);
    }

    #[test]
    fn toml_tables_become_sections_and_round_trip() {
        let f = FileFormat::Toml;
        let table = r#"{ name = "ccmesh", base_url = "http://127.0.0.1:3999/v1", wire_api = "responses" }"#;
        let out = f.set(CODEX, &key(&["model_providers", "ccmesh"]), Some(table)).unwrap();
        assert!(out.starts_with(CODEX), "{out}");
        assert!(out.ends_with("[model_providers.ccmesh]\nname = \"ccmesh\"\nbase_url = \"http://127.0.0.1:3999/v1\"\nwire_api = \"responses\"\n"), "{out}");
        let got = f.get(&out, &key(&["model_providers", "ccmesh"])).unwrap().unwrap();
        assert!(f.same(&got, table), "{got}");
        let back = f.set(&out, &key(&["model_providers", "ccmesh"]), None).unwrap();
        assert_eq!(back, CODEX);
        // In a file without any provider table, the implicit parent goes when it is empty again.
        let bare = "model = \"o3\"\n";
        let out = f.set(bare, &key(&["model_providers", "ccmesh"]), Some(table)).unwrap();
        assert!(!out.contains("[model_providers]\n"), "{out}");
        let back = f.set(&out, &key(&["model_providers", "ccmesh"]), None).unwrap();
        assert_eq!(f.prune(&back, &key(&["model_providers"])).unwrap(), bare);
    }

    #[test]
    fn toml_errors_name_the_problem() {
        assert!(FileFormat::Toml.validate("a = ").unwrap_err().contains("not valid TOML"));
        assert!(
            FileFormat::Toml
                .set("model_providers = 3\n", &key(&["model_providers", "x"]), Some("1"))
                .unwrap_err()
                .contains("not a table")
        );
    }

    #[test]
    fn sameness_ignores_formatting() {
        assert!(FileFormat::Json.same("\"a\"", "\"\\u0061\""));
        assert!(!FileFormat::Json.same("\"a\"", "\"b\""));
        assert!(FileFormat::Toml.same("{ a = 1, b = \"x\" }", "{b=\"x\",a=1}"));
        assert!(FileFormat::Dotenv.same("K=v", "export K = v"));
        assert!(!FileFormat::Dotenv.same("K=v", "K=w"));
    }

    #[test]
    fn json_and_dotenv_through_the_interface() {
        let out = FileFormat::Json.set("{}\n", &key(&["env", "A"]), Some("\"1\"")).unwrap();
        assert_eq!(FileFormat::Json.get(&out, &key(&["env", "A"])).unwrap().as_deref(), Some("\"1\""));
        let back = FileFormat::Json.set(&out, &key(&["env", "A"]), None).unwrap();
        assert_eq!(FileFormat::Json.prune(&back, &key(&["env"])).unwrap(), "{}\n");
        let env = FileFormat::Dotenv.set("", &key(&["A"]), Some("A=1")).unwrap();
        assert_eq!(FileFormat::Dotenv.get(&env, &key(&["A"])).unwrap().as_deref(), Some("A=1"));
    }
}
