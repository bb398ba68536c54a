//! Filtering a claim's instance-type options for one more pod: the types' facts under a set
//! of requirements (remembered per NodePool), the last filterings (remembered, since many
//! claims ask the same), the filter itself and upstream's reasons when no type is left.

use std::rc::Rc;

use crate::instance_type::{InstanceType, MinValuesError, satisfies_min_values};
use crate::labels::HOSTNAME_LABEL;
use crate::requirements::Requirements;
use crate::resources::Resources;

use super::super::constraints::{HostPort, port_conflict};
use super::super::render;
use super::pool::Pool;
use super::room::{Room, no_extended};
use super::{Accepted, Claim, Options, Scheduler};

/// What an instance type offers under a set of requirements.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Facts {
    /// Its labels intersect the requirements.
    compatible: bool,
    /// It has an available offering compatible with the requirements.
    offering: bool,
}

/// Requirement sets (hostname removed) seen for one NodePool, with their types' [`Facts`].
pub(super) type FactsCache = Vec<(Requirements, Rc<[Facts]>)>;

/// How many requirement sets per NodePool have their [`Facts`] remembered.
const FACTS_PER_POOL: usize = 64;

/// Whether two requirement sets are equal once the hostname key is set aside (instance types
/// and offerings never define it, so it cannot change their [`Facts`]).
fn same_but_hostname(a: &Requirements, b: &Requirements) -> bool {
    let mut x = a.iter().filter(|r| r.key() != HOSTNAME_LABEL);
    let mut y = b.iter().filter(|r| r.key() != HOSTNAME_LABEL);
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(r), Some(q)) if r == q => {}
            _ => return false,
        }
    }
}

/// Which criteria at least one instance type met while filtering, for upstream's reasons.
#[derive(Default, Clone, Copy)]
struct FilterFlags {
    requirements: bool,
    fits: bool,
    offering: bool,
    requirements_and_fits: bool,
    requirements_and_offering: bool,
    fits_and_offering: bool,
}

impl FilterFlags {
    fn record(&mut self, compatible: bool, fits: bool, offering: bool) {
        self.requirements |= compatible;
        self.fits |= fits;
        self.offering |= offering;
        self.requirements_and_fits |= compatible && fits && !offering;
        self.requirements_and_offering |= compatible && offering && !fits;
        self.fits_and_offering |= fits && offering && !compatible;
    }

    /// Why no instance type was left, in upstream's words.
    fn reason(&self, min_values: Option<&MinValuesError>, requests: &Resources) -> String {
        if let Some(err) = min_values {
            return err.to_string();
        }
        let msg = match (self.requirements, self.fits, self.offering) {
            (false, false, false) => {
                "no instance type met the scheduling requirements or had enough resources or had a required offering"
            }
            (false, false, true) => {
                "no instance type met the scheduling requirements or had enough resources"
            }
            (false, true, false) => {
                "no instance type met the scheduling requirements or had a required offering"
            }
            (true, false, false) => {
                "no instance type had enough resources or had a required offering"
            }
            (false, true, true) => "no instance type met all requirements",
            (true, false, true) => {
                // One million cores: almost certainly `M` written for `m`.
                if requests.cpu_millis >= 1_000_000_000 {
                    return "no instance type has enough resources (CPU request >= 1 Million, m vs M typo?)".to_owned();
                }
                "no instance type has enough resources"
            }
            (true, true, false) => "no instance type has the required offering",
            (true, true, true) if self.requirements_and_fits => {
                "no instance type which met the scheduling requirements and had enough resources, had a required offering"
            }
            (true, true, true) if self.fits_and_offering => {
                "no instance type which had enough resources and the required offering met the scheduling requirements"
            }
            (true, true, true) if self.requirements_and_offering => {
                "no instance type which met the scheduling requirements and the required offering had the required resources"
            }
            (true, true, true) => "no instance type met the requirements/resources/offering tuple",
        };
        msg.to_owned()
    }
}

