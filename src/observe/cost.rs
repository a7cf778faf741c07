//! Prices and cost: a built-in table of list prices (USD per million tokens) for common
//! models, overridden by prices stored in the database (admin API `PUT /api/prices/{model}`,
//! config file `[[prices]]`), and the arithmetic.
//!
//! Lookup (`PriceTable::price`), first hit wins:
//! 1. the exact model name, case-insensitively (a stored override replaces a built-in entry of
//!    the same name);
//! 2. the name without a version suffix: `-20250929`, `@20250929` (Vertex), `-2025-04-14`,
//!    `-latest` — so `claude-sonnet-4-5-20250929` is priced as `claude-sonnet-4-5` and
//!    `gpt-4o-2024-08-06` as `gpt-4o` (an exact entry for a dated name, like
//!    `gpt-4o-2024-05-13`, still wins by rule 1);
//! 3. stored overrides whose name is a `*` glob (`glm-*`, `*`), the most specific first (most
//!    literal characters).
//!
//! A model with no price has no cost (`None`), never 0: statistics count such usage as unpriced.
//!
//! The table is flat: one price per kind of token. Where a vendor bills by prompt length
//! (Claude Sonnet 4.x above 200K input, GPT-5.4/5.5 above 272K, Gemini 2.5 / 3.x Pro above
//! 200K) the table holds the standard band, and Anthropic's 1-hour cache writes (2× input) are priced as 5-minute writes (1.25×):
//! the usage fields do not say which a write was.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use super::record::Tokens;
use crate::endpoint::{FieldError, ModelPattern};
use crate::fasthash::FastMap;

/// USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

const fn p(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
    Price { input, output, cache_read, cache_write }
}

/// Anthropic: cache write = 1.25 × input (5-minute cache), cache read = 0.1 × input, as the
/// price list publishes them.
const fn anthropic(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
    p(input, output, cache_read, cache_write)
}

/// OpenAI and OpenAI-style vendors cache automatically and bill no cache write: a written
/// token costs what an input token costs.
const fn cached_input(input: f64, output: f64, cache_read: f64) -> Price {
    p(input, output, cache_read, input)
}

