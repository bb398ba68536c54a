//! Resource quantities and resource vectors.
//!
//! Kubernetes writes amounts as *quantities* (`"500m"`, `"8Gi"`, `"1e3"`). The core never keeps
//! quantities around: they are parsed once into integers with a fixed unit per resource —
//! CPU in millicores, memory, ephemeral storage and `hugepages-*` in bytes, everything else
//! (pods, extended resources such as `nvidia.com/gpu`) as a plain count. Fractions are rounded
//! up, as Kubernetes does when it asks a quantity for its (milli)value.
//!
//! [`Resources`] is the vector the scheduler adds, subtracts and compares.
//! [`PodResourceSpec::requests`] computes what a pod asks the scheduler for.

use std::collections::BTreeMap;
use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Sub, SubAssign};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Resource name for CPU (unit: millicores).
pub const CPU: &str = "cpu";
/// Resource name for memory (unit: bytes).
pub const MEMORY: &str = "memory";
/// Resource name for node-local ephemeral storage (unit: bytes).
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Resource name for the number of pods a node can run.
pub const PODS: &str = "pods";
/// Pseudo-resource counting nodes, used by NodePool limits and status.
pub const NODES: &str = "nodes";
/// Prefix of huge page resources (`hugepages-2Mi`, `hugepages-1Gi`; unit: bytes).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// Why a quantity string could not be turned into an amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The string was empty.
    #[error("quantity is empty")]
    Empty,
    /// The string does not follow the Kubernetes quantity grammar.
    #[error("{0:?} is not a valid quantity")]
    Invalid(String),
    /// The amount does not fit the integer unit (or has too many significant digits).
    #[error("quantity {0:?} is out of range")]
    OutOfRange(String),
    /// The amount is negative, which no resource amount in the core may be.
    #[error("quantity {0:?} is negative")]
    Negative(String),
}

/// An exactly parsed Kubernetes quantity: `±mantissa × 10^exp10 × 1024^pow1024`.
///
/// Up to 38 significant digits are kept exactly; conversion to integers rounds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    pow1024: u32,
}

/// Largest power of ten that fits in a `u128`.
const MAX_POW10_U128: u32 = 38;
/// Bound on a written exponent (`1e<n>`); far beyond anything representable anyway.
const MAX_EXPONENT: i32 = 10_000;

impl Quantity {
    /// Parses a quantity: an optionally signed decimal number (`1`, `1.5`, `.5`, `2.`) followed
    /// by nothing, a decimal SI suffix (`n u m k M G T P E`), a binary suffix
    /// (`Ki Mi Gi Ti Pi Ei`) or a decimal exponent (`e3`, `E-2`).
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        let invalid = || QuantityError::Invalid(s.to_owned());
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
            return Err(invalid());
        }

        // Significant digits: integer part then fraction, without leading/trailing zeros.
        let frac_part = frac_part.trim_end_matches('0');
        let mut exp10 = -(frac_part.len() as i32);
        let mut digits: String = format!("{int_part}{frac_part}");
        let trimmed_trailing = digits.len() - digits.trim_end_matches('0').len();
        digits.truncate(digits.len() - trimmed_trailing);
        exp10 += trimmed_trailing as i32;
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_POW10_U128 as usize {
            return Err(QuantityError::OutOfRange(s.to_owned()));
        }
        let mantissa: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| invalid())?
        };

        let (suffix_exp10, pow1024) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 1),
            "Mi" => (0, 2),
            "Gi" => (0, 3),
            "Ti" => (0, 4),
            "Pi" => (0, 5),
            "Ei" => (0, 6),
            _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
                let exp = &suffix[1..];
                let unsigned = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                let value: i32 = exp
                    .parse()
                    .map_err(|_| QuantityError::OutOfRange(s.to_owned()))?;
                if value.abs() > MAX_EXPONENT {
                    return Err(QuantityError::OutOfRange(s.to_owned()));
                }
                (value, 0)
            }
            _ => return Err(invalid()),
        };
        Ok(Quantity {
            negative: negative && mantissa != 0,
            mantissa,
            exp10: exp10 + suffix_exp10,
            pow1024,
        })
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Whether the quantity is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The amount times `10^scale`, rounded up; `None` if negative or larger than `u64::MAX`.
    pub fn scaled(&self, scale: i32) -> Option<u64> {
        if self.mantissa == 0 {
            return Some(0);
        }
        if self.negative {
            return None;
        }
        let mut n = self.mantissa;
        for _ in 0..self.pow1024 {
            n = n.checked_mul(1024)?;
        }
        let exp = self.exp10 + scale;
        if exp >= 0 {
            if exp as u32 > MAX_POW10_U128 {
                return None;
            }
            n = n.checked_mul(10u128.pow(exp as u32))?;
        } else {
            let shift = exp.unsigned_abs();
            n = if shift > MAX_POW10_U128 {
                1 // a positive amount far below one unit rounds up to one
            } else {
                let p = 10u128.pow(shift);
                n / p + u128::from(!n.is_multiple_of(p))
            };
        }
        u64::try_from(n).ok()
    }

    /// The amount in thousandths of a unit, rounded up (`"1.5"` → 1500, `"1n"` → 1).
    pub fn milli_value(&self) -> Option<u64> {
        self.scaled(3)
    }

    /// The amount in whole units, rounded up (`"1.5"` → 2, `"1Ki"` → 1024).
    pub fn value(&self) -> Option<u64> {
        self.scaled(0)
    }
}

