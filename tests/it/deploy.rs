//! The deployment examples (`deploy/compose.yaml`, `deploy/kubernetes.yaml`) are checked, not run
//! (SPEC §15.16): they parse, their parts point at each other (services, secrets, config maps),
//! the config file they carry is valid TOML, and every `serve` flag and `CCMESH_*` variable they
//! use is one `ccmesh serve --help` names — so a renamed flag breaks this test, not a deployment.
//!
//! No YAML crate is a dependency (compile time), so `Yaml` below reads the block subset these
//! files are written in: maps, lists, plain and quoted scalars, `|` literal blocks, one-line flow
//! lists and `{}`, `#` comment lines, `---` documents. Anything else fails the test loudly.

use std::path::Path;

use serde_json::{Map, Value};

use crate::support::binary::BIN;

struct Line {
    indent: usize,
    text: String,
    raw: String,
}

/// Every document of a YAML file, as JSON values.
fn parse_yaml(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .map(|doc| {
            assert!(!doc.contains('\t'), "a tab in YAML");
            let lines: Vec<Line> = doc
                .lines()
                .map(|raw| {
                    let text = raw.trim_start();
                    Line { indent: raw.len() - text.len(), text: text.trim_end().to_string(), raw: raw.to_string() }
                })
                .collect();
            let mut lines = lines;
            let mut i = 0;
            skip_blank(&lines, &mut i);
            let indent = lines[i].indent;
            let value = node(&mut lines, &mut i, indent);
            skip_blank(&lines, &mut i);
            assert!(i == lines.len(), "unparsed YAML from: {}", lines[i].raw);
            value
        })
        .collect()
}

fn is_blank(line: &Line) -> bool {
    line.text.is_empty() || line.text.starts_with('#')
}

fn skip_blank(lines: &[Line], i: &mut usize) {
    while *i < lines.len() && is_blank(&lines[*i]) {
        *i += 1;
    }
}

fn is_item(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

fn node(lines: &mut [Line], i: &mut usize, indent: usize) -> Value {
    if is_item(&lines[*i].text) { list(lines, i, indent) } else { map(lines, i, indent) }
}

fn map(lines: &mut [Line], i: &mut usize, indent: usize) -> Value {
    let mut out = Map::new();
    loop {
        skip_blank(lines, i);
        if *i >= lines.len() || lines[*i].indent < indent || is_item(&lines[*i].text) && lines[*i].indent == indent {
            break;
        }
        let line = &lines[*i];
        assert_eq!(line.indent, indent, "bad indentation: {}", line.raw);
        let (key, rest) = match line.text.split_once(": ") {
            Some((k, r)) => (k.to_string(), r.trim().to_string()),
            None => (
                line.text.strip_suffix(':').unwrap_or_else(|| panic!("not `key: value`: {}", line.raw)).to_string(),
                String::new(),
            ),
        };
        *i += 1;
        let value = if rest == "|" {
            literal_block(lines, i, indent)
        } else if rest.is_empty() {
            skip_blank(lines, i);
            match lines.get(*i) {
                Some(next) if next.indent > indent || next.indent == indent && is_item(&next.text) => {
                    let deeper = next.indent;
                    node(lines, i, deeper)
                }
                _ => Value::Null,
            }
        } else {
            scalar(&rest)
        };
        assert!(out.insert(unquote(&key), value).is_none(), "a key twice: {key}");
    }
    Value::Object(out)
}

fn list(lines: &mut [Line], i: &mut usize, indent: usize) -> Value {
    let mut out = Vec::new();
    loop {
        skip_blank(lines, i);
        if *i >= lines.len() || lines[*i].indent != indent || !is_item(&lines[*i].text) {
            break;
        }
        let rest = lines[*i].text[1..].trim_start().to_string();
        let is_map_item = !rest.starts_with(['"', '\'', '[']) && (rest.contains(": ") || rest.ends_with(':'));
        if is_map_item {
            // `- key: value` opens a map whose keys sit two columns in.
            lines[*i].indent = indent + 2;
            lines[*i].text = rest;
            out.push(map(lines, i, indent + 2));
        } else {
            out.push(scalar(&rest));
            *i += 1;
        }
    }
    Value::Array(out)
}

/// A `|` block: the following lines indented deeper than its key, with that indentation removed.
fn literal_block(lines: &[Line], i: &mut usize, key_indent: usize) -> Value {
    let mut text = Vec::new();
    let mut block_indent = None;
    while *i < lines.len() && (lines[*i].text.is_empty() || lines[*i].indent > key_indent) {
        let line = &lines[*i];
        if !line.text.is_empty() {
            let at = *block_indent.get_or_insert(line.indent);
            text.push(line.raw[at..].to_string());
        } else {
            text.push(String::new());
        }
        *i += 1;
    }
    while text.last().is_some_and(String::is_empty) {
        text.pop();
    }
    Value::String(text.join("\n") + "\n")
}

fn scalar(text: &str) -> Value {
    if text == "{}" {
        return Value::Object(Map::new());
    }
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        return Value::Array(split_flow(inner).iter().map(|s| Value::String(unquote(s))).collect());
    }
    if !text.starts_with(['"', '\''])
        && let Ok(n) = text.parse::<i64>()
    {
        return Value::from(n);
    }
    assert!(!text.starts_with(['{', '&', '*', '!', '>']), "outside the subset this test reads: {text}");
    Value::String(unquote(text))
}

