//! Controller settings, read from the environment with upstream Karpenter's names and defaults.

use std::time::Duration;

use joinery_api::duration::parse_go_duration;

/// A setting with a value the controller cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("environment variable {name}={value:?} is invalid: {problem}")]
pub struct SettingError {
    /// The variable, e.g. `BATCH_IDLE_DURATION`.
    pub name: String,
    /// Its value.
    pub value: String,
    /// What is expected.
    pub problem: String,
}

/// Whether preferred affinities and `ScheduleAnyway` spread constraints count (`PREFERENCE_POLICY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreferencePolicy {
    /// Honour preferences, relaxing them when they cannot be met (upstream default).
    #[default]
    Respect,
    /// Drop preferences before scheduling.
    Ignore,
}

/// How strictly `minValues` is enforced (`MIN_VALUES_POLICY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinValuesPolicy {
    /// A claim that cannot meet `minValues` is not created (upstream default).
    #[default]
    Strict,
    /// `minValues` is relaxed when it cannot be met.
    BestEffort,
}

/// Upstream's feature gates (`FEATURE_GATES`), with upstream's defaults.
///
/// Gates whose feature Joinery does not implement yet are still accepted (so an upstream
/// deployment's value works unchanged) and only recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    /// `NodeRepair` (default false): replace unhealthy nodes (the `repair` loop).
    pub node_repair: bool,
    /// `ReservedCapacity` (default true): launch into reserved offerings.
    pub reserved_capacity: bool,
    /// `SpotToSpotConsolidation` (default false): consolidate spot nodes onto cheaper spot nodes.
    pub spot_to_spot_consolidation: bool,
    /// `NodeOverlay` (default false): apply NodeOverlays to instance types before scheduling.
    pub node_overlay: bool,
    /// `StaticCapacity` (default false): NodePools with `spec.replicas`.
    pub static_capacity: bool,
    /// `CapacityBuffer` (default false): CapacityBuffer objects add virtual pods.
    pub capacity_buffer: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
        }
    }
}

impl FeatureGates {
    /// The gate names upstream accepts, in upstream's order.
    pub const NAMES: [&'static str; 6] = [
        "NodeRepair",
        "ReservedCapacity",
        "SpotToSpotConsolidation",
        "NodeOverlay",
        "StaticCapacity",
        "CapacityBuffer",
    ];

    fn gate_mut(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "NodeRepair" => &mut self.node_repair,
            "ReservedCapacity" => &mut self.reserved_capacity,
            "SpotToSpotConsolidation" => &mut self.spot_to_spot_consolidation,
            "NodeOverlay" => &mut self.node_overlay,
            "StaticCapacity" => &mut self.static_capacity,
            "CapacityBuffer" => &mut self.capacity_buffer,
            _ => return None,
        })
    }

    /// Parses upstream's `--feature-gates` form, `Name=true,Other=false`, over the defaults.
    /// Blanks around entries are ignored, as are empty entries; values are Go booleans
    /// (`true`, `false`, `1`, `0`, `t`, `f`, `TRUE`, `False`, …). An unknown gate or a value that
    /// is not a boolean is an error naming the entry.
    pub fn parse(text: &str) -> Result<FeatureGates, String> {
        let mut gates = FeatureGates::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((name, value)) = entry.split_once('=') else {
                return Err(format!("{entry:?} is not Name=true or Name=false"));
            };
            let (name, value) = (name.trim(), value.trim());
            let enabled = match value {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                _ => return Err(format!("{name}: {value:?} is not true or false")),
            };
            let Some(gate) = gates.gate_mut(name) else {
                return Err(format!(
                    "unknown feature gate {name:?}; known gates: {}",
                    FeatureGates::NAMES.join(", ")
                ));
            };
            *gate = enabled;
        }
        Ok(gates)
    }
}

