//! Client keys in SQLite (migration 4), and what a start needs to seed the keys' budgets: the
//! spend of their recorded requests. A key's secret is never stored: only its SHA-256 (unique:
//! two keys cannot share a secret) and the prefix lists show.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};
use crate::endpoint::ModelPattern;
use crate::keys::key::{ClientKey, KeyDraft, KeyLimits};
use crate::keys::secret::SecretHash;

/// Migration 4: the keys, and the key name on every request record (`/api/stats?group_by=key`,
/// `/api/requests?key=`, and the budgets a start seeds from the records).
pub const SCHEMA: &str = r#"
CREATE TABLE client_keys (
    id             INTEGER PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE COLLATE NOCASE,
    description    TEXT,
    enabled        INTEGER NOT NULL DEFAULT 1,
    expires_at     TEXT,
    models         TEXT NOT NULL DEFAULT '[]',
    endpoints      TEXT NOT NULL DEFAULT '[]',
    limits         TEXT NOT NULL DEFAULT '{}',
    secret_sha256  TEXT NOT NULL UNIQUE,
    prefix         TEXT NOT NULL,
    declared       INTEGER NOT NULL DEFAULT 0,
    created_at     INTEGER NOT NULL
);
ALTER TABLE requests ADD COLUMN client_key TEXT;
CREATE INDEX requests_client_key ON requests (client_key, started_at);
"#;

const COLUMNS: &str = "id, name, description, enabled, expires_at, models, endpoints, limits, secret_sha256, prefix, declared, created_at";

/// One recorded request's charge: key, when it ended (unix ms), tokens, cost.
pub type RecordedCharge = (String, i64, u64, f64);