/// What filtering a claim's options kept ([`Scheduler::filter`]).
#[derive(Clone)]
struct Filtered {
    options: Vec<usize>,
    room: Room,
    flags: FilterFlags,
}

/// How many filterings [`FilterMemo`] remembers.
const FILTERINGS_REMEMBERED: usize = 16;

/// The last filterings of options for pods asking for no host port, by what decides them:
/// the pool, the type facts of the requirements (`None`: unchanged, every type compatible),
/// the claim's requests with the pod and the options filtered. Many claims ask the same (the
/// first pod of each kind on a new claim, the same narrowing of claims filled alike), so
/// the loop over the pool's instance types runs once for them. Facts are compared by
/// identity: the memo holds them, so an address is never reused while remembered.
#[derive(Default)]
pub(super) struct FilterMemo {
    entries: Vec<Remembered>,
    /// The entry to replace next once full.
    next: usize,
}

/// One filtering [`FilterMemo`] remembers: the question, then the answer.
struct Remembered {
    pool: usize,
    facts: Option<Rc<[Facts]>>,
    requests: Resources,
    options: Vec<usize>,
    filtered: Filtered,
}

impl FilterMemo {
    fn get(
        &self,
        pool: usize,
        facts: Option<&Rc<[Facts]>>,
        requests: &Resources,
        options: &[usize],
    ) -> Option<Filtered> {
        self.entries
            .iter()
            .find(|e| {
                e.pool == pool
                    && match (&e.facts, facts) {
                        (None, None) => true,
                        (Some(a), Some(b)) => Rc::ptr_eq(a, b),
                        _ => false,
                    }
                    && &e.requests == requests
                    && e.options.as_slice() == options
            })
            .map(|e| e.filtered.clone())
    }

    fn put(
        &mut self,
        pool: usize,
        facts: Option<Rc<[Facts]>>,
        requests: Resources,
        options: Vec<usize>,
        filtered: Filtered,
    ) {
        let entry = Remembered {
            pool,
            facts,
            requests,
            options,
            filtered,
        };
        if self.entries.len() < FILTERINGS_REMEMBERED {
            self.entries.push(entry);
        } else {
            self.entries[self.next] = entry;
            self.next = (self.next + 1) % FILTERINGS_REMEMBERED;
        }
    }
}