fn convert(s: &str, scale: i32) -> Result<u64, QuantityError> {
    let q = Quantity::parse(s)?;
    if q.is_negative() {
        return Err(QuantityError::Negative(s.to_owned()));
    }
    q.scaled(scale)
        .ok_or_else(|| QuantityError::OutOfRange(s.to_owned()))
}

/// Parses a quantity into thousandths of a unit, rounding up (CPU: `"500m"` → 500, `"2"` → 2000).
pub fn parse_milli(s: &str) -> Result<u64, QuantityError> {
    convert(s, 3)
}

/// Parses a quantity into whole units, rounding up (memory: `"1Gi"` → 1073741824).
pub fn parse_value(s: &str) -> Result<u64, QuantityError> {
    convert(s, 0)
}

/// Formats millicores: whole units without suffix (`"2"`), otherwise with `m` (`"1500m"`).
pub fn format_milli(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Formats bytes with the largest exact binary suffix (`"8Gi"`), else the largest exact
/// decimal suffix (`"100M"`), else as a plain integer.
pub fn format_bytes(bytes: u64) -> String {
    if bytes == 0 {
        return "0".to_owned();
    }
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    const DECIMAL: [&str; 6] = ["k", "M", "G", "T", "P", "E"];
    for (i, suffix) in BINARY.iter().enumerate().rev() {
        let unit = 1u64 << (10 * (i as u32 + 1));
        if bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    for (i, suffix) in DECIMAL.iter().enumerate().rev() {
        let unit = 1000u64.pow(i as u32 + 1);
        if bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// How a resource's amount is stored, decided by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Thousandths of a unit (CPU).
    Milli,
    /// Bytes (memory, ephemeral storage, huge pages).
    Bytes,
    /// A plain count (pods, extended resources).
    Count,
}

impl Unit {
    /// The unit used for the named resource.
    pub fn of(resource: &str) -> Unit {
        match resource {
            CPU => Unit::Milli,
            MEMORY | EPHEMERAL_STORAGE => Unit::Bytes,
            _ if resource.starts_with(HUGEPAGES_PREFIX) => Unit::Bytes,
            _ => Unit::Count,
        }
    }

    /// Parses a quantity string into this unit.
    pub fn parse(self, quantity: &str) -> Result<u64, QuantityError> {
        match self {
            Unit::Milli => parse_milli(quantity),
            Unit::Bytes | Unit::Count => parse_value(quantity),
        }
    }

    /// Formats an amount in this unit back into a quantity string.
    pub fn format(self, amount: u64) -> String {
        match self {
            Unit::Milli => format_milli(amount),
            Unit::Bytes => format_bytes(amount),
            Unit::Count => amount.to_string(),
        }
    }
}

/// A vector of resource amounts: the four core resources as fields, other (extended)
/// resources in a small map sorted by name.
///
/// Arithmetic saturates: subtraction floors at zero, addition caps at `u64::MAX`. A resource
/// that is absent counts as zero, also for equality.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    /// CPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage_bytes: u64,
    /// Number of pods.
    pub pods: u64,
    /// Other resources, sorted by name, names unique.
    extended: Vec<(String, u64)>,
}

/// A resource name resolved once ([`ResourceKey::of`]), read with [`Resources::amount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKey<'a> {
    /// `cpu`.
    Cpu,
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// `pods`.
    Pods,
    /// Any other (extended) resource.
    Extended(&'a str),
}

impl<'a> ResourceKey<'a> {
    /// The key of the resource called `name`.
    pub fn of(name: &'a str) -> Self {
        match name {
            CPU => ResourceKey::Cpu,
            MEMORY => ResourceKey::Memory,
            EPHEMERAL_STORAGE => ResourceKey::EphemeralStorage,
            PODS => ResourceKey::Pods,
            other => ResourceKey::Extended(other),
        }
    }
}

impl Resources {
    /// An all-zero vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a vector from `(name, quantity string)` pairs, e.g. a Kubernetes ResourceList.
    /// A name given twice keeps the last amount.
    pub fn from_quantities<I, K, V>(items: I) -> Result<Self, QuantityError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut out = Resources::new();
        for (name, quantity) in items {
            out.set_quantity(name.as_ref(), quantity.as_ref())?;
        }
        Ok(out)
    }

    /// Returns the vector with one resource set to `amount` (in that resource's [`Unit`]).
    pub fn with(mut self, name: &str, amount: u64) -> Self {
        self.set(name, amount);
        self
    }

    /// Lowers each amount to `other`'s where that is smaller (an absent resource counts as
    /// zero): resource by resource, the minimum of the two.
    pub fn min_with(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.min(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.min(other.memory_bytes);
        self.ephemeral_storage_bytes = self
            .ephemeral_storage_bytes
            .min(other.ephemeral_storage_bytes);
        self.pods = self.pods.min(other.pods);
        for (name, amount) in &mut self.extended {
            *amount = (*amount).min(other.amount(ResourceKey::Extended(name)));
        }
    }

    /// The amount of the named resource (zero if absent), in the resource's [`Unit`].
    pub fn get(&self, name: &str) -> u64 {
        self.amount(ResourceKey::of(name))
    }

    /// The amount of a resource named by a [`ResourceKey`] (zero if absent): [`Resources::get`]
    /// without comparing names, for loops reading one resource of many vectors.
    pub fn amount(&self, key: ResourceKey<'_>) -> u64 {
        match key {
            ResourceKey::Cpu => self.cpu_millis,
            ResourceKey::Memory => self.memory_bytes,
            ResourceKey::EphemeralStorage => self.ephemeral_storage_bytes,
            ResourceKey::Pods => self.pods,
            ResourceKey::Extended(name) => match self.extended_index(name) {
                Ok(i) => self.extended[i].1,
                Err(_) => 0,
            },
        }
    }

    /// Sets the named resource to `amount`, in the resource's [`Unit`].
    pub fn set(&mut self, name: &str, amount: u64) {
        match name {
            CPU => self.cpu_millis = amount,
            MEMORY => self.memory_bytes = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage_bytes = amount,
            PODS => self.pods = amount,
            _ => match self.extended_index(name) {
                Ok(i) => self.extended[i].1 = amount,
                Err(i) => self.extended.insert(i, (name.to_owned(), amount)),
            },
        }
    }

    /// Parses `quantity` in the named resource's [`Unit`] and sets it.
    pub fn set_quantity(&mut self, name: &str, quantity: &str) -> Result<(), QuantityError> {
        let amount = Unit::of(name).parse(quantity)?;
        self.set(name, amount);
        Ok(())
    }

    /// Whether every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.cpu_millis == 0
            && self.memory_bytes == 0
            && self.ephemeral_storage_bytes == 0
            && self.pods == 0
            && self.extended.iter().all(|(_, v)| *v == 0)
    }

    /// Non-core resources (extended resources, huge pages), sorted by name.
    pub fn extended(&self) -> impl Iterator<Item = (&str, u64)> {
        self.extended.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Every non-zero amount, core resources first (cpu, memory, ephemeral-storage, pods),
    /// then extended resources by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> {
        [
            (CPU, self.cpu_millis),
            (MEMORY, self.memory_bytes),
            (EPHEMERAL_STORAGE, self.ephemeral_storage_bytes),
            (PODS, self.pods),
        ]
        .into_iter()
        .chain(self.extended())
        .filter(|(_, v)| *v != 0)
    }

    /// Non-zero amounts as quantity strings keyed by resource name (a ResourceList).
    pub fn to_quantities(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), Unit::of(k).format(v)))
            .collect()
    }

    /// Whether a request of `self` fits into `available`: every amount is at most the
    /// available one. Resources `self` does not ask for are not checked.
    pub fn fits(&self, available: &Resources) -> bool {
        self.cpu_millis <= available.cpu_millis
            && self.memory_bytes <= available.memory_bytes
            && self.ephemeral_storage_bytes <= available.ephemeral_storage_bytes
            && self.pods <= available.pods
            && self
                .extended
                .iter()
                .all(|(k, v)| *v == 0 || *v <= available.get(k))
    }

    /// Names of the resources whose request in `self` exceeds `available` (empty iff
    /// [`fits`](Self::fits)).
    pub fn exceeding<'a>(&'a self, available: &Resources) -> Vec<&'a str> {
        self.iter()
            .filter(|(k, v)| *v > available.get(k))
            .map(|(k, _)| k)
            .collect()
    }

    /// Element-wise sum, capped at `u64::MAX`.
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.add_in_place(other);
        out
    }

    /// Element-wise difference, floored at zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.sub_in_place(other);
        out
    }

    /// Element-wise maximum.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut out = self.clone();
        out.max_in_place(other);
        out
    }

    fn add_in_place(&mut self, other: &Resources) {
        self.combine(other, u64::saturating_add);
    }

    fn sub_in_place(&mut self, other: &Resources) {
        self.combine(other, u64::saturating_sub);
    }

    fn max_in_place(&mut self, other: &Resources) {
        self.combine(other, u64::max);
    }

    /// Applies `f(self_amount, other_amount)` to every resource present on either side.
    fn combine(&mut self, other: &Resources, f: impl Fn(u64, u64) -> u64) {
        self.cpu_millis = f(self.cpu_millis, other.cpu_millis);
        self.memory_bytes = f(self.memory_bytes, other.memory_bytes);
        self.ephemeral_storage_bytes =
            f(self.ephemeral_storage_bytes, other.ephemeral_storage_bytes);
        self.pods = f(self.pods, other.pods);
        if other.extended.is_empty() {
            // Only possible change: f(x, 0) for our own entries.
            for (_, v) in &mut self.extended {
                *v = f(*v, 0);
            }
            return;
        }
        // Sorted merge of both extended maps.
        let mine = std::mem::take(&mut self.extended);
        let mut merged = Vec::with_capacity(mine.len().max(other.extended.len()));
        let mut a = mine.into_iter().peekable();
        let mut b = other.extended.iter().peekable();
        loop {
            match (a.peek(), b.peek()) {
                (Some((ka, _)), Some((kb, _))) => match ka.as_str().cmp(kb.as_str()) {
                    std::cmp::Ordering::Less => {
                        let (k, v) = a.next().expect("peeked");
                        merged.push((k, f(v, 0)));
                    }
                    std::cmp::Ordering::Greater => {
                        let (k, v) = b.next().expect("peeked");
                        merged.push((k.clone(), f(0, *v)));
                    }
                    std::cmp::Ordering::Equal => {
                        let (k, va) = a.next().expect("peeked");
                        let (_, vb) = b.next().expect("peeked");
                        merged.push((k, f(va, *vb)));
                    }
                },
                (Some(_), None) => {
                    let (k, v) = a.next().expect("peeked");
                    merged.push((k, f(v, 0)));
                }
                (None, Some(_)) => {
                    let (k, v) = b.next().expect("peeked");
                    merged.push((k.clone(), f(0, *v)));
                }
                (None, None) => break,
            }
        }
        self.extended = merged;
    }

    fn extended_index(&self, name: &str) -> Result<usize, usize> {
        self.extended
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
    }
}