fn row_to_key(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<ClientKey, StoreError>> {
    let name: String = r.get(1)?;
    let expires: Option<String> = r.get(4)?;
    let models: String = r.get(5)?;
    let endpoints: String = r.get(6)?;
    let limits: String = r.get(7)?;
    let hash: String = r.get(8)?;
    let corrupt = |what: &str| StoreError::Corrupt(format!("client key '{name}': {what}"));
    let built = (|| {
        let expires_at = match expires {
            None => None,
            Some(s) => {
                let ms = crate::timefmt::parse_rfc3339(&s).ok_or_else(|| corrupt("expires_at"))?;
                Some((s, ms))
            }
        };
        let models: Vec<String> = serde_json::from_str(&models).map_err(|_| corrupt("models"))?;
        let endpoints: Vec<String> = serde_json::from_str(&endpoints).map_err(|_| corrupt("endpoints"))?;
        let limits_json: serde_json::Value = serde_json::from_str(&limits).map_err(|_| corrupt("limits"))?;
        let mut limits = KeyLimits::default();
        limits.apply(&limits_json).map_err(|_| corrupt("limits"))?;
        Ok(ClientKey {
            id: r.get(0)?,
            name: name.clone(),
            description: r.get(2)?,
            enabled: r.get(3)?,
            expires_at,
            models: models.into_iter().map(ModelPattern::new).collect(),
            endpoints,
            limits,
            secret_hash: SecretHash::from_hex(&hash).ok_or_else(|| corrupt("secret_sha256"))?,
            prefix: r.get(9)?,
            declared: r.get(10)?,
            created_at_ms: r.get(11)?,
        })
    })();
    Ok(built)
}

fn json_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

fn map_unique(e: rusqlite::Error, name: &str) -> StoreError {
    match &e {
        rusqlite::Error::SqliteFailure(f, Some(msg)) if f.code == rusqlite::ErrorCode::ConstraintViolation => {
            if msg.contains("secret_sha256") {
                StoreError::SecretTaken(name.to_string())
            } else {
                StoreError::KeyDuplicate(name.to_string())
            }
        }
        _ => StoreError::Sqlite(e),
    }
}

impl Store {
    pub fn list_keys(&self) -> Result<Vec<ClientKey>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(&format!("SELECT {COLUMNS} FROM client_keys ORDER BY name"))?;
            let rows = stmt.query_map([], row_to_key)?;
            rows.map(|r| r.map_err(StoreError::from).and_then(|k| k)).collect()
        })
    }

    pub fn get_key(&self, name: &str) -> Result<ClientKey, StoreError> {
        self.with(|c| {
            c.query_row(&format!("SELECT {COLUMNS} FROM client_keys WHERE name = ?1"), [name], row_to_key)
                .optional()?
                .ok_or_else(|| StoreError::KeyNotFound(name.to_string()))?
        })
    }

    pub fn count_keys(&self) -> Result<u64, StoreError> {
        self.with(|c| Ok(c.query_row("SELECT COUNT(*) FROM client_keys", [], |r| r.get::<_, i64>(0))?.max(0) as u64))
    }

    /// A new key with the given secret hash; fails if the name or the secret is taken.
    pub fn insert_key(
        &self,
        draft: &KeyDraft,
        hash: SecretHash,
        prefix: &str,
        declared: bool,
        now_ms: i64,
    ) -> Result<ClientKey, StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO client_keys (name, description, enabled, expires_at, models, endpoints, limits,
                     secret_sha256, prefix, declared, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    draft.name,
                    draft.description,
                    draft.enabled,
                    draft.expires_at.as_ref().map(|(s, _)| s),
                    json_text(&draft.models),
                    json_text(&draft.endpoints),
                    draft.limits.to_json().to_string(),
                    hash.to_hex(),
                    prefix,
                    declared,
                    now_ms,
                ],
            )
            .map_err(|e| map_unique(e, &draft.name))?;
            Ok(())
        })?;
        self.get_key(&draft.name)
    }

    /// Replace the writable fields of the key named `name` (its name does not change).
    pub fn update_key(&self, name: &str, draft: &KeyDraft) -> Result<ClientKey, StoreError> {
        self.with(|c| {
            let n = c.execute(
                "UPDATE client_keys SET description = ?1, enabled = ?2, expires_at = ?3, models = ?4,
                     endpoints = ?5, limits = ?6 WHERE name = ?7",
                params![
                    draft.description,
                    draft.enabled,
                    draft.expires_at.as_ref().map(|(s, _)| s),
                    json_text(&draft.models),
                    json_text(&draft.endpoints),
                    draft.limits.to_json().to_string(),
                    name,
                ],
            )?;
            if n == 0 { Err(StoreError::KeyNotFound(name.to_string())) } else { Ok(()) }
        })?;
        self.get_key(name)
    }

    /// A new secret for the key (rotation; or a declared key whose secret changed).
    pub fn set_key_secret(&self, name: &str, hash: SecretHash, prefix: &str) -> Result<ClientKey, StoreError> {
        self.with(|c| {
            let n = c
                .execute(
                    "UPDATE client_keys SET secret_sha256 = ?1, prefix = ?2 WHERE name = ?3",
                    params![hash.to_hex(), prefix, name],
                )
                .map_err(|e| map_unique(e, name))?;
            if n == 0 { Err(StoreError::KeyNotFound(name.to_string())) } else { Ok(()) }
        })?;
        self.get_key(name)
    }

    pub fn delete_key(&self, name: &str) -> Result<(), StoreError> {
        self.with(|c| {
            let n = c.execute("DELETE FROM client_keys WHERE name = ?1", [name])?;
            if n == 0 { Err(StoreError::KeyNotFound(name.to_string())) } else { Ok(()) }
        })
    }

    /// A key the config file declares: created, or updated (fields and secret) by name.
    pub fn upsert_declared_key(
        &self,
        draft: &KeyDraft,
        hash: SecretHash,
        prefix: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        match self.get_key(&draft.name) {
            Ok(current) => {
                self.update_key(&current.name, draft)?;
                self.with(|c| {
                    c.execute(
                        "UPDATE client_keys SET secret_sha256 = ?1, prefix = ?2, declared = 1 WHERE name = ?3",
                        params![hash.to_hex(), prefix, current.name],
                    )
                    .map_err(|e| map_unique(e, &draft.name))?;
                    Ok(())
                })
            }
            Err(StoreError::KeyNotFound(_)) => self.insert_key(draft, hash, prefix, true, now_ms).map(|_| ()),
            Err(e) => Err(e),
        }
    }

    /// What the recorded requests of every key charged since `since_ms`, in time order: what a
    /// start seeds the budgets with, so a restart does not hand out a day's budget again.
    pub fn recorded_charges(&self, since_ms: i64) -> Result<Vec<RecordedCharge>, StoreError> {
        self.read_records(|c| {
            let mut stmt = c.prepare(
                "SELECT client_key, started_at + CAST(total_ms AS INTEGER), COALESCE(input_tokens, 0) + COALESCE(output_tokens, 0),
                        COALESCE(cost_usd, 0)
                 FROM requests WHERE client_key IS NOT NULL AND started_at >= ?1 ORDER BY started_at",
            )?;
            let rows = stmt.query_map([since_ms], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?.max(0) as u64, r.get::<_, f64>(3)?))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(v: serde_json::Value) -> KeyDraft {
        KeyDraft::create(&v).unwrap()
    }

    #[test]
    fn keys_round_trip_and_names_and_secrets_are_unique() {
        let s = Store::open_in_memory().unwrap();
        let d = draft(json!({"name": "alice", "models": ["claude-*"], "endpoints": ["a"],
            "expires_at": "2027-01-01T00:00:00Z", "limits": {"rpm": 60, "usd_per_day": 2.5}}));
        let k = s.insert_key(&d, SecretHash::of("ccm-1"), "ccm-1…", false, 5).unwrap();
        assert_eq!(k.to_draft(), d);
        assert_eq!((k.secret_hash, k.prefix.as_str(), k.created_at_ms), (SecretHash::of("ccm-1"), "ccm-1…", 5));
        assert!(matches!(
            s.insert_key(&draft(json!({"name": "ALICE"})), SecretHash::of("ccm-2"), "p", false, 0),
            Err(StoreError::KeyDuplicate(_))
        ));
        assert!(matches!(
            s.insert_key(&draft(json!({"name": "bob"})), SecretHash::of("ccm-1"), "p", false, 0),
            Err(StoreError::SecretTaken(_))
        ));
        let mut d2 = k.to_draft();
        d2.apply(&json!({"enabled": false, "limits": {"rpm": null}})).unwrap();
        let k2 = s.update_key("alice", &d2).unwrap();
        assert!(!k2.enabled && k2.limits.rpm.is_none() && k2.limits.usd_per_day == Some(2.5));
        let k3 = s.set_key_secret("alice", SecretHash::of("ccm-3"), "ccm-3…").unwrap();
        assert_eq!(k3.secret_hash, SecretHash::of("ccm-3"));
        assert_eq!(s.count_keys().unwrap(), 1);
        s.delete_key("alice").unwrap();
        assert!(matches!(s.get_key("alice"), Err(StoreError::KeyNotFound(_))));
        assert!(matches!(s.delete_key("alice"), Err(StoreError::KeyNotFound(_))));
    }

    #[test]
    fn declared_keys_are_upserted_with_their_secret() {
        let s = Store::open_in_memory().unwrap();
        s.upsert_declared_key(&draft(json!({"name": "ci"})), SecretHash::of("one"), "one…", 1).unwrap();
        s.upsert_declared_key(&draft(json!({"name": "ci", "limits": {"rpm": 5}})), SecretHash::of("two"), "two…", 2)
            .unwrap();
        let k = s.get_key("ci").unwrap();
        assert!(k.declared);
        assert_eq!((k.secret_hash, k.limits.rpm), (SecretHash::of("two"), Some(5)));
    }
}