impl Scheduler<'_> {
    /// Keeps the claim's instance types that still work with pod `p` added under
    /// `requirements` (compatible labels, enough room including DaemonSet overhead, an
    /// available compatible offering, no host-port conflict), then checks minValues.
    pub(super) fn filter(
        &self,
        claim: &Claim,
        p: usize,
        narrowed: Option<Requirements>,
        detail: bool,
    ) -> Result<Accepted, Option<String>> {
        let pool = &self.pools[claim.pool];
        let input = &self.input.pods[p];
        let requests = &claim.requests + &input.requests;
        // Requirements the pod did not narrow leave label and offering compatibility as they
        // were when the options were last filtered: only room and ports need checking.
        let unchanged = narrowed.as_ref().is_none_or(|r| *r == claim.requirements);
        let requirements = narrowed.as_ref().unwrap_or(&claim.requirements);
        let ports = &input.host_ports;
        let claim_conflict = port_conflict(ports, &claim.ports).is_some();

        // The common case: a claim that already holds pods gets one that leaves its
        // requirements as they were and asks for no host port (so it conflicts with none).
        // The first option with room for every pod is proof enough; options before it cannot
        // hold the pods any more (requests only grow) and go, the rest are left unchecked.
        // Every pod added since the last full filter only took room, so the room shrinks by
        // the pod's requests at most.
        if unchanged && ports.is_empty() && !claim.pods.is_empty() && !requirements.has_min_values()
        {
            let plain = no_extended(&requests);
            let first_fit = claim
                .options
                .iter()
                .position(|&t| pool.fits_plain(t, &requests, plain));
            if let Some(first) = first_fit {
                let asked = &input.requests;
                let room = Room {
                    cpu_millis: claim.room.cpu_millis.saturating_sub(asked.cpu_millis),
                    memory_bytes: claim.room.memory_bytes.saturating_sub(asked.memory_bytes),
                    pods: claim.room.pods.saturating_sub(asked.pods),
                };
                return Ok(Accepted {
                    requirements: None,
                    options: Options::DropFirst(first),
                    requests,
                    room,
                    min_values_relaxed: false,
                });
            }
        }

        let facts = (!unchanged).then(|| self.type_facts(claim.pool, requirements));
        let remembered = ports
            .is_empty()
            .then(|| {
                self.filtered
                    .borrow()
                    .get(claim.pool, facts.as_ref(), &requests, &claim.options)
            })
            .flatten();
        let Filtered {
            mut options,
            room,
            flags,
        } = match remembered {
            Some(filtered) => filtered,
            None => {
                let filtered = filter_options(
                    pool,
                    &claim.options,
                    facts.as_deref(),
                    &requests,
                    ports,
                    claim_conflict,
                );
                if ports.is_empty() {
                    self.filtered.borrow_mut().put(
                        claim.pool,
                        facts,
                        requests.clone(),
                        claim.options.clone(),
                        filtered.clone(),
                    );
                }
                filtered
            }
        };
        let mut min_values = None;
        let mut relaxed = None;
        if requirements.has_min_values() && !options.is_empty() {
            let types: Vec<&InstanceType> =
                options.iter().map(|&t| pool.instance_type(t)).collect();
            if let Err(err) = satisfies_min_values(&types, requirements) {
                if self.best_effort_min_values {
                    relaxed = Some(relax_min_values(requirements, &err));
                } else {
                    min_values = Some(err);
                    options.clear();
                }
            }
        }
        if options.is_empty() {
            return Err(detail.then(|| {
                let cumulative = &pool.overhead + &input.requests;
                format!(
                    "no instance type satisfied resources {} and requirements {} ({})",
                    render::resources(&cumulative),
                    render::requirements(requirements),
                    flags.reason(min_values.as_ref(), &requests)
                )
            }));
        }
        let min_values_relaxed = relaxed.is_some();
        Ok(Accepted {
            requirements: relaxed.or(if unchanged { None } else { narrowed }),
            options: Options::Filtered(options),
            requests,
            room,
            min_values_relaxed,
        })
    }

    /// The [`Facts`] of pool `pool`'s candidate types under `requirements` (indexed by type),
    /// remembered per requirement set.
    fn type_facts(&self, pool: usize, requirements: &Requirements) -> Rc<[Facts]> {
        let mut cache = self.facts.borrow_mut();
        if let Some((_, facts)) = cache[pool]
            .iter()
            .find(|(seen, _)| same_but_hostname(seen, requirements))
        {
            return facts.clone();
        }
        let p = &self.pools[pool];
        let mut facts = vec![Facts::default(); p.input.instance_types.len()];
        let filter = p.offerings.filter(requirements, self.policy);
        let intersecting = p.classes.intersecting(requirements);
        for &t in &p.candidates {
            let it = p.instance_type(t);
            facts[t] = Facts {
                compatible: intersecting[t],
                offering: p
                    .offerings
                    .available_compatible(t, it, filter, requirements, self.policy)
                    .next()
                    .is_some(),
            };
        }
        let facts: Rc<[Facts]> = facts.into();
        if cache[pool].len() < FACTS_PER_POOL {
            let mut key = requirements.clone();
            key.remove(HOSTNAME_LABEL);
            cache[pool].push((key, facts.clone()));
        }
        facts
    }
}