impl PartialEq for Resources {
    fn eq(&self, other: &Self) -> bool {
        self.cpu_millis == other.cpu_millis
            && self.memory_bytes == other.memory_bytes
            && self.ephemeral_storage_bytes == other.ephemeral_storage_bytes
            && self.pods == other.pods
            && self.extended.iter().all(|(k, v)| other.get(k) == *v)
            && other.extended.iter().all(|(k, v)| self.get(k) == *v)
    }
}

impl Eq for Resources {}

impl fmt::Display for Resources {
    /// `cpu=500m, memory=1Gi, pods=1` (zero amounts omitted; `{}` when all zero).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, v) in self.iter() {
            if !first {
                f.write_str(", ")?;
            }
            first = false;
            write!(f, "{k}={}", Unit::of(k).format(v))?;
        }
        if first {
            f.write_str("{}")?;
        }
        Ok(())
    }
}

impl Add<&Resources> for &Resources {
    type Output = Resources;
    fn add(self, rhs: &Resources) -> Resources {
        self.saturating_add(rhs)
    }
}

impl Sub<&Resources> for &Resources {
    type Output = Resources;
    fn sub(self, rhs: &Resources) -> Resources {
        self.saturating_sub(rhs)
    }
}

impl AddAssign<&Resources> for Resources {
    fn add_assign(&mut self, rhs: &Resources) {
        self.add_in_place(rhs);
    }
}