/// The built-in list prices. Every number was checked against the vendor's published price list
/// (or, where noted, several independent trackers quoting it) on 2026-11-30; a model whose
/// price could not be confirmed is left out rather than guessed — add it with an override.
const BUILTIN: &[(&str, Price)] = &[
    // Anthropic — platform.claude.com/docs/en/about-claude/pricing and the model overview
    // pages, checked 2026-11-30. Dated ids (claude-sonnet-4-5-20250929) match by rule 2.
    ("claude-opus-5", anthropic(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-8", anthropic(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-7", anthropic(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-6", anthropic(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-5", anthropic(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-1", anthropic(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4-0", anthropic(15.0, 75.0, 1.50, 18.75)),
    ("claude-opus-4", anthropic(15.0, 75.0, 1.50, 18.75)),
    ("claude-3-opus", anthropic(15.0, 75.0, 1.50, 18.75)),
    // Sonnet 5.5: $2/$10, cache reads cut to $0.10 on 2026-10-07 (three trackers quoting the
    // price page agree).
    ("claude-sonnet-5-5", anthropic(2.0, 10.0, 0.10, 2.50)),
    ("claude-sonnet-5", anthropic(2.0, 10.0, 0.20, 2.50)),
    ("claude-sonnet-4-6", anthropic(3.0, 15.0, 0.30, 3.75)),
    ("claude-sonnet-4-5", anthropic(3.0, 15.0, 0.30, 3.75)),
    ("claude-sonnet-4-0", anthropic(3.0, 15.0, 0.30, 3.75)),
    ("claude-sonnet-4", anthropic(3.0, 15.0, 0.30, 3.75)),
    ("claude-3-7-sonnet", anthropic(3.0, 15.0, 0.30, 3.75)),
    ("claude-3-5-sonnet", anthropic(3.0, 15.0, 0.30, 3.75)),
    ("claude-haiku-4-5", anthropic(1.0, 5.0, 0.10, 1.25)),
    ("claude-3-5-haiku", anthropic(0.80, 4.0, 0.08, 1.0)),
    ("claude-3-haiku", anthropic(0.25, 1.25, 0.03, 0.30)),
    // Not built in: Claude Haiku 5.5 (billed by prompt length, two bands), Opus 5.5 and the
    // Fable/Mythos models (cache prices not confirmed).
    //
    // OpenAI — the developers.openai.com pricing page as recorded by simonw/llm-prices and
    // pricing trackers, checked 2026-11-30. Cache read = OpenAI's cached-input price.
    ("gpt-5.5", cached_input(5.0, 30.0, 0.50)),
    ("gpt-5.4", cached_input(2.50, 15.0, 0.25)),
    ("gpt-5.4-mini", cached_input(0.75, 4.50, 0.075)),
    ("gpt-5.4-nano", cached_input(0.20, 1.25, 0.02)),
    ("gpt-5.2", cached_input(1.75, 14.0, 0.175)),
    ("gpt-5.1", cached_input(1.25, 10.0, 0.125)),
    ("gpt-5.1-codex", cached_input(1.25, 10.0, 0.125)),
    ("gpt-5.1-codex-mini", cached_input(0.25, 2.0, 0.025)),
    ("gpt-5", cached_input(1.25, 10.0, 0.125)),
    ("gpt-5-mini", cached_input(0.25, 2.0, 0.025)),
    ("gpt-5-nano", cached_input(0.05, 0.40, 0.005)),
    ("gpt-4.1", cached_input(2.0, 8.0, 0.50)),
    ("gpt-4.1-mini", cached_input(0.40, 1.60, 0.10)),
    ("gpt-4.1-nano", cached_input(0.10, 0.40, 0.025)),
    ("gpt-4o", cached_input(2.50, 10.0, 1.25)),
    // The first gpt-4o snapshot kept its launch price and has no prompt caching.
    ("gpt-4o-2024-05-13", cached_input(5.0, 15.0, 5.0)),
    ("gpt-4o-mini", cached_input(0.15, 0.60, 0.075)),
    ("o3", cached_input(2.0, 8.0, 0.50)),
    ("o3-mini", cached_input(1.10, 4.40, 0.55)),
    ("o4-mini", cached_input(1.10, 4.40, 0.275)),
    // Compatible vendors, checked 2026-11-30.
    // Z.ai (docs.z.ai pricing): cache storage is free, so a written token is an input token.
    ("glm-4.6", cached_input(0.60, 2.20, 0.11)),
    // Moonshot (platform.kimi.ai/docs/pricing/chat-k3).
    ("kimi-k3", cached_input(3.0, 15.0, 0.30)),
    // Not built in: DeepSeek (peak/off-peak prices since 2026: one number would be wrong half
    // the day) and Qwen (billed by prompt-length band). Use overrides.
    //
    // Google — ai.google.dev/gemini-api/docs/pricing (paid tier, text input, prompts up to 200K
    // tokens), as transcribed by pricing trackers and the Gemini forum, checked 2026-12-01.
    // Output includes thinking tokens, as Gemini bills them (the usage reader counts
    // `thoughtsTokenCount` as output). Cache read = the context-caching price (implicit caching
    // is a tenth of the input price); a written token costs an input token (implicit caching
    // bills no write; explicit caches' hourly storage is not a per-token price).
    ("gemini-3.1-pro-preview", cached_input(2.0, 12.0, 0.20)),
    ("gemini-3-pro-preview", cached_input(2.0, 12.0, 0.20)),
    ("gemini-3-flash-preview", cached_input(0.50, 3.0, 0.05)),
    ("gemini-2.5-pro", cached_input(1.25, 10.0, 0.125)),
    ("gemini-2.5-flash", cached_input(0.30, 2.50, 0.03)),
    ("gemini-2.5-flash-lite", cached_input(0.10, 0.40, 0.01)),
    // Not built in: Gemini 3.8 Flash (an introductory price until 2026-12-31, doubled after),
    // Gemini 3.5 Flash and Flash-Lite (no context-caching price confirmed). Use overrides.
];

/// Where a price came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriceSource {
    Builtin,
    /// A stored override (admin API or config file).
    Custom,
}

impl PriceSource {
    pub fn as_str(self) -> &'static str {
        match self {
            PriceSource::Builtin => "builtin",
            PriceSource::Custom => "custom",
        }
    }
}

/// One row of the effective table.
#[derive(Clone, Debug, PartialEq)]
pub struct PriceEntry {
    /// As configured (case kept); matched case-insensitively.
    pub model: String,
    pub price: Price,
    pub source: PriceSource,
}

impl PriceEntry {
    /// The admin API's shape.
    pub fn to_json(&self) -> Value {
        json!({
            "model": self.model,
            "input": self.price.input,
            "output": self.price.output,
            "cache_read": self.price.cache_read,
            "cache_write": self.price.cache_write,
            "source": self.source.as_str(),
        })
    }
}

/// The effective price table (built-in merged with overrides), immutable once built; it lives
/// in the gateway snapshot and is rebuilt on every change. `Default` is an empty table.
#[derive(Clone, Debug, Default)]
pub struct PriceTable {
    /// Sorted by lowercase model name.
    entries: Vec<PriceEntry>,
    /// Lowercase exact name → index in `entries`.
    exact: HashMap<String, usize>,
    /// Glob overrides → index in `entries`, most specific first.
    globs: Vec<(ModelPattern, usize)>,
    /// Answers already worked out, by the name as asked: every request prices its model (and
    /// labels its metrics by it), and the globs and suffix rules cost ~1k instructions a time.
    memo: LookupMemo,
}

/// Names remembered at most, per thread; beyond this (clients inventing names) lookups are
/// simply not remembered.
const MEMO_MAX_NAMES: usize = 4096;
const MEMO_MAX_NAME_LEN: usize = 256;

/// The answers of one table, kept per thread: a memo shared by the serving threads behind a
/// lock had every request's lookups (three or four) write the lock's cache line on both cores
/// (BENCHMARKS.md). Each thread holds the memo of the table it last asked; asking another table
/// (a new snapshot) starts it over.
#[derive(Debug)]
struct LookupMemo {
    /// This table's identity, unique in the process.
    table: u64,
}

static NEXT_TABLE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The table whose answers are held, and the answers.
    static THREAD_MEMO: RefCell<(u64, FastMap<String, Option<usize>>)> = RefCell::new((0, FastMap::default()));
}

