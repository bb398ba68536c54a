//! The plugin's configuration and the flavor catalog it yields (seed plus overlay).

use serde::Deserialize;

use crate::catalog::{Flavor, seed_flavors};

/// The real API.
pub const DEFAULT_ENDPOINT: &str = "https://api.clever-cloud.com";
/// The only zone Clever Cloud Kubernetes runs in today.
pub const DEFAULT_ZONE: &str = "par";
/// 12 hours.
pub const DEFAULT_REFRESH_INTERVAL_SECONDS: u64 = 12 * 3600;
/// Timeout of each HTTP exchange.
pub const DEFAULT_TIMEOUT_SECONDS: u64 = 15;
/// Longest refresh interval: the host keeps a cache entry at most a day.
pub const MAX_REFRESH_INTERVAL_SECONDS: u64 = 24 * 3600;
/// Longest HTTP timeout accepted (the host also clamps it to the call's deadline).
pub const MAX_TIMEOUT_SECONDS: u64 = 60;

/// The plugin's configuration (JSON, every field optional, unknown fields refused).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Base URL of the API, without a trailing `/v4`.
    pub endpoint: String,
    /// Zone priced, and asked for in the price list (`zone_id`).
    pub zone: String,
    /// Seconds between refreshes of the rates (±10 % jitter), 1 to 86400.
    pub refresh_interval_seconds: u64,
    /// Timeout of each HTTP exchange in seconds, 1 to 60.
    pub timeout_seconds: u64,
    /// Changes to the built-in flavors, or new ones.
    pub flavors: Vec<FlavorOverlay>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: DEFAULT_ENDPOINT.to_string(),
            zone: DEFAULT_ZONE.to_string(),
            refresh_interval_seconds: DEFAULT_REFRESH_INTERVAL_SECONDS,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            flavors: Vec::new(),
        }
    }
}

/// One entry of `flavors`: a built-in flavor's fields to replace, or a new flavor (which
/// must give all three).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlavorOverlay {
    /// Flavor name, as the cloud plugin names the instance type.
    pub name: String,
    /// vCPUs.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Nominal memory in GB, the price basis.
    #[serde(default, rename = "memoryGB")]
    pub memory_gb: Option<f64>,
    /// A fixed EUR/hour price, used instead of the rates (live or built-in).
    #[serde(default)]
    pub price_hourly: Option<f64>,
}

impl Config {
    /// Reads the operator's configuration and checks it.
    pub fn load() -> Result<Config, String> {
        let config: Config = joinery_plugin_sdk::config()?;
        config.validate()?;
        Ok(config)
    }

    /// Parses and checks a configuration (for tests and tools).
    pub fn from_json(json: &str) -> Result<Config, String> {
        let config: Config =
            serde_json::from_str(json).map_err(|e| format!("invalid plugin configuration: {e}"))?;
        config.validate()?;
        Ok(config)
    }

    /// The base URL without trailing slashes.
    pub fn base_url(&self) -> &str {
        self.endpoint.trim_end_matches('/')
    }