/// Keeps the `options` of a claim in `pool` that fit `requests` (the claim's with the pod's),
/// are compatible with the requirements and have a compatible available offering (`facts`;
/// `None` when the requirements did not change: all of them), and whose DaemonSets' ports do
/// not clash with the pod's (none when `claim_conflict`: the pod clashes with the claim).
fn filter_options(
    pool: &Pool<'_>,
    options: &[usize],
    facts: Option<&[Facts]>,
    requests: &Resources,
    ports: &[HostPort],
    claim_conflict: bool,
) -> Filtered {
    let mut flags = FilterFlags::default();
    let mut room = Room::NONE;
    let mut kept = Vec::with_capacity(options.len());
    for &t in options {
        if claim_conflict
            || (!ports.is_empty() && port_conflict(ports, &pool.type_ports[t]).is_some())
        {
            continue;
        }
        let fits = pool.fits(t, requests);
        let Facts {
            compatible,
            offering,
        } = facts.map_or(
            Facts {
                compatible: true,
                offering: true,
            },
            |f| f[t],
        );
        flags.record(compatible, fits, offering);
        if compatible && fits && offering {
            kept.push(t);
            pool.widen(&mut room, t, requests);
        }
    }
    Filtered {
        options: kept,
        room,
        flags,
    }
}

/// `requirements` with each unmet key's minValues lowered to the number of values the types
/// offer (removed when they offer none), as upstream's BestEffort policy does.
pub(super) fn relax_min_values(
    requirements: &Requirements,
    unmet: &MinValuesError,
) -> Requirements {
    let mut out = requirements.clone();
    for (key, &(found, _)) in &unmet.unmet {
        if let Some(r) = out.remove(key) {
            out.add(r.with_min_values((found > 0).then_some(found)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_filtering_is_found_only_for_the_same_question() {
        let filtered = |options: Vec<usize>| Filtered {
            options,
            room: Room::NONE,
            flags: FilterFlags::default(),
        };
        let facts: Rc<[Facts]> = vec![
            Facts {
                compatible: true,
                offering: true
            };
            3
        ]
        .into();
        let same_facts_elsewhere: Rc<[Facts]> = facts.to_vec().into();
        let one_cpu = Resources::new().with("cpu", 1000);
        let mut memo = FilterMemo::default();
        memo.put(
            0,
            Some(facts.clone()),
            one_cpu.clone(),
            vec![0, 1, 2],
            filtered(vec![1, 2]),
        );
        memo.put(0, None, one_cpu.clone(), vec![0, 1, 2], filtered(vec![2]));
        let kept = |m: &FilterMemo, pool, f: Option<&Rc<[Facts]>>, r: &Resources, o: &[usize]| {
            m.get(pool, f, r, o).map(|x| x.options)
        };
        assert_eq!(
            kept(&memo, 0, Some(&facts), &one_cpu, &[0, 1, 2]),
            Some(vec![1, 2])
        );
        assert_eq!(kept(&memo, 0, None, &one_cpu, &[0, 1, 2]), Some(vec![2]));
        // Equal facts from another requirement set are another question: compared by identity.
        assert_eq!(
            kept(&memo, 0, Some(&same_facts_elsewhere), &one_cpu, &[0, 1, 2]),
            None
        );
        assert_eq!(kept(&memo, 1, Some(&facts), &one_cpu, &[0, 1, 2]), None);
        assert_eq!(
            kept(
                &memo,
                0,
                Some(&facts),
                &Resources::new().with("cpu", 1001),
                &[0, 1, 2]
            ),
            None
        );
        assert_eq!(kept(&memo, 0, Some(&facts), &one_cpu, &[0, 1]), None);
        // Once full, the oldest entry goes first.
        for i in 0..FILTERINGS_REMEMBERED - 1 {
            memo.put(2, None, one_cpu.clone(), vec![i], filtered(vec![i]));
        }
        assert_eq!(kept(&memo, 0, Some(&facts), &one_cpu, &[0, 1, 2]), None);
        assert_eq!(kept(&memo, 0, None, &one_cpu, &[0, 1, 2]), Some(vec![2]));
    }
}
