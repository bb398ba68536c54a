//! The claims opened during a pass, in the order a pod tries them, with the subsets of that
//! order a constrained pod may walk instead of all of it.
//!
//! Upstream tries every open claim, fewest pods first, for every pod. When most claims are
//! ruled out for a pod by topology (one `app=nginx` pod per hostname, a zone without the
//! pod's affinity target), that walk is what makes a pass quadratic in its claims. The
//! subsets here only ever leave out claims that [`Topology::rejects`] would rule out, so
//! walking a subset finds the same first claim as walking everything.

use std::collections::{BTreeSet, HashMap};
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
    debug_assert!(pods <= u32::MAX as usize && c <= u32::MAX as usize, "a pass holds fewer than 2^32 pods and claims");
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
    order: BTreeSet<Key>,
    /// Each claim as last recorded, by claim index.
    claims: Vec<Recorded>,
    /// Per hostname rule some pod has: the claims the rule still admits. A claim never
    /// comes back once left out: counts only grow during a pass.
    by_host_rule: FxMap<HostRule, BTreeSet<Key>>,
    /// Per topology key some pod has a non-hostname rule on: the claims by the domain they
    /// are pinned to ([`UNPINNED`] for none).
    by_pin: FxMap<usize, FxMap<u32, BTreeSet<Key>>>,
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
            let old_pins = (recorded.pins != pins).then(|| std::mem::replace(&mut recorded.pins, pins.to_vec()));
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
                .map(BTreeSet::len)
                .sum();
            if size < best.1 {
                best = (Walk::Pinned(key_index, admitted), size);
            }
        }
        best.0
    }

    /// The claims of `walk`, in try order.
    pub(super) fn claims(&self, walk: &Walk) -> impl Iterator<Item = usize> + '_ {
        let sets: Vec<&BTreeSet<Key>> = match walk {
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
    fn host_rule(&mut self, rule: HostRule, topology: &Topology<'_>) -> &BTreeSet<Key> {
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
    fn pinned(&mut self, key_index: usize) -> &FxMap<u32, BTreeSet<Key>> {
        let claims = &self.claims;
        self.by_pin.entry(key_index).or_insert_with(|| {
            let mut buckets: FxMap<u32, BTreeSet<Key>> = FxMap::default();
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
fn merged(sets: Vec<&BTreeSet<Key>>) -> impl Iterator<Item = Key> + '_ {
    let mut heads: Vec<_> = sets.into_iter().map(|set| set.iter().peekable()).collect();
    std::iter::from_fn(move || {
        let next = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, head)| head.peek().map(|&&key| (key, i)))
            .min()?;
        heads[next.1].next();
        Some(next.0)
    })
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
        let keys = |pairs: &[(usize, usize)]| pairs.iter().map(|&(pods, c)| key_of(pods, c)).collect::<Vec<Key>>();
        let a: BTreeSet<Key> = keys(&[(1, 0), (1, 4), (3, 2)]).into_iter().collect();
        let b: BTreeSet<Key> = keys(&[(1, 1), (2, 3)]).into_iter().collect();
        let empty = BTreeSet::new();
        let merged: Vec<Key> = merged(vec![&a, &empty, &b]).collect();
        assert_eq!(merged, keys(&[(1, 0), (1, 1), (1, 4), (2, 3), (3, 2)]));
        assert_eq!(merged.iter().map(|&k| claim_of(k)).collect::<Vec<_>>(), [0, 1, 4, 3, 2]);
        // More pods come later, whatever the index.
        assert!(key_of(1, 1_000_000) < key_of(2, 0));
    }

    #[test]
    fn a_key_numbered_after_pinning_reads_unpinned() {
        assert_eq!(pin_of(&[UNPINNED, 3], 1), 3);
        assert_eq!(pin_of(&[UNPINNED, 3], 2), UNPINNED);
    }
}