impl Default for LookupMemo {
    fn default() -> Self {
        Self { table: NEXT_TABLE.fetch_add(1, Ordering::Relaxed) }
    }
}

impl Clone for LookupMemo {
    /// A copy starts empty: the memo belongs to one table's contents.
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl LookupMemo {
    fn get(&self, model: &str) -> Option<Option<usize>> {
        THREAD_MEMO.with(|memo| {
            let memo = memo.try_borrow().ok()?;
            (memo.0 == self.table).then(|| memo.1.get(model).copied()).flatten()
        })
    }

    fn put(&self, model: &str, found: Option<usize>) {
        if model.len() > MEMO_MAX_NAME_LEN {
            return;
        }
        THREAD_MEMO.with(|memo| {
            let Ok(mut memo) = memo.try_borrow_mut() else { return };
            if memo.0 != self.table {
                memo.0 = self.table;
                memo.1.clear();
            }
            if memo.1.len() < MEMO_MAX_NAMES {
                memo.1.insert(model.to_string(), found);
            }
        });
    }

    /// Names this thread remembers for this table.
    #[cfg(test)]
    fn len(&self) -> usize {
        THREAD_MEMO.with(|memo| {
            let memo = memo.borrow();
            if memo.0 == self.table { memo.1.len() } else { 0 }
        })
    }
}

impl PriceTable {
    pub fn builtin() -> Self {
        Self::with_overrides(Vec::new())
    }

