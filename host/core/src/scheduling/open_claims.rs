//! The claims opened during a pass, in the order a pod tries them, with the subsets of that
//! order a constrained pod may walk instead of all of it.
//!
//! Upstream tries every open claim, fewest pods first, for every pod. When most claims are
//! ruled out for a pod by topology (one `app=nginx` pod per hostname, a zone without the
//! pod's affinity target), that walk is what makes a pass quadratic in its claims. The
//! subsets here only ever leave out claims that [`Topology::rejects`] would rule out, so
//! walking a subset finds the same first claim as walking everything.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::hash::FxHasher;
use crate::requirements::Requirements;

use super::topology::{HostRule, Topology, UNPINNED};

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A claim's place in the try order: the pods on it in the high half, the claim index in
/// the low half, so that keys order as (pods, index) pairs do and compare in one step.
type Key = u64;

/// The key of claim `c` holding `pods` pods.
fn key_of(pods: usize, c: usize) -> Key {
    debug_assert!(
        pods <= u32::MAX as usize && c <= u32::MAX as usize,
        "a pass holds fewer than 2^32 pods and claims"
    );
    ((pods as u64) << 32) | c as u64
}

/// The claim index of a key.
fn claim_of(key: Key) -> usize {
    (key & u64::from(u32::MAX)) as usize
}

/// What is known of a claim: its place in the order, its hostname's number and the domains
/// it is pinned to per key ([`Topology::pin`]).
struct Recorded {
    key: Key,
    slot: u32,
    pins: Vec<u32>,
}

/// The open claims of a pass and their indexes.
#[derive(Default)]
pub(super) struct OpenClaims {
    /// Every claim, in try order.
    order: TryOrder,
    /// Each claim as last recorded, by claim index.
    claims: Vec<Recorded>,
    /// Per hostname rule some pod has: the claims the rule still admits. A claim never
    /// comes back once left out: counts only grow during a pass.
    by_host_rule: FxMap<HostRule, TryOrder>,
    /// Per topology key some pod has a non-hostname rule on: the claims by the domain they
    /// are pinned to ([`UNPINNED`] for none).
    by_pin: FxMap<usize, FxMap<u32, TryOrder>>,
}

/// Which claims a pod walks ([`OpenClaims::walk`]).
pub(super) enum Walk {
    /// Every claim.
    All,
    /// The claims a hostname rule still admits.
    Host(HostRule),
    /// The claims of a key pinned to an admitted domain, or to none.
    Pinned(usize, Vec<u32>),
}

impl OpenClaims {
    /// Records claim `c` (new, or changed by a pod placed on it) with `pods` pods, hostname
    /// number `slot` and pins `pins`, after the topology counted its new pod.
    pub(super) fn record(
        &mut self,
        c: usize,
        pods: usize,
        slot: u32,
        pins: &[u32],
        topology: &Topology<'_>,
    ) {
        let key = key_of(pods, c);
        let old = if c < self.claims.len() {
            let recorded = &mut self.claims[c];
            let old_key = std::mem::replace(&mut recorded.key, key);
            recorded.slot = slot;
            // The old pins matter only where they differ from the new ones.
            let old_pins = (recorded.pins != pins)
                .then(|| std::mem::replace(&mut recorded.pins, pins.to_vec()));
            self.order.remove(&old_key);
            Some((old_key, old_pins))
        } else {
            debug_assert_eq!(
                c,
                self.claims.len(),
                "claims are recorded in the order they open"
            );
            self.claims.push(Recorded {
                key,
                slot,
                pins: pins.to_vec(),
            });
            None
        };
        self.order.insert(key);
        for (&rule, open) in &mut self.by_host_rule {
            let present = old.as_ref().is_none_or(|(old_key, _)| open.remove(old_key));
            if present && topology.host_admits(rule, slot) {
                open.insert(key);
            }
        }
        for (&key_index, buckets) in &mut self.by_pin {
            if let Some((old_key, old_pins)) = &old {
                let bucket = pin_of(old_pins.as_deref().unwrap_or(pins), key_index);
                if let Some(set) = buckets.get_mut(&bucket) {
                    set.remove(old_key);
                }
            }
            buckets
                .entry(pin_of(pins, key_index))
                .or_default()
                .insert(key);
        }
    }