/// Settings of the controller (durations are in simulated time when a simulation clock is used).
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `BATCH_IDLE_DURATION` (default 1s): a batch ends when no new pending pod arrived for this long.
    pub batch_idle_duration: Duration,
    /// `BATCH_MAX_DURATION` (default 10s): a batch never lasts longer than this.
    pub batch_max_duration: Duration,
    /// `PREFERENCE_POLICY` (default `Respect`).
    pub preference_policy: PreferencePolicy,
    /// `MIN_VALUES_POLICY` (default `Strict`).
    pub min_values_policy: MinValuesPolicy,
    /// `METRICS_PORT` (default 8080).
    pub metrics_port: u16,
    /// `HEALTH_PROBE_PORT` (default 8081).
    pub health_probe_port: u16,
    /// `LOG_LEVEL` (default `info`; `debug`, `info` or `error`).
    pub log_level: String,
    /// `FEATURE_GATES` (default upstream's:
    /// `NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false`).
    pub feature_gates: FeatureGates,
    /// `SCHEDULER_CONFIG` (default none): a kube-scheduler-style
    /// `{podTopologySpread: {defaultConstraints: [...]}}` document (YAML or JSON, the value
    /// itself); pods without spread constraints get these, with a selector deduced from the
    /// Services and controllers selecting them (see [`joinery_adapter::spread`]).
    pub default_spread: Vec<joinery_adapter::spread::DefaultConstraint>,
    /// `CLUSTER_NAME` (default `joinery`): tags instances so a cluster only ever touches its own.
    pub cluster_name: String,
    /// `CLUSTER_ENDPOINT`: the API server URL new nodes join (renderers receive it).
    pub cluster_endpoint: String,
    /// How often the disruption loop polls when idle (upstream: 10s).
    pub disruption_poll: Duration,
    /// Delay before an emptiness decision is re-validated and carried out (upstream: 15s).
    pub disruption_validation_delay: Duration,
    /// How long a launched NodeClaim may wait for its Node (upstream: 15 min).
    pub registration_timeout: Duration,
    /// How long a NodeClaim may stay unlaunched (upstream: 5 min).
    pub launch_timeout: Duration,
    /// Minimum time a node stays in `Drained=Unknown` before it is considered drained (upstream: 5s).
    pub min_drain_time: Duration,
    /// `DISABLE_LEADER_ELECTION` (default `false`): when true, this process runs the control
    /// loops without competing for the Lease (one replica only).
    pub disable_leader_election: bool,
    /// `LEADER_ELECTION_NAME` (default `joinery-leader-election`): the Lease's name.
    pub leader_election_name: String,
    /// `LEADER_ELECTION_NAMESPACE` (default empty: the controller's own namespace).
    pub leader_election_namespace: String,
    /// `SYSTEM_NAMESPACE` (default `joinery`): the controller's own namespace, where it reads
    /// granted secrets and keeps its ConfigMap of learned capacity.
    pub system_namespace: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            batch_idle_duration: Duration::from_secs(1),
            batch_max_duration: Duration::from_secs(10),
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            metrics_port: 8080,
            health_probe_port: 8081,
            log_level: "info".into(),
            feature_gates: FeatureGates::default(),
            default_spread: Vec::new(),
            cluster_name: "joinery".into(),
            cluster_endpoint: String::new(),
            disruption_poll: Duration::from_secs(10),
            disruption_validation_delay: Duration::from_secs(15),
            registration_timeout: Duration::from_secs(15 * 60),
            launch_timeout: Duration::from_secs(5 * 60),
            min_drain_time: Duration::from_secs(5),
            disable_leader_election: false,
            leader_election_name: "joinery-leader-election".into(),
            leader_election_namespace: String::new(),
            system_namespace: "joinery".into(),
        }
    }
}

