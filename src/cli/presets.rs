//! `ccmesh presets` and the `--preset` of `ccmesh endpoint add`.

use anyhow::bail;
use serde_json::{Map, Value, json};

use super::api::Common;
use super::output::{pretty, table};
use crate::presets;

/// The endpoint fields of preset `id`, or why it cannot be used.
pub fn preset_fields(id: &str) -> anyhow::Result<Map<String, Value>> {
    let Some(p) = presets::find(id) else {
        bail!("no preset named '{id}'; list them with `ccmesh presets`");
    };
    if let Some(why) = presets::refusal(p) {
        bail!("{why}");
    }
    Ok(p.fields())
}

pub fn list(common: &Common) -> String {
    if common.json {
        return pretty(&json!(presets::all().iter().map(presets::Preset::to_json).collect::<Vec<_>>()));
    }
    let rows: Vec<Vec<String>> = presets::all()
        .iter()
        .map(|p| {
            let map = p.model_map.iter().map(|(k, v)| format!("{k}→{}", v.as_str().unwrap_or(""))).collect::<Vec<_>>();
            let models = if map.is_empty() {
                if p.models.is_empty() { "any".to_string() } else { p.models.join(",") }
            } else {
                map.join(", ")
            };
            let format = if p.supported() { p.format.clone() } else { format!("{} (not yet)", p.format) };
            vec![p.id.clone(), format, p.base_url.clone(), models, p.source.clone()]
        })
        .collect();
    format!(
        "{}\nadd one with `ccmesh endpoint add NAME --preset ID --api-key KEY` (flags such as --base-url or --map override the preset)",
        table(&["PRESET", "FORMAT", "BASE URL", "MODELS", "SOURCE"], &rows)
    )
}