    /// Which claims pod `p` should try: all of them, or the smallest subset its topology
    /// rules allow (every claim left out is one [`Topology::rejects`] rules out for it).
    /// `strict` is the pod's required node constraints. Walk it with [`claims`](Self::claims).
    pub(super) fn walk(
        &mut self,
        p: usize,
        strict: &Requirements,
        topology: &Topology<'_>,
    ) -> Walk {
        #[cfg(test)]
        if tests::WALK_EVERYTHING.get() {
            return Walk::All;
        }
        let mut best = (Walk::All, self.order.len());
        for &rule in topology.host_rules(p) {
            let size = self.host_rule(rule, topology).len();
            if size < best.1 {
                best = (Walk::Host(rule), size);
            }
        }
        let mut keys: Vec<usize> = topology.pin_keys(p).collect();
        keys.sort_unstable();
        keys.dedup();
        for key_index in keys {
            let buckets = self.pinned(key_index);
            let admitted: Vec<u32> = (0..topology.domains_numbered(key_index) as u32)
                .filter(|&slot| {
                    buckets.contains_key(&slot) && topology.admits_pin(p, key_index, slot, strict)
                })
                .chain([UNPINNED])
                .collect();
            let size = admitted
                .iter()
                .filter_map(|slot| buckets.get(slot))
                .map(TryOrder::len)
                .sum();
            if size < best.1 {
                best = (Walk::Pinned(key_index, admitted), size);
            }
        }
        best.0
    }

    /// The claims of `walk`, in try order.
    pub(super) fn claims(&self, walk: &Walk) -> impl Iterator<Item = usize> + '_ {
        let sets: Vec<&TryOrder> = match walk {
            Walk::All => vec![&self.order],
            Walk::Host(rule) => vec![&self.by_host_rule[rule]],
            Walk::Pinned(key_index, admitted) => {
                let buckets = &self.by_pin[key_index];
                admitted
                    .iter()
                    .filter_map(|slot| buckets.get(slot))
                    .collect()
            }
        };
        merged(sets).map(claim_of)
    }

    /// The index of hostname rule `rule`, built from the claims so far on first use.
    fn host_rule(&mut self, rule: HostRule, topology: &Topology<'_>) -> &TryOrder {
        let claims = &self.claims;
        self.by_host_rule.entry(rule).or_insert_with(|| {
            claims
                .iter()
                .filter(|claim| topology.host_admits(rule, claim.slot))
                .map(|claim| claim.key)
                .collect()
        })
    }

    /// The claims by pinned domain of the key numbered `key_index`, built on first use.
    fn pinned(&mut self, key_index: usize) -> &FxMap<u32, TryOrder> {
        let claims = &self.claims;
        self.by_pin.entry(key_index).or_insert_with(|| {
            let mut buckets: FxMap<u32, TryOrder> = FxMap::default();
            for claim in claims {
                buckets
                    .entry(pin_of(&claim.pins, key_index))
                    .or_default()
                    .insert(claim.key);
            }
            buckets
        })
    }
}

/// The domain a claim with `pins` is pinned to on the key numbered `key_index` (as
/// [`Topology::rejects`] reads it: a key numbered after the claim was pinned is unpinned).
fn pin_of(pins: &[u32], key_index: usize) -> u32 {
    pins.get(key_index).copied().unwrap_or(UNPINNED)
}

/// The keys of disjoint ordered sets, merged in order.
fn merged(sets: Vec<&TryOrder>) -> impl Iterator<Item = Key> + '_ {
    let mut heads: Vec<_> = sets.into_iter().map(|set| set.iter().peekable()).collect();
    std::iter::from_fn(move || {
        let next = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, head)| head.peek().map(|&key| (key, i)))
            .min()?;
        heads[next.1].next();
        Some(next.0)
    })
}

/// A set of claim keys, iterated in key order: one bucket per pod count, each holding its
/// claim indexes sorted. Recording a pod moves a claim from one bucket to the next, which
/// costs two binary searches and two short moves where a balanced tree would search and
/// rebalance twice (this is the hottest update of a pass: every set a claim is in, for
/// every pod placed).
#[derive(Default)]
struct TryOrder {
    /// Claim indexes by pod count, each bucket sorted.
    buckets: Vec<Vec<u32>>,
    /// No bucket below this one holds a claim.
    lowest: usize,
    /// How many keys the set holds.
    len: usize,
}

impl TryOrder {
    /// Splits a key into its bucket (pod count) and claim index.
    fn split(key: Key) -> (usize, u32) {
        ((key >> 32) as usize, claim_of(key) as u32)
    }

    /// Adds `key`; returns whether it was new.
    fn insert(&mut self, key: Key) -> bool {
        let (pods, c) = Self::split(key);
        if pods >= self.buckets.len() {
            self.buckets.resize_with(pods + 1, Vec::new);
        }
        let bucket = &mut self.buckets[pods];
        match bucket.binary_search(&c) {
            Ok(_) => false,
            Err(at) => {
                bucket.insert(at, c);
                self.len += 1;
                self.lowest = self.lowest.min(pods);
                true
            }
        }
    }

    /// Takes `key` out; returns whether it was there.
    fn remove(&mut self, key: &Key) -> bool {
        let (pods, c) = Self::split(*key);
        let Some(bucket) = self.buckets.get_mut(pods) else {
            return false;
        };
        let Ok(at) = bucket.binary_search(&c) else {
            return false;
        };
        bucket.remove(at);
        self.len -= 1;
        while self.buckets.get(self.lowest).is_some_and(Vec::is_empty) {
            self.lowest += 1;
        }
        true
    }

