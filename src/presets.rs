//! Endpoint presets: base URL, format, models and model map of the vendors coding agents are
//! routed to most, from one data file in the repository (`presets/vendors.toml`, compiled in),
//! each with the link it was read from. `ccmesh endpoint add NAME --preset ID` and the dashboard's
//! add form start from one; the user supplies the key, and any field given explicitly wins.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

const DATA: &str = include_str!("../presets/vendors.toml");

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub id: String,
    pub name: String,
    pub format: String,
    pub base_url: String,
    #[serde(default)]
    pub models: Vec<String>,
    /// Order does not matter: the most specific glob wins (`Endpoint::map_model`).
    #[serde(default)]
    pub model_map: toml::Table,
    #[serde(default)]
    pub test_model: Option<String>,
    pub source: String,
    #[serde(default)]
    pub note: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    preset: Vec<Preset>,
}

/// Every preset, in the file's order. The file is checked by a unit test; a broken one here
/// would mean a broken build, so an error yields no presets rather than a crash.
pub fn all() -> &'static [Preset] {
    static PRESETS: OnceLock<Vec<Preset>> = OnceLock::new();
    PRESETS.get_or_init(|| parse(DATA).unwrap_or_default())
}

fn parse(text: &str) -> Result<Vec<Preset>, String> {
    toml::from_str::<File>(text).map(|f| f.preset).map_err(|e| e.to_string())
}

pub fn find(id: &str) -> Option<&'static Preset> {
    all().iter().find(|p| p.id.eq_ignore_ascii_case(id))
}

impl Preset {
    /// Whether this gateway accepts the preset's format.
    pub fn supported(&self) -> bool {
        crate::protocol::Format::parse(&self.format).is_some()
    }

    pub fn model_map_json(&self) -> Map<String, Value> {
        self.model_map.iter().map(|(k, v)| (k.clone(), json!(v.as_str().unwrap_or_default()))).collect()
    }

    /// The endpoint fields the preset fills (no name, no key).
    pub fn fields(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("base_url".into(), json!(self.base_url));
        m.insert("format".into(), json!(self.format));
        m.insert("models".into(), json!(self.models));
        m.insert("model_map".into(), Value::Object(self.model_map_json()));
        if let Some(t) = &self.test_model {
            m.insert("test_model".into(), json!(t));
        }
        m
    }

    /// The preset as the API and the dashboard show it.
    pub fn to_json(&self) -> Value {
        let mut v = Value::Object(self.fields());
        v["id"] = json!(self.id);
        v["name"] = json!(self.name);
        v["source"] = json!(self.source);
        v["note"] = json!(self.note);
        v["supported"] = json!(self.supported());
        v
    }
}

/// Why a preset cannot be used here, with what to use instead.
pub fn refusal(p: &Preset) -> Option<String> {
    if p.supported() {
        return None;
    }
    let alternative = all()
        .iter()
        .find(|o| o.supported() && o.id.starts_with(p.id.split('-').next().unwrap_or(&p.id)) && o.id != p.id)
        .map(|o| format!("; use --preset {} instead", o.id))
        .unwrap_or_default();
    Some(format!(
        "preset '{}' needs the '{}' endpoint format, which this gateway does not accept yet{alternative}",
        p.id, p.format
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_file_parses_and_every_entry_is_complete() {
        let presets = parse(DATA).unwrap();
        assert_eq!(presets.len(), all().len());
        let mut ids = std::collections::BTreeSet::new();
        for p in &presets {
            assert!(ids.insert(p.id.clone()), "duplicate id {}", p.id);
            assert!(p.source.starts_with("https://"), "{}: source link", p.id);
            assert!(url::Url::parse(&p.base_url).is_ok_and(|u| u.scheme() == "https"), "{}: base URL", p.id);
            assert!(["anthropic", "openai", "responses", "gemini"].contains(&p.format.as_str()), "{}", p.id);
            for (k, v) in &p.model_map {
                assert!(!k.is_empty() && v.as_str().is_some_and(|v| !v.is_empty()), "{}: map {k}", p.id);
            }
            // The fields are a valid endpoint (format aside, for formats still to come).
            if p.supported() {
                let mut body = p.fields();
                body.insert("name".into(), json!("x"));
                body.insert("api_key".into(), json!("sk-test-0000000000"));
                crate::endpoint::EndpointDraft::create(&Value::Object(body))
                    .unwrap_or_else(|e| panic!("{}: {e:?}", p.id));
            }
        }
    }

    #[test]
    fn the_vendors_the_issue_names_are_all_there() {
        for id in [
            "anthropic",
            "openai",
            "deepseek",
            "glm",
            "kimi",
            "qwen",
            "minimax",
            "openrouter",
            "siliconflow",
            "ark",
            "gemini-openai",
            "gemini",
        ] {
            assert!(find(id).is_some(), "{id}");
        }
    }

    #[test]
    fn every_preset_is_accepted_and_an_unsupported_format_is_refused_with_an_alternative() {
        for p in all() {
            assert_eq!(refusal(p), None, "{}", p.id);
        }
        assert_eq!(find("gemini").unwrap().fields()["format"], "gemini");
        let future = Preset { id: "gemini-vertex".into(), format: "vertex".into(), ..find("gemini").unwrap().clone() };
        let why = refusal(&future).unwrap();
        assert!(why.contains("--preset gemini-openai"), "{why}");
    }
}