    /// The built-in table with `overrides` (model name or `*` glob, price) on top: an override
    /// replaces a built-in entry of the same name (case-insensitively).
    pub fn with_overrides(overrides: Vec<(String, Price)>) -> Self {
        let mut by_name: HashMap<String, PriceEntry> = HashMap::new();
        for (model, price) in BUILTIN {
            by_name.insert(
                model.to_lowercase(),
                PriceEntry { model: (*model).to_string(), price: *price, source: PriceSource::Builtin },
            );
        }
        for (model, price) in overrides {
            let model = model.trim().to_string();
            if model.is_empty() {
                continue;
            }
            by_name.insert(model.to_lowercase(), PriceEntry { model, price, source: PriceSource::Custom });
        }
        let mut keyed: Vec<(String, PriceEntry)> = by_name.into_iter().collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut table = PriceTable::default();
        for (i, (key, entry)) in keyed.into_iter().enumerate() {
            if entry.model.contains('*') {
                table.globs.push((ModelPattern::new(entry.model.clone()), i));
            } else {
                table.exact.insert(key, i);
            }
            table.entries.push(entry);
        }
        // Most literal characters first: `claude-opus-*` before `claude-*` before `*`.
        table.globs.sort_by(|a, b| {
            let literal = |p: &ModelPattern| p.as_str().chars().filter(|c| *c != '*').count();
            literal(&b.0).cmp(&literal(&a.0)).then_with(|| a.1.cmp(&b.1))
        });
        table
    }

    /// The price of a model, if known.
    pub fn price(&self, model: &str) -> Option<Price> {
        self.lookup(model).map(|e| e.price)
    }

    /// The entry that prices `model` (see the module docs for the order).
    pub fn lookup(&self, model: &str) -> Option<&PriceEntry> {
        let index = match self.memo.get(model) {
            Some(found) => found,
            None => {
                let found = self.find(model);
                self.memo.put(model, found);
                found
            }
        };
        index.and_then(|i| self.entries.get(i))
    }

    fn find(&self, model: &str) -> Option<usize> {
        let model = model.trim();
        if model.is_empty() {
            return None;
        }
        let lower = model.to_lowercase();
        let exact = |name: &str| self.exact.get(name).copied();
        exact(&lower)
            .or_else(|| strip_version_suffix(&lower).and_then(exact))
            .or_else(|| self.globs.iter().find(|(p, _)| p.matches(model)).map(|(_, i)| *i))
    }

    /// Cost of `tokens` answered by `model` at an endpoint with price `multiplier`; `None` when
    /// the model has no price or the usage is unknown.
    pub fn cost(&self, model: &str, tokens: &Tokens, multiplier: f64) -> Option<f64> {
        self.price(model).and_then(|p| cost(tokens, &p, multiplier))
    }

    /// Every entry, sorted by model name.
    pub fn entries(&self) -> &[PriceEntry] {
        &self.entries
    }