    /// Checks every field; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |field: &str, why: String| Err(format!("invalid configuration: {field}: {why}"));
        let base = self.base_url();
        let scheme_ok = base
            .strip_prefix("https://")
            .or_else(|| base.strip_prefix("http://"));
        match scheme_ok {
            Some(rest)
                if !rest.is_empty() && !rest.contains(['?', '#', ' ']) && base.len() <= 256 => {}
            _ => {
                return bad(
                    "endpoint",
                    format!(
                        "{:?} must be an http(s) base URL (at most 256 characters, no query)",
                        self.endpoint
                    ),
                );
            }
        }
        if self.zone.is_empty()
            || self.zone.len() > 63
            || !self
                .zone
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad(
                "zone",
                format!(
                    "{:?} must be 1-63 lowercase letters, digits and '-'",
                    self.zone
                ),
            );
        }
        if !(1..=MAX_REFRESH_INTERVAL_SECONDS).contains(&self.refresh_interval_seconds) {
            return bad(
                "refreshIntervalSeconds",
                format!(
                    "must be 1..={MAX_REFRESH_INTERVAL_SECONDS}, got {}",
                    self.refresh_interval_seconds
                ),
            );
        }
        if !(1..=MAX_TIMEOUT_SECONDS).contains(&self.timeout_seconds) {
            return bad(
                "timeoutSeconds",
                format!(
                    "must be 1..={MAX_TIMEOUT_SECONDS}, got {}",
                    self.timeout_seconds
                ),
            );
        }
        let seed = seed_flavors();
        for (i, overlay) in self.flavors.iter().enumerate() {
            let field = format!("flavors[{i}]");
            let name = overlay.name.as_str();
            if name.is_empty()
                || name.len() > 32
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            {
                return bad(
                    &field,
                    format!("name {name:?} must be 1-32 letters, digits, '-' or '.'"),
                );
            }
            if self.flavors[..i].iter().any(|o| o.name == name) {
                return bad(&field, format!("flavor {name} is listed twice"));
            }
            for (what, value) in [("cpu", overlay.cpu), ("memoryGB", overlay.memory_gb)] {
                if let Some(v) = value
                    && !(v.is_finite() && v > 0.0)
                {
                    return bad(
                        &format!("{field}.{what}"),
                        format!("must be a positive number, got {v}"),
                    );
                }
            }
            if let Some(p) = overlay.price_hourly
                && !(p.is_finite() && p >= 0.0)
            {
                return bad(
                    &format!("{field}.priceHourly"),
                    format!("must be a non-negative number, got {p}"),
                );
            }
            let known = seed.iter().any(|f| f.name == name);
            if !known
                && (overlay.cpu.is_none()
                    || overlay.memory_gb.is_none()
                    || overlay.price_hourly.is_none())
            {
                return bad(
                    &field,
                    format!(
                        "{name} is not a built-in flavor, so it needs cpu, memoryGB and priceHourly"
                    ),
                );
            }
        }
        Ok(())
    }

    /// The built-in flavors with the overlay applied, new flavors last.
    pub fn catalog(&self) -> Vec<Flavor> {
        let mut flavors = seed_flavors();
        for overlay in &self.flavors {
            let index = match flavors.iter().position(|f| f.name == overlay.name) {
                Some(i) => i,
                None => {
                    flavors.push(Flavor {
                        name: overlay.name.clone(),
                        cpu: 0.0,
                        memory_gb: 0.0,
                        pinned_price: None,
                    });
                    flavors.len() - 1
                }
            };
            let flavor = &mut flavors[index];
            if let Some(cpu) = overlay.cpu {
                flavor.cpu = cpu;
            }
            if let Some(memory_gb) = overlay.memory_gb {
                flavor.memory_gb = memory_gb;
            }
            if let Some(price) = overlay.price_hourly {
                flavor.pinned_price = Some(price);
            }
        }
        flavors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(json: &str) -> String {
        Config::from_json(json).unwrap_err()
    }

    #[test]
    fn an_empty_configuration_gets_the_defaults() {
        let c = Config::from_json("{}").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.base_url(), "https://api.clever-cloud.com");
        assert_eq!(
            (
                c.zone.as_str(),
                c.refresh_interval_seconds,
                c.timeout_seconds
            ),
            ("par", 43_200, 15)
        );
        assert_eq!(c.catalog(), seed_flavors());
    }

    #[test]
    fn every_field_is_read_and_unknown_ones_are_refused() {
        let c = Config::from_json(
            r#"{"endpoint": "http://127.0.0.1:8080/", "zone": "par", "refreshIntervalSeconds": 60,
                "timeoutSeconds": 5, "flavors": [{"name": "M", "priceHourly": 0.1}]}"#,
        )
        .unwrap();
        assert_eq!(c.base_url(), "http://127.0.0.1:8080");
        assert_eq!((c.refresh_interval_seconds, c.timeout_seconds), (60, 5));
        assert!(error(r#"{"refreshInterval": 60}"#).contains("refreshInterval"));
        assert!(error(r#"{"flavors": [{"name": "M", "memoryKi": 1}]}"#).contains("memoryKi"));
    }

    #[test]
    fn bad_values_name_their_field() {
        for (json, field) in [
            (r#"{"endpoint": "api.clever-cloud.com"}"#, "endpoint"),
            (r#"{"endpoint": "https://"}"#, "endpoint"),
            (r#"{"endpoint": "https://x/?a=b"}"#, "endpoint"),
            (r#"{"zone": ""}"#, "zone"),
            (r#"{"zone": "PAR"}"#, "zone"),
            (r#"{"refreshIntervalSeconds": 0}"#, "refreshIntervalSeconds"),
            (
                r#"{"refreshIntervalSeconds": 90000}"#,
                "refreshIntervalSeconds",
            ),
            (r#"{"timeoutSeconds": 0}"#, "timeoutSeconds"),
            (r#"{"timeoutSeconds": 61}"#, "timeoutSeconds"),
            (r#"{"flavors": [{"name": ""}]}"#, "flavors[0]"),
            (r#"{"flavors": [{"name": "a b"}]}"#, "flavors[0]"),
            (
                r#"{"flavors": [{"name": "M"}, {"name": "M"}]}"#,
                "flavors[1]",
            ),
            (
                r#"{"flavors": [{"name": "M", "cpu": 0}]}"#,
                "flavors[0].cpu",
            ),
            (
                r#"{"flavors": [{"name": "M", "memoryGB": -1}]}"#,
                "flavors[0].memoryGB",
            ),
            (
                r#"{"flavors": [{"name": "M", "priceHourly": -0.1}]}"#,
                "flavors[0].priceHourly",
            ),
        ] {
            let e = error(json);
            assert!(e.contains(field), "{json}: {e}");
        }
    }

    #[test]
    fn the_overlay_changes_built_in_flavors_and_adds_complete_new_ones() {
        let c = Config::from_json(
            r#"{"flavors": [
                {"name": "L", "memoryGB": 20},
                {"name": "XL", "priceHourly": 0.2},
                {"name": "2XL", "cpu": 32, "memoryGB": 64, "priceHourly": 0.45}
            ]}"#,
        )
        .unwrap();
        let catalog = c.catalog();
        let get = |n: &str| catalog.iter().find(|f| f.name == n).unwrap().clone();
        assert_eq!(
            (get("L").cpu, get("L").memory_gb, get("L").pinned_price),
            (12.0, 20.0, None)
        );
        assert_eq!((get("XL").cpu, get("XL").pinned_price), (16.0, Some(0.2)));
        assert_eq!(
            get("2XL"),
            Flavor {
                name: "2XL".into(),
                cpu: 32.0,
                memory_gb: 64.0,
                pinned_price: Some(0.45)
            }
        );
        assert_eq!(catalog.len(), 7);
        assert_eq!(catalog.last().unwrap().name, "2XL");
    }

    #[test]
    fn a_new_flavor_must_give_every_field() {
        for json in [
            r#"{"flavors": [{"name": "2XL", "cpu": 32, "memoryGB": 64}]}"#,
            r#"{"flavors": [{"name": "2XL", "cpu": 32, "priceHourly": 0.4}]}"#,
            r#"{"flavors": [{"name": "2XL", "memoryGB": 64, "priceHourly": 0.4}]}"#,
        ] {
            let e = error(json);
            assert!(
                e.contains("2XL is not a built-in flavor")
                    && e.contains("cpu, memoryGB and priceHourly"),
                "{e}"
            );
        }
    }
}