fn split_flow(inner: &str) -> Vec<String> {
    let (mut items, mut current, mut quote) = (Vec::new(), String::new(), None);
    for c in inner.chars() {
        match (quote, c) {
            (None, '"' | '\'') => {
                quote = Some(c);
                current.push(c);
            }
            (Some(q), _) if c == q => {
                quote = None;
                current.push(c);
            }
            (None, ',') => items.push(std::mem::take(&mut current).trim().to_string()),
            _ => current.push(c),
        }
    }
    if !current.trim().is_empty() {
        items.push(current.trim().to_string());
    }
    items
}

fn unquote(s: &str) -> String {
    if let Some(inner) = s.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        return inner.replace("\\\"", "\"").replace("\\\\", "\\");
    }
    if let Some(inner) = s.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        return inner.replace("''", "'");
    }
    s.to_string()
}

#[test]
fn the_yaml_subset_reads_as_written() {
    let docs = parse_yaml(
        "# c\na:\n  b: 1\n  c: \"x: y\"\n  d: [\"serve\", \"\", --x]\n  e:\n    - f\n    - g: h\n      i: {}\n  j: |\n    k = 1\n\n    l\nm: n\n---\no: p\n",
    );
    assert_eq!(
        docs[0],
        serde_json::json!({"a": {"b": 1, "c": "x: y", "d": ["serve", "", "--x"], "e": ["f", {"g": "h", "i": {}}], "j": "k = 1\n\nl\n"}, "m": "n"})
    );
    assert_eq!(docs[1], serde_json::json!({"o": "p"}));
}

/// What `ccmesh serve --help` names: its flags and its environment variables.
fn serve_help() -> String {
    let out = std::process::Command::new(BIN).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn check_serve_args(help: &str, args: &Value, what: &str) {
    let args: Vec<&str> =
        args.as_array().unwrap_or_else(|| panic!("{what}: no args")).iter().filter_map(Value::as_str).collect();
    assert_eq!(args.first(), Some(&"serve"), "{what}");
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "{what}: serve has no {flag}"
        );
    }
    assert!(args.windows(2).any(|w| w == ["--listen", "0.0.0.0:3999"]), "{what}: listens beyond loopback");
}

/// Every `CCMESH_*` name is one `serve` reads.
fn check_env_names<'a>(help: &str, names: impl IntoIterator<Item = &'a String>, what: &str) {
    for name in names.into_iter().filter(|n| n.starts_with("CCMESH_")) {
        assert!(help.contains(&format!("[env: {name}")), "{what}: serve reads no {name}");
    }
}