    /// How many keys the set holds.
    fn len(&self) -> usize {
        self.len
    }

    /// The keys, in order.
    fn iter(&self) -> impl Iterator<Item = Key> + '_ {
        let lowest = self.lowest.min(self.buckets.len());
        self.buckets[lowest..]
            .iter()
            .zip(lowest..)
            .flat_map(|(bucket, pods)| bucket.iter().map(move |&c| key_of(pods, c as usize)))
    }
}

impl FromIterator<Key> for TryOrder {
    fn from_iter<I: IntoIterator<Item = Key>>(keys: I) -> Self {
        let mut set = TryOrder::default();
        for key in keys {
            set.insert(key);
        }
        set
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::scheduling::{
        PreferencePolicy, SchedulingContext, SchedulingInput, SchedulingResult, benchmark_input,
        schedule_with_context,
    };

    thread_local! {
        /// Makes every pod walk every claim, as upstream does (the reference the indexes
        /// must agree with).
        pub(in crate::scheduling) static WALK_EVERYTHING: Cell<bool> = const { Cell::new(false) };
    }

    fn both_ways(
        input: &SchedulingInput,
        policy: PreferencePolicy,
    ) -> (SchedulingResult, SchedulingResult) {
        let context = SchedulingContext {
            preference_policy: policy,
            ..Default::default()
        };
        let indexed = schedule_with_context(input, &context, None);
        WALK_EVERYTHING.set(true);
        let everything = schedule_with_context(input, &context, None);
        WALK_EVERYTHING.set(false);
        (indexed, everything)
    }

    #[test]
    fn walking_the_indexes_decides_exactly_as_walking_every_claim() {
        // Upstream's benchmark shape: hostname anti-affinity, hostname and zonal spread,
        // zonal self-affinity and generic pods, so every kind of walk is taken.
        for (pods, types) in [(200, 20), (900, 60)] {
            let input = benchmark_input(pods, types);
            for policy in [PreferencePolicy::Respect, PreferencePolicy::Ignore] {
                let (indexed, everything) = both_ways(&input, policy);
                assert!(
                    indexed.new_claims.len() > 10,
                    "{pods} pods should need many claims"
                );
                assert_eq!(indexed, everything, "{pods} pods, {policy:?}");
            }
        }
    }

    #[test]
    fn merged_sets_come_out_in_order() {
        let keys = |pairs: &[(usize, usize)]| {
            pairs
                .iter()
                .map(|&(pods, c)| key_of(pods, c))
                .collect::<Vec<Key>>()
        };
        let a: TryOrder = keys(&[(1, 0), (1, 4), (3, 2)]).into_iter().collect();
        let b: TryOrder = keys(&[(1, 1), (2, 3)]).into_iter().collect();
        let empty = TryOrder::default();
        let merged: Vec<Key> = merged(vec![&a, &empty, &b]).collect();
        assert_eq!(merged, keys(&[(1, 0), (1, 1), (1, 4), (2, 3), (3, 2)]));
        assert_eq!(
            merged.iter().map(|&k| claim_of(k)).collect::<Vec<_>>(),
            [0, 1, 4, 3, 2]
        );
        // More pods come later, whatever the index.
        assert!(key_of(1, 1_000_000) < key_of(2, 0));
    }

    #[test]
    fn the_try_order_agrees_with_an_ordered_set() {
        // Random inserts and removes, as recording moves claims up one pod at a time.
        let mut reference = std::collections::BTreeSet::new();
        let mut set = TryOrder::default();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % n
        };
        for step in 0..20_000 {
            let key = key_of(next(40) as usize, next(300) as usize);
            if next(3) == 0 {
                assert_eq!(
                    set.remove(&key),
                    reference.remove(&key),
                    "remove at step {step}"
                );
            } else {
                assert_eq!(
                    set.insert(key),
                    reference.insert(key),
                    "insert at step {step}"
                );
            }
            assert_eq!(set.len(), reference.len());
            if step % 500 == 0 {
                assert!(
                    set.iter().eq(reference.iter().copied()),
                    "order at step {step}"
                );
            }
        }
        for key in reference.clone() {
            assert!(set.remove(&key));
        }
        assert_eq!(set.len(), 0);
        assert_eq!(set.iter().count(), 0);
        assert!(set.insert(key_of(5, 1)));
        assert_eq!(set.iter().collect::<Vec<_>>(), [key_of(5, 1)]);
    }

    #[test]
    fn a_key_numbered_after_pinning_reads_unpinned() {
        assert_eq!(pin_of(&[UNPINNED, 3], 1), 3);
        assert_eq!(pin_of(&[UNPINNED, 3], 2), UNPINNED);
    }
}