impl SubAssign<&Resources> for Resources {
    fn sub_assign(&mut self, rhs: &Resources) {
        self.sub_in_place(rhs);
    }
}

impl<'a> Sum<&'a Resources> for Resources {
    fn sum<I: Iterator<Item = &'a Resources>>(iter: I) -> Resources {
        let mut out = Resources::new();
        for r in iter {
            out += r;
        }
        out
    }
}

impl Serialize for Resources {
    /// Serializes as a ResourceList: a map of resource name to quantity string.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_quantities().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Resources {
    /// Deserializes a ResourceList; quantities may be strings or JSON numbers.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Unsigned(u64),
            Float(f64),
        }
        let raw = BTreeMap::<String, Raw>::deserialize(deserializer)?;
        let mut out = Resources::new();
        for (name, value) in raw {
            let text = match value {
                Raw::Text(s) => s,
                Raw::Unsigned(n) => n.to_string(),
                Raw::Float(x) => x.to_string(),
            };
            out.set_quantity(&name, &text)
                .map_err(|e| serde::de::Error::custom(format!("resource {name:?}: {e}")))?;
        }
        Ok(out)
    }
}

/// An init container's requests and whether it is a sidecar (`restartPolicy: Always`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitContainer {
    /// The container's resource requests.
    pub requests: Resources,
    /// True for a restartable init container (sidecar), which keeps running next to the
    /// regular containers.
    pub restartable: bool,
}