    /// A stored override for exactly this name (case-insensitive), if any.
    pub fn custom(&self, model: &str) -> Option<&PriceEntry> {
        let lower = model.trim().to_lowercase();
        self.entries.iter().find(|e| e.source == PriceSource::Custom && e.model.to_lowercase() == lower)
    }
}

/// `claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`, `gpt-4o-2024-08-06` → `gpt-4o`,
/// `claude-sonnet-4-5@20250929` → `claude-sonnet-4-5`, `claude-3-7-sonnet-latest` →
/// `claude-3-7-sonnet`. `None` when there is no such suffix.
fn strip_version_suffix(model: &str) -> Option<&str> {
    let nonempty = |s: &'_ str| !s.is_empty();
    if let Some(base) = model.strip_suffix("-latest") {
        return Some(base).filter(|b| nonempty(b));
    }
    let is_date =
        |digits: &str| digits.len() == 8 && digits.starts_with("20") && digits.bytes().all(|b| b.is_ascii_digit());
    // -YYYY-MM-DD
    if let (Some(base), Some(tail)) =
        (model.get(..model.len().saturating_sub(11)), model.get(model.len().saturating_sub(11)..))
        && tail.len() == 11
        && nonempty(base)
        && tail.as_bytes().first() == Some(&b'-')
        && tail.as_bytes().get(5) == Some(&b'-')
        && tail.as_bytes().get(8) == Some(&b'-')
    {
        let digits: String = tail.chars().filter(|c| *c != '-').collect();
        if is_date(&digits) {
            return Some(base);
        }
    }
    // -YYYYMMDD or @YYYYMMDD
    if let (Some(base), Some(tail)) =
        (model.get(..model.len().saturating_sub(9)), model.get(model.len().saturating_sub(9)..))
        && tail.len() == 9
        && nonempty(base)
        && matches!(tail.as_bytes().first(), Some(b'-' | b'@'))
        && tail.get(1..).is_some_and(is_date)
    {
        return Some(base);
    }
    None
}

/// Cost in USD of `tokens` at `price`, times the endpoint's `multiplier`:
/// (input × p.input + output × p.output + cache_read × p.cache_read + cache_write ×
/// p.cache_write) ÷ 1e6 × multiplier.
///
/// `None` when the usage is unknown (neither input nor output known). When it is known, a kind
/// of token the upstream did not report counts as 0: vendors omit the cache fields when they
/// have no cache, and Anthropic's input side is known before its output (a stream cut after
/// `message_start` costs its input).
pub fn cost(tokens: &Tokens, price: &Price, multiplier: f64) -> Option<f64> {
    if !tokens.is_known() || !multiplier.is_finite() || multiplier < 0.0 {
        return None;
    }
    let n = |v: Option<u64>| v.unwrap_or(0) as f64;
    let micro = n(tokens.input) * price.input
        + n(tokens.output) * price.output
        + n(tokens.cache_read) * price.cache_read
        + n(tokens.cache_write) * price.cache_write;
    Some(micro / 1e6 * multiplier)
}

// ---------------------------------------------------------------------------------------------
// Validation of override writes (admin API and config file share it)
// ---------------------------------------------------------------------------------------------

fn field_error(field: &str, message: impl Into<String>) -> FieldError {
    FieldError { field: field.to_string(), message: message.into() }
}

/// The price fields of an override.
pub const PRICE_FIELDS: [&str; 4] = ["input", "output", "cache_read", "cache_write"];

/// A model name or `*` glob for an override: trimmed, 1-200 characters, no control characters.
pub fn validate_model(model: &str) -> Result<String, FieldError> {
    let model = model.trim();
    if model.is_empty() {
        return Err(field_error("model", "must be a model name or a * glob, e.g. \"claude-sonnet-4-5\" or \"glm-*\""));
    }
    if model.chars().count() > 200 {
        return Err(field_error("model", "must be at most 200 characters"));
    }
    if model.chars().any(char::is_control) {
        return Err(field_error("model", "must not contain control characters"));
    }
    Ok(model.to_string())
}

impl Price {
    /// Validate a price object (`{"input", "output", "cache_read", "cache_write"}`, USD per
    /// million tokens, each a number ≥ 0). `input` and `output` are required; an omitted cache
    /// price is the input price (cached tokens billed as ordinary input). Keys other than the
    /// price fields and `also_allowed` are rejected, naming the key.
    pub fn from_json(v: &Value, also_allowed: &[&str]) -> Result<Price, FieldError> {
        let Some(map) = v.as_object() else {
            return Err(field_error(
                "body",
                "must be a JSON object like {\"input\": 3, \"output\": 15, \"cache_read\": 0.3, \"cache_write\": 3.75}",
            ));
        };
        for key in map.keys() {
            if !PRICE_FIELDS.contains(&key.as_str()) && !also_allowed.contains(&key.as_str()) {
                return Err(field_error(key, format!("unknown field; valid fields are: {}", PRICE_FIELDS.join(", "))));
            }
        }
        let input =
            amount(map, "input")?.ok_or_else(|| field_error("input", "is required (USD per million tokens)"))?;
        let output =
            amount(map, "output")?.ok_or_else(|| field_error("output", "is required (USD per million tokens)"))?;
        let cache_read = amount(map, "cache_read")?.unwrap_or(input);
        let cache_write = amount(map, "cache_write")?.unwrap_or(input);
        Ok(Price { input, output, cache_read, cache_write })
    }
}

fn amount(map: &Map<String, Value>, field: &str) -> Result<Option<f64>, FieldError> {
    match map.get(field) {
        None => Ok(None),
        Some(v) => {
            let n = v
                .as_f64()
                .filter(|n| n.is_finite())
                .ok_or_else(|| field_error(field, "must be a number (USD per million tokens)"))?;
            if n < 0.0 {
                return Err(field_error(field, "must be 0 or more"));
            }
            Ok(Some(n))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    fn tokens(input: Option<u64>, output: Option<u64>, read: Option<u64>, write: Option<u64>) -> Tokens {
        Tokens { input, output, cache_read: read, cache_write: write }
    }

    #[test]
    fn cost_sums_every_kind_of_token() {
        let sonnet = PriceTable::builtin().price("claude-sonnet-4-5").unwrap();
        // 1000 × 3 + 500 × 15 + 20000 × 0.30 + 4000 × 3.75 = 31500 µUSD.
        let t = tokens(Some(1000), Some(500), Some(20_000), Some(4000));
        assert!(close(cost(&t, &sonnet, 1.0), 0.0315), "{:?}", cost(&t, &sonnet, 1.0));
        // Cache pricing matters: the same prompt uncached costs far more.
        let uncached = tokens(Some(25_000), Some(500), None, None);
        assert!(close(cost(&uncached, &sonnet, 1.0), 0.0825));
    }

    #[test]
    fn cache_prices_follow_the_vendor_rules() {
        let table = PriceTable::builtin();
        for model in ["claude-opus-4-5", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1", "claude-sonnet-4"]
        {
            let p = table.price(model).unwrap();
            assert!((p.cache_write - p.input * 1.25).abs() < 1e-9, "{model} write");
            assert!((p.cache_read - p.input * 0.1).abs() < 1e-9, "{model} read");
        }
        for model in [
            "gpt-5",
            "gpt-4.1",
            "gpt-4o",
            "gpt-4o-mini",
            "o3",
            "o4-mini",
            "glm-4.6",
            "gemini-2.5-pro",
            "gemini-2.5-flash",
        ] {
            let p = table.price(model).unwrap();
            assert_eq!(p.cache_write, p.input, "{model}");
            assert!(p.cache_read < p.input, "{model}");
        }
        // Every built-in price is a sane number.
        for e in table.entries() {
            let p = e.price;
            for v in [p.input, p.output, p.cache_read, p.cache_write] {
                assert!((0.0..=100.0).contains(&v), "{}", e.model);
            }
            assert!(p.output >= p.input, "{}", e.model);
            assert_eq!(e.source, PriceSource::Builtin);
        }
    }

    #[test]
    fn gemini_models_are_priced_with_thoughts_as_output() {
        let table = PriceTable::builtin();
        // A Gemini 2.5 Pro turn as `observe::usage` reads it: 1200 prompt tokens of which 1000
        // cached, 40 candidate + 25 thought tokens.
        let t = tokens(Some(200), Some(65), Some(1000), None);
        // 200 × 1.25 + 65 × 10 + 1000 × 0.125 = 1025 µUSD.
        assert!(close(table.cost("gemini-2.5-pro", &t, 1.0), 0.001025), "{:?}", table.cost("gemini-2.5-pro", &t, 1.0));
        for model in [
            "gemini-2.5-flash",
            "gemini-2.5-flash-lite",
            "gemini-3-pro-preview",
            "gemini-3.1-pro-preview",
            "gemini-3-flash-preview",
        ] {
            let p = table.price(model).unwrap();
            assert!((p.cache_read - p.input * 0.1).abs() < 1e-9, "{model}: implicit caching is a tenth of input");
        }
        // Unknown Gemini names stay unpriced.
        for model in ["gemini-3.8-flash", "gemini-9-ultra", "gemini"] {
            assert_eq!(table.price(model), None, "{model}");
        }
    }

    #[test]
    fn multiplier_scales_linearly() {
        let p = Price { input: 2.0, output: 8.0, cache_read: 0.5, cache_write: 2.0 };
        let t = tokens(Some(1_000_000), Some(1_000_000), None, None);
        assert!(close(cost(&t, &p, 1.0), 10.0));
        assert!(close(cost(&t, &p, 1.5), 15.0));
        assert!(close(cost(&t, &p, 0.1), 1.0));
        assert_eq!(cost(&t, &p, f64::NAN), None);
        assert_eq!(cost(&t, &p, -1.0), None);
    }

    #[test]
    fn unknown_usage_has_no_cost_but_partly_known_usage_does() {
        let p = Price { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 };
        assert_eq!(cost(&Tokens::default(), &p, 1.0), None);
        // Cache fields alone do not make usage known.
        assert_eq!(cost(&tokens(None, None, Some(100), Some(100)), &p, 1.0), None);
        // Input known, output unknown (a stream cut after message_start): the input is billed.
        assert!(close(cost(&tokens(Some(1000), None, None, None), &p, 1.0), 0.003));
        // Zero usage is a real zero.
        assert_eq!(cost(&tokens(Some(0), Some(0), None, None), &p, 1.0), Some(0.0));
    }

    #[test]
    fn remembered_lookups_answer_as_fresh_ones_and_the_memo_stays_bounded() {
        let table = PriceTable::with_overrides(vec![(
            "glm-*".into(),
            Price { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.0 },
        )]);
        let names =
            ["claude-sonnet-4-5-20250929", "GPT-4o", "glm-9-test", "my-local-llama", "", "claude-3-7-sonnet-latest"];
        let fresh: Vec<Option<String>> =
            names.iter().map(|n| table.find(n).map(|i| table.entries[i].model.clone())).collect();
        for _ in 0..2 {
            let looked: Vec<Option<String>> = names.iter().map(|n| table.lookup(n).map(|e| e.model.clone())).collect();
            assert_eq!(looked, fresh);
        }
        assert_eq!(fresh[2].as_deref(), Some("glm-*"));
        assert_eq!(fresh[3], None);
        // A clone (a new snapshot) starts with an empty memo and answers the same.
        let copy = table.clone();
        assert_eq!(copy.memo.len(), 0);
        assert_eq!(copy.lookup("glm-9-test").map(|e| e.model.as_str()), Some("glm-*"));
        // Invented names beyond the cap are answered, not remembered.
        for i in 0..(MEMO_MAX_NAMES + 100) {
            assert!(table.lookup(&format!("invented-{i}")).is_none());
        }
        assert_eq!(table.memo.len(), MEMO_MAX_NAMES);
        assert!(table.lookup(&"x".repeat(MEMO_MAX_NAME_LEN + 1)).is_none());
    }

    #[test]
    fn unknown_models_have_no_price() {
        let table = PriceTable::builtin();
        for model in ["", "  ", "my-local-llama", "claude", "gpt", "deepseek-chat", "claude-sonnet-4-5-extra"] {
            assert_eq!(table.price(model), None, "{model}");
        }
        assert_eq!(table.cost("my-local-llama", &tokens(Some(10), Some(10), None, None), 1.0), None);
        assert!(table.cost("gpt-4o", &tokens(Some(10), Some(10), None, None), 1.0).is_some());
    }

    #[test]
    fn matching_is_exact_then_dated_then_globs() {
        let table = PriceTable::with_overrides(vec![
            ("glm-*".into(), Price { input: 1.0, output: 2.0, cache_read: 0.1, cache_write: 1.0 }),
            ("glm-4.6-*".into(), Price { input: 9.0, output: 9.0, cache_read: 9.0, cache_write: 9.0 }),
            ("*".into(), Price { input: 7.0, output: 7.0, cache_read: 7.0, cache_write: 7.0 }),
        ]);
        let input = |m: &str| table.price(m).map(|p| p.input);
        // Exact, any case.
        assert_eq!(input("claude-sonnet-4-5"), Some(3.0));
        assert_eq!(input("Claude-Sonnet-4-5"), Some(3.0));
        assert_eq!(input(" gpt-4o "), Some(2.5));
        // Dated and -latest suffixes.
        assert_eq!(input("claude-sonnet-4-5-20250929"), Some(3.0));
        assert_eq!(input("claude-opus-4-1-20250805"), Some(15.0));
        assert_eq!(input("claude-opus-4-20250514"), Some(15.0));
        assert_eq!(input("claude-3-5-haiku-20241022"), Some(0.8));
        assert_eq!(input("claude-3-7-sonnet-latest"), Some(3.0));
        assert_eq!(input("claude-sonnet-4-5@20250929"), Some(3.0));
        assert_eq!(input("gpt-4o-2024-08-06"), Some(2.5));
        assert_eq!(input("gpt-4.1-mini-2025-04-14"), Some(0.4));
        assert_eq!(input("o3-2025-04-16"), Some(2.0));
        // An exact dated entry wins over the stripped name.
        assert_eq!(input("gpt-4o-2024-05-13"), Some(5.0));
        // Globs: the most specific first; the catch-all last.
        assert_eq!(input("glm-4.5-air"), Some(1.0));
        assert_eq!(input("glm-4.6-flash"), Some(9.0));
        assert_eq!(input("glm-4.6"), Some(0.6)); // the built-in exact entry
        assert_eq!(input("something-else"), Some(7.0));
        assert_eq!(table.lookup("something-else").unwrap().model, "*");
    }

    #[test]
    fn version_suffixes() {
        let cases = [
            ("claude-sonnet-4-5-20250929", Some("claude-sonnet-4-5")),
            ("claude-sonnet-4-5@20250929", Some("claude-sonnet-4-5")),
            ("gpt-4o-2024-08-06", Some("gpt-4o")),
            ("claude-3-7-sonnet-latest", Some("claude-3-7-sonnet")),
            ("-latest", None),
            ("-20250929", None),
            ("gpt-4o", None),
            ("model-12345678", None),
            ("gpt-4o-2024-0806", None),
            ("x-2024-08-0a", None),
            ("ünïcödé-2024", None),
            ("ü-20250929", Some("ü")),
        ];
        for (model, want) in cases {
            assert_eq!(strip_version_suffix(model), want, "{model}");
        }
    }

    #[test]
    fn overrides_replace_builtins_and_are_marked_custom() {
        let mine = Price { input: 1.0, output: 2.0, cache_read: 0.0, cache_write: 1.0 };
        let table = PriceTable::with_overrides(vec![("Claude-Sonnet-4-5".into(), mine), ("  ".into(), mine)]);
        assert_eq!(table.price("claude-sonnet-4-5"), Some(mine));
        assert_eq!(table.price("claude-sonnet-4-5-20250929"), Some(mine));
        let entry = table.lookup("claude-sonnet-4-5").unwrap();
        assert_eq!((entry.model.as_str(), entry.source), ("Claude-Sonnet-4-5", PriceSource::Custom));
        assert!(table.custom("claude-sonnet-4-5").is_some());
        assert!(table.custom("claude-opus-4-5").is_none());
        // One row per model; sorted; a blank name is ignored.
        assert_eq!(table.entries().len(), PriceTable::builtin().entries().len());
        let names: Vec<String> = table.entries().iter().map(|e| e.model.to_lowercase()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(entry.to_json()["source"], "custom");
        assert!(PriceTable::default().price("claude-sonnet-4-5").is_none());
    }

    #[test]
    fn price_validation_names_the_field() {
        let ok = Price::from_json(&json!({"input": 3, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}), &[])
            .unwrap();
        assert_eq!(ok, Price { input: 3.0, output: 15.0, cache_read: 0.3, cache_write: 3.75 });
        // Omitted cache prices are the input price; zero is allowed.
        let defaults = Price::from_json(&json!({"input": 2, "output": 0}), &[]).unwrap();
        assert_eq!(defaults, Price { input: 2.0, output: 0.0, cache_read: 2.0, cache_write: 2.0 });
        let cases = [
            (json!({"output": 1}), "input"),
            (json!({"input": 1}), "output"),
            (json!({"input": -1, "output": 1}), "input"),
            (json!({"input": 1, "output": "15"}), "output"),
            (json!({"input": 1, "output": 1, "cache_read": null}), "cache_read"),
            (json!({"input": 1, "output": 1, "cache_write": -0.5}), "cache_write"),
            (json!({"input": 1, "output": 1, "extra": 1}), "extra"),
            (json!({"input": 1, "output": 1, "model": "x"}), "model"),
            (json!([1, 2]), "body"),
        ];
        for (v, field) in cases {
            assert_eq!(Price::from_json(&v, &[]).unwrap_err().field, field, "{v}");
        }
        assert!(Price::from_json(&json!({"input": 1, "output": 1, "model": "x"}), &["model"]).is_ok());
        assert_eq!(validate_model("  claude-*  ").unwrap(), "claude-*");
        assert_eq!(validate_model("").unwrap_err().field, "model");
        assert_eq!(validate_model("a\nb").unwrap_err().field, "model");
        assert_eq!(validate_model(&"x".repeat(201)).unwrap_err().field, "model");
    }
}
