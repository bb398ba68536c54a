//! Regular expressions used by the `karpenter.sh` CRD schemas.
//!
//! They are the exact patterns upstream's OpenAPI schemas carry, exposed so that other crates
//! can apply the same checks outside the API server.

/// A qualified name, optionally prefixed by a DNS subdomain and `/` (label keys, taint keys and
/// taint values).
pub const QUALIFIED_NAME: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$";

/// A label value (may be empty).
pub const LABEL_VALUE: &str = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// A resource quantity (`100m`, `4Gi`, `1e3`, ...).
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A duration made of `<int>(s|m|h)` segments, or `Never`.
pub const NILLABLE_DURATION: &str = r"^(([0-9]+(s|m|h))+|Never)$";

/// A duration made of `<int>(s|m|h)` segments.
pub const DURATION: &str = r"^([0-9]+(s|m|h))+$";

/// A disruption budget's active duration: hours and/or minutes, with an optional trailing `0s`.
pub const BUDGET_DURATION: &str = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$";

/// A disruption budget's node count: a percentage (0-100%) or a non-negative integer.
pub const BUDGET_NODES: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";

/// A disruption budget's cron schedule (five fields, or a `@daily`-style macro).
pub const BUDGET_SCHEDULE: &str =
    r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$";

/// A NodeClass reference's API group (no `/`).
pub const NODE_CLASS_GROUP: &str = r"^[^/]*$";

/// A condition type: CamelCase, optionally prefixed by a DNS subdomain and `/`.
pub const CONDITION_TYPE: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// A condition reason (non-empty CamelCase identifier).
pub const CONDITION_REASON: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

/// A condition reason that may also be empty (used by NodeClaim conditions).
pub const CONDITION_REASON_OR_EMPTY: &str = r"^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$";

/// A NodeOverlay absolute price (non-negative decimal).
pub const OVERLAY_PRICE: &str = r"^\d+(\.\d+)?$";

/// A NodeOverlay price adjustment: signed absolute delta, `+N%`, or `-N%` (at most -100%).
pub const OVERLAY_PRICE_ADJUSTMENT: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";