/// The config file is valid and every `${NAME}` it reads is in the gateway's environment.
fn check_config_file(toml_text: &str, env: &[String], what: &str) {
    for part in toml_text.split("${").skip(1) {
        let name = part.split('}').next().unwrap();
        assert!(
            env.iter().any(|e| e == name),
            "{what}: the config file reads ${{{name}}}, which the gateway is not given"
        );
    }
    let v: toml::Value =
        toml::from_str(toml_text).unwrap_or_else(|e| panic!("{what}: the config file is not TOML: {e}"));
    assert_eq!(
        v["config"]["authoritative"].as_bool(),
        Some(true),
        "{what}: every node loads the same, authoritative file"
    );
    assert!(v["keys"].as_array().is_some_and(|k| !k.is_empty()), "{what}: a public gateway needs client keys");
    assert!(toml_text.contains("${ANTHROPIC_API_KEY}"), "{what}: secrets come from the environment");
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

#[test]
fn the_compose_file_runs_three_gateways_on_redis_and_postgres_behind_a_load_balancer() {
    let help = serve_help();
    let compose = parse_yaml(&read("deploy/compose.yaml")).remove(0);
    let services = compose["services"].as_object().unwrap();
    for needed in ["redis", "postgres", "lb", "ccmesh-1", "ccmesh-2", "ccmesh-3"] {
        assert!(services.contains_key(needed), "no service {needed}");
    }
    let nginx = compose["configs"]["nginx"]["content"].as_str().unwrap();
    for n in 1..=3 {
        let name = format!("ccmesh-{n}");
        let s = &services[&name];
        check_serve_args(&help, &s["command"], &name);
        let env = s["environment"].as_object().unwrap();
        check_env_names(&help, env.keys(), &name);
        let redis = env["CCMESH_REDIS_URL"].as_str().unwrap();
        assert!(redis.starts_with("redis://") && redis.contains("@redis:6379"), "{name}: {redis}");
        assert!(env["CCMESH_DATABASE_URL"].as_str().unwrap().contains("@postgres:5432/"), "{name}");
        assert!(env.contains_key("CCMESH_ADMIN_TOKEN"), "{name}: a public admin API needs a token");
        assert_eq!(s["configs"][0]["source"], "ccmesh", "{name}");
        assert!(nginx.contains(&format!("server {name}:3999")), "the load balancer sends to {name}");
    }
    assert_eq!(services["lb"]["ports"][0], "3999:80");
    // Compose reads `$$` as a literal `$`: ccmesh then expands `${...}` from its environment.
    let config = compose["configs"]["ccmesh"]["content"].as_str().unwrap().replace("$$", "$");
    let env: Vec<String> = services["ccmesh-2"]["environment"].as_object().unwrap().keys().cloned().collect();
    check_config_file(&config, &env, "compose");
}

#[test]
fn the_kubernetes_manifest_runs_three_replicas_reading_one_secret() {
    let help = serve_help();
    let docs = parse_yaml(&read("deploy/kubernetes.yaml"));
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
            .clone()
    };
    let secret = find("Secret", "ccmesh");
    let secret_keys: Vec<String> = secret["stringData"].as_object().unwrap().keys().cloned().collect();
    check_env_names(&help, &secret_keys, "the Secret");
    let redis_url = secret["stringData"]["CCMESH_REDIS_URL"].as_str().unwrap();
    find("Service", "ccmesh-redis");
    find("Deployment", "ccmesh-redis");
    assert!(redis_url.contains("@ccmesh-redis:6379"), "the gateways reach the Redis Service: {redis_url}");

    let gateway = find("Deployment", "ccmesh");
    assert_eq!(gateway["spec"]["replicas"], 3);
    let pod = &gateway["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    check_serve_args(&help, &container["args"], "the gateway container");
    assert_eq!(container["envFrom"][0]["secretRef"]["name"], "ccmesh");
    let env_names: Vec<String> =
        container["env"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap().to_string()).collect();
    check_env_names(&help, &env_names, "the gateway container");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/health");
    assert_eq!(pod["volumes"][0]["configMap"]["name"], "ccmesh");
    let service = find("Service", "ccmesh");
    assert_eq!(service["spec"]["selector"]["app"], gateway["spec"]["template"]["metadata"]["labels"]["app"]);

    let config = find("ConfigMap", "ccmesh");
    check_config_file(config["data"]["ccmesh.toml"].as_str().unwrap(), &secret_keys, "kubernetes");
}