/// Pod-level resource requests (`spec.resources.requests`), which replace the aggregated
/// container requests for the resources they name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodLevelRequests {
    /// Pod-level CPU request in millicores, if set.
    pub cpu_millis: Option<u64>,
    /// Pod-level memory request in bytes, if set.
    pub memory_bytes: Option<u64>,
}

/// The resource-relevant parts of a pod spec, as plain data.
///
/// Callers that honour in-place resize should pass, per container, the larger of the spec
/// requests and the allocated (status) requests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodResourceSpec {
    /// Requests of the regular containers.
    pub containers: Vec<Resources>,
    /// Init containers, in declaration order (order matters for sidecars).
    pub init_containers: Vec<InitContainer>,
    /// `spec.overhead` (from the RuntimeClass).
    pub overhead: Resources,
    /// Pod-level requests.
    pub pod_level: PodLevelRequests,
}

impl PodResourceSpec {
    /// What the pod asks of a node: the larger of the regular phase (all containers plus all
    /// sidecars) and the peak init phase (each ordinary init container plus the sidecars
    /// started before it; each sidecar start plus earlier sidecars), then pod-level
    /// overrides, plus the overhead, plus one pod slot.
    pub fn requests(&self) -> Resources {
        let mut running: Resources = self.containers.iter().sum();
        let mut sidecars = Resources::new();
        let mut init_peak = Resources::new();
        for init in &self.init_containers {
            let phase = if init.restartable {
                running += &init.requests;
                sidecars += &init.requests;
                sidecars.clone()
            } else {
                init.requests.saturating_add(&sidecars)
            };
            init_peak.max_in_place(&phase);
        }
        running.max_in_place(&init_peak);
        if let Some(cpu) = self.pod_level.cpu_millis {
            running.cpu_millis = cpu;
        }
        if let Some(memory) = self.pod_level.memory_bytes {
            running.memory_bytes = memory;
        }
        running += &self.overhead;
        running.pods = running.pods.saturating_add(1);
        running
    }
}

#[cfg(test)]
mod tests;