impl Settings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Settings, SettingError> {
        Settings::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (the environment, or a map in tests and scenarios).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Settings, SettingError> {
        let mut s = Settings::default();
        let err = |name: &str, value: &str, problem: &str| SettingError {
            name: name.into(),
            value: value.into(),
            problem: problem.into(),
        };
        let duration = |name: &str, default: Duration| -> Result<Duration, SettingError> {
            match lookup(name) {
                None => Ok(default),
                Some(v) => parse_go_duration(&v).map_err(|e| {
                    err(
                        name,
                        &v,
                        &format!("{e} (use a Go duration such as 1s or 500ms)"),
                    )
                }),
            }
        };
        s.batch_idle_duration = duration("BATCH_IDLE_DURATION", s.batch_idle_duration)?;
        s.batch_max_duration = duration("BATCH_MAX_DURATION", s.batch_max_duration)?;
        if let Some(v) = lookup("PREFERENCE_POLICY") {
            s.preference_policy = match v.as_str() {
                "Respect" => PreferencePolicy::Respect,
                "Ignore" => PreferencePolicy::Ignore,
                _ => return Err(err("PREFERENCE_POLICY", &v, "expected Respect or Ignore")),
            };
        }
        if let Some(v) = lookup("SCHEDULER_CONFIG").filter(|v| !v.trim().is_empty()) {
            s.default_spread = joinery_adapter::spread::parse_scheduler_config(&v)
                .map_err(|e| err("SCHEDULER_CONFIG", &v, &e.0))?;
        }
        if let Some(v) = lookup("MIN_VALUES_POLICY") {
            s.min_values_policy = match v.as_str() {
                "Strict" => MinValuesPolicy::Strict,
                "BestEffort" => MinValuesPolicy::BestEffort,
                _ => {
                    return Err(err(
                        "MIN_VALUES_POLICY",
                        &v,
                        "expected Strict or BestEffort",
                    ));
                }
            };
        }
        let port = |name: &str, default: u16| -> Result<u16, SettingError> {
            match lookup(name) {
                None => Ok(default),
                Some(v) => v
                    .parse()
                    .map_err(|_| err(name, &v, "expected a port number 0-65535")),
            }
        };
        s.metrics_port = port("METRICS_PORT", s.metrics_port)?;
        s.health_probe_port = port("HEALTH_PROBE_PORT", s.health_probe_port)?;
        if let Some(v) = lookup("LOG_LEVEL") {
            if !matches!(v.as_str(), "debug" | "info" | "error") {
                return Err(err("LOG_LEVEL", &v, "expected debug, info or error"));
            }
            s.log_level = v;
        }
        if let Some(v) = lookup("FEATURE_GATES") {
            s.feature_gates =
                FeatureGates::parse(&v).map_err(|problem| err("FEATURE_GATES", &v, &problem))?;
        }
        if let Some(v) = lookup("CLUSTER_NAME") {
            if v.is_empty() {
                return Err(err("CLUSTER_NAME", &v, "must not be empty"));
            }
            s.cluster_name = v;
        }
        if let Some(v) = lookup("DISABLE_LEADER_ELECTION") {
            s.disable_leader_election = match v.to_ascii_lowercase().as_str() {
                "true" | "1" => true,
                "false" | "0" | "" => false,
                _ => return Err(err("DISABLE_LEADER_ELECTION", &v, "expected true or false")),
            };
        }
        if let Some(v) = lookup("LEADER_ELECTION_NAME") {
            if v.is_empty() {
                return Err(err(
                    "LEADER_ELECTION_NAME",
                    &v,
                    "must not be empty (the Lease's name)",
                ));
            }
            s.leader_election_name = v;
        }
        if let Some(v) = lookup("LEADER_ELECTION_NAMESPACE") {
            s.leader_election_namespace = v;
        }
        if let Some(v) = lookup("SYSTEM_NAMESPACE") {
            if v.is_empty() {
                return Err(err(
                    "SYSTEM_NAMESPACE",
                    &v,
                    "must not be empty (the controller's namespace)",
                ));
            }
            s.system_namespace = v;
        }
        if let Some(v) = lookup("CLUSTER_ENDPOINT") {
            s.cluster_endpoint = v;
        }
        if s.batch_idle_duration > s.batch_max_duration {
            return Err(err(
                "BATCH_IDLE_DURATION",
                &format!("{:?}", s.batch_idle_duration),
                "must not be longer than BATCH_MAX_DURATION",
            ));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn from(pairs: &[(&str, &str)]) -> Result<Settings, SettingError> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn scheduler_config_gives_default_spread_constraints() {
        assert!(from(&[]).unwrap().default_spread.is_empty());
        let s = from(&[(
            "SCHEDULER_CONFIG",
            r#"{"podTopologySpread": {"defaultConstraints": [{"maxSkew": 3, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]}}"#,
        )])
        .unwrap();
        assert_eq!(s.default_spread.len(), 1);
        assert_eq!(s.default_spread[0].max_skew, 3);
        let e = from(&[("SCHEDULER_CONFIG", "podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: k, whenUnsatisfiable: DoNotSchedule}]}")])
            .unwrap_err();
        assert_eq!(e.name, "SCHEDULER_CONFIG");
        assert!(e.to_string().contains("maxSkew"), "{e}");
    }

    #[test]
    fn defaults_match_upstream() {
        let s = from(&[]).unwrap();
        assert_eq!(s.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(s.batch_max_duration, Duration::from_secs(10));
        assert_eq!((s.metrics_port, s.health_probe_port), (8080, 8081));
        assert_eq!(s.preference_policy, PreferencePolicy::Respect);
        assert_eq!(s.min_values_policy, MinValuesPolicy::Strict);
        let gates = s.feature_gates;
        assert!(!gates.node_overlay && !gates.node_repair && !gates.spot_to_spot_consolidation);
        assert!(!gates.static_capacity && !gates.capacity_buffer);
        assert!(
            gates.reserved_capacity,
            "ReservedCapacity is on by default upstream"
        );
    }

    #[test]
    fn feature_gates_override_only_the_named_gates() {
        let s = from(&[(
            "FEATURE_GATES",
            "NodeOverlay=true, ReservedCapacity=false,,",
        )])
        .unwrap();
        assert!(s.feature_gates.node_overlay);
        assert!(!s.feature_gates.reserved_capacity);
        assert!(
            !s.feature_gates.node_repair,
            "gates not named keep their default"
        );
        let upstream_default = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";
        assert_eq!(
            from(&[("FEATURE_GATES", upstream_default)])
                .unwrap()
                .feature_gates,
            FeatureGates::default()
        );
        assert!(
            from(&[("FEATURE_GATES", "NodeOverlay=1")])
                .unwrap()
                .feature_gates
                .node_overlay,
            "Go booleans"
        );
        assert_eq!(
            from(&[("FEATURE_GATES", "")]).unwrap().feature_gates,
            FeatureGates::default()
        );
    }

    #[test]
    fn invalid_feature_gates_name_the_variable_and_the_gate() {
        for (value, says) in [
            ("NodeOverlay=yes", "NodeOverlay"),
            ("NodeOverlay", "Name=true"),
            ("NodeOverlays=true", "unknown feature gate \"NodeOverlays\""),
        ] {
            let e = from(&[("FEATURE_GATES", value)]).unwrap_err();
            assert_eq!(e.name, "FEATURE_GATES");
            let text = e.to_string();
            assert!(
                text.contains("FEATURE_GATES") && text.contains(says),
                "{text}"
            );
        }
    }

    #[test]
    fn reads_upstream_variable_names() {
        let s = from(&[
            ("BATCH_IDLE_DURATION", "500ms"),
            ("BATCH_MAX_DURATION", "3s"),
            ("PREFERENCE_POLICY", "Ignore"),
        ])
        .unwrap();
        assert_eq!(s.batch_idle_duration, Duration::from_millis(500));
        assert_eq!(s.batch_max_duration, Duration::from_secs(3));
        assert_eq!(s.preference_policy, PreferencePolicy::Ignore);
        let s = from(&[
            ("DISABLE_LEADER_ELECTION", "true"),
            ("LEADER_ELECTION_NAME", "mine"),
            ("LEADER_ELECTION_NAMESPACE", "ops"),
        ])
        .unwrap();
        assert!(s.disable_leader_election);
        assert_eq!(
            (
                s.leader_election_name.as_str(),
                s.leader_election_namespace.as_str()
            ),
            ("mine", "ops")
        );
        let s = from(&[]).unwrap();
        assert!(
            !s.disable_leader_election,
            "election is on by default, as upstream"
        );
        assert_eq!(s.leader_election_name, "joinery-leader-election");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = from(&[("BATCH_MAX_DURATION", "ten")]).unwrap_err();
        assert_eq!(e.name, "BATCH_MAX_DURATION");
        assert!(e.to_string().contains("Go duration"), "{e}");
        assert_eq!(
            from(&[("MIN_VALUES_POLICY", "strict")]).unwrap_err().name,
            "MIN_VALUES_POLICY"
        );
        assert_eq!(
            from(&[("LOG_LEVEL", "trace")]).unwrap_err().name,
            "LOG_LEVEL"
        );
        assert_eq!(
            from(&[("BATCH_IDLE_DURATION", "20s")]).unwrap_err().name,
            "BATCH_IDLE_DURATION"
        );
        assert_eq!(
            from(&[("DISABLE_LEADER_ELECTION", "maybe")])
                .unwrap_err()
                .name,
            "DISABLE_LEADER_ELECTION"
        );
        assert_eq!(
            from(&[("LEADER_ELECTION_NAME", "")]).unwrap_err().name,
            "LEADER_ELECTION_NAME"
        );
    }
}
