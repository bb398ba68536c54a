//! Room arithmetic: the most a claim's remaining options have free (to skip a full claim
//! without filtering its types), what a type has free past its DaemonSet overhead, and
//! whether a sum of requests fits without building the sum.

use crate::resources::Resources;

/// The most CPU, memory and pods any of a claim's remaining instance types has free (after
/// its DaemonSet overhead and the claim's pods): a pod asking more of one of them fits no
/// option, so the claim is skipped without filtering its types — exactly what the filter
/// would conclude, only cheaper (a full claim is otherwise tried by every later pod).
#[derive(Clone, Copy)]
pub(super) struct Room {
    pub(super) cpu_millis: u64,
    pub(super) memory_bytes: u64,
    pub(super) pods: u64,
}

impl Room {
    /// Before any pod: nothing is known, nothing is skipped.
    pub(super) const UNKNOWN: Room = Room {
        cpu_millis: u64::MAX,
        memory_bytes: u64::MAX,
        pods: u64::MAX,
    };

    /// No option yet: room for nothing.
    pub(super) const NONE: Room = Room {
        cpu_millis: 0,
        memory_bytes: 0,
        pods: 0,
    };

    /// Counts in an option with `allocatable` and DaemonSet `overhead` holding `requests`.
    pub(super) fn widen(
        &mut self,
        allocatable: &Resources,
        overhead: &Resources,
        requests: &Resources,
    ) {
        let free = |allocatable: u64, overhead: u64, asked: u64| {
            allocatable.saturating_sub(overhead.saturating_add(asked))
        };
        self.cpu_millis = self.cpu_millis.max(free(
            allocatable.cpu_millis,
            overhead.cpu_millis,
            requests.cpu_millis,
        ));
        self.memory_bytes = self.memory_bytes.max(free(
            allocatable.memory_bytes,
            overhead.memory_bytes,
            requests.memory_bytes,
        ));
        self.pods = self
            .pods
            .max(free(allocatable.pods, overhead.pods, requests.pods));
    }

    /// Counts in an option with `free` room past its overhead holding `requests`.
    pub(super) fn widen_free(&mut self, free: &Free, requests: &Resources) {
        self.cpu_millis = self
            .cpu_millis
            .max(free.cpu_millis.saturating_sub(requests.cpu_millis));
        self.memory_bytes = self
            .memory_bytes
            .max(free.memory_bytes.saturating_sub(requests.memory_bytes));
        self.pods = self.pods.max(free.pods.saturating_sub(requests.pods));
    }

    /// Whether some option may still hold a pod asking `requests` (false only when none can).
    pub(super) fn admits(&self, requests: &Resources) -> bool {
        requests.cpu_millis <= self.cpu_millis
            && requests.memory_bytes <= self.memory_bytes
            && requests.pods <= self.pods
    }
}

/// What an instance type has free for pods once its DaemonSet overhead is reserved, so
/// that the usual check (a claim's requests, none of them extended) is four comparisons.
#[derive(Clone, Copy)]
pub(super) struct Free {
    cpu_millis: u64,
    memory_bytes: u64,
    ephemeral_storage_bytes: u64,
    pods: u64,
}

impl Free {
    /// `None` where the shortcut would not say what [`fits_sum`] says: the overhead asks
    /// for an extended resource, does not fit on its own, or an amount is unbounded.
    pub(super) fn of(allocatable: &Resources, overhead: &Resources) -> Option<Free> {
        let free = |allocatable: u64, overhead: u64| {
            (allocatable != u64::MAX)
                .then(|| allocatable.checked_sub(overhead))
                .flatten()
        };
        if !no_extended(overhead) {
            return None;
        }
        Some(Free {
            cpu_millis: free(allocatable.cpu_millis, overhead.cpu_millis)?,
            memory_bytes: free(allocatable.memory_bytes, overhead.memory_bytes)?,
            ephemeral_storage_bytes: free(
                allocatable.ephemeral_storage_bytes,
                overhead.ephemeral_storage_bytes,
            )?,
            pods: free(allocatable.pods, overhead.pods)?,
        })
    }

    /// Whether `requests` (with no extended resource) fit.
    pub(super) fn holds(&self, requests: &Resources) -> bool {
        requests.cpu_millis <= self.cpu_millis
            && requests.memory_bytes <= self.memory_bytes
            && requests.ephemeral_storage_bytes <= self.ephemeral_storage_bytes
            && requests.pods <= self.pods
    }
}

/// An existing node's CPU, memory, ephemeral storage and pod slots, available and reserved,
/// side by side: the part of [`fits_sum`] that rules most nodes out, read from a small array
/// instead of each node's full state (a consolidation simulation tries every pod of a
/// candidate against every other node).
#[derive(Clone, Copy)]
pub(super) struct NodeRoom {
    available: [u64; 4],
    reserved: [u64; 4],
}

impl NodeRoom {
    fn amounts(r: &Resources) -> [u64; 4] {
        [
            r.cpu_millis,
            r.memory_bytes,
            r.ephemeral_storage_bytes,
            r.pods,
        ]
    }

    /// A node with `available` room and `reserved` already taken from it.
    pub(super) fn new(available: &Resources, reserved: &Resources) -> NodeRoom {
        NodeRoom {
            available: Self::amounts(available),
            reserved: Self::amounts(reserved),
        }
    }

    /// Takes `requests` (added to the reserved amounts, as the node's reserved resources).
    pub(super) fn take(&mut self, requests: &Resources) {
        for (reserved, asked) in self.reserved.iter_mut().zip(Self::amounts(requests)) {
            *reserved = reserved.saturating_add(asked);
        }
    }

    /// Whether `requests` may fit: `false` exactly when [`fits_sum`] of the reserved amounts
    /// and `requests` fails on CPU, memory, ephemeral storage or pods (extended resources are
    /// left to it).
    pub(super) fn may_fit(&self, requests: &Resources) -> bool {
        self.reserved
            .iter()
            .zip(Self::amounts(requests))
            .zip(self.available)
            .all(|((reserved, asked), available)| reserved.saturating_add(asked) <= available)
    }
}

/// Whether `resources` asks for no extended resource.
pub(super) fn no_extended(resources: &Resources) -> bool {
    resources.extended().all(|(_, amount)| amount == 0)
}

/// Whether the sum of `parts` fits `available`, by the rule of [`Resources::fits`] (every
/// requested amount at most the available one; resources nobody asks for are not checked),
/// without building the sum.
pub(in crate::scheduling) fn fits_sum(parts: &[&Resources], available: &Resources) -> bool {
    let (mut cpu, mut memory, mut storage, mut pods) = (0u64, 0u64, 0u64, 0u64);
    for r in parts {
        cpu = cpu.saturating_add(r.cpu_millis);
        memory = memory.saturating_add(r.memory_bytes);
        storage = storage.saturating_add(r.ephemeral_storage_bytes);
        pods = pods.saturating_add(r.pods);
    }
    let total = |get: &dyn Fn(&Resources) -> u64| {
        parts.iter().fold(0u64, |sum, r| sum.saturating_add(get(r)))
    };
    cpu <= available.cpu_millis
        && memory <= available.memory_bytes
        && storage <= available.ephemeral_storage_bytes
        && pods <= available.pods
        && parts.iter().all(|part| {
            part.extended().all(|(name, _)| {
                let asked = total(&|r| r.get(name));
                asked == 0 || asked <= available.get(name)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_the_most_any_option_has_free() {
        let small = Resources::new()
            .with("cpu", 2000)
            .with("memory", 4 << 30)
            .with("pods", 10);
        let large = Resources::new()
            .with("cpu", 8000)
            .with("memory", 8 << 30)
            .with("pods", 10);
        let overhead = Resources::new().with("cpu", 500);
        let held = Resources::new()
            .with("cpu", 1000)
            .with("memory", 1 << 30)
            .with("pods", 2);
        let mut room = Room::NONE;
        room.widen(&small, &overhead, &held);
        room.widen(&large, &overhead, &held);
        // 6,500m CPU free on the large type, 3 GiB on the small one: each limit from its own type.
        assert!(
            room.admits(
                &Resources::new()
                    .with("cpu", 6500)
                    .with("memory", 3 << 30)
                    .with("pods", 1)
            )
        );
        assert!(!room.admits(&Resources::new().with("cpu", 6501)));
        assert!(!room.admits(&Resources::new().with("memory", (7 << 30) + 1)));
        assert!(!room.admits(&Resources::new().with("pods", 9)));
        assert!(Room::UNKNOWN.admits(&Resources::new().with("cpu", u64::MAX)));
    }

    #[test]
    fn a_node_room_rules_out_exactly_what_the_full_sum_does_on_its_four_resources() {
        let amounts = [0, 1, 999, 1000, 1001, u64::MAX - 1, u64::MAX];
        let resources = |a: u64, b: u64| {
            Resources::new()
                .with("cpu", a)
                .with("memory", b)
                .with("ephemeral-storage", a)
                .with("pods", b)
        };
        let mut checked = 0;
        for &a in &amounts {
            for &b in &amounts {
                let available = resources(a, b);
                for &r in &amounts {
                    let reserved = resources(r, 1000);
                    let room = NodeRoom::new(&available, &reserved);
                    for &q in &amounts {
                        let requests = resources(1000, q);
                        assert_eq!(
                            room.may_fit(&requests),
                            fits_sum(&[&reserved, &requests], &available),
                            "available {a}/{b}, reserved {r}, requests {q}"
                        );
                        // Taking a pod keeps it in step with the reserved sum.
                        let mut taken = room;
                        taken.take(&requests);
                        let mut sum = reserved.clone();
                        sum += &requests;
                        let more = resources(1, 1);
                        assert_eq!(taken.may_fit(&more), fits_sum(&[&sum, &more], &available));
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 7 * 7 * 7 * 7);
        // An extended resource is left to the full sum.
        let gpu = Resources::new().with("nvidia.com/gpu", 1);
        let none = Resources::new();
        assert!(NodeRoom::new(&none, &none).may_fit(&gpu));
        assert!(!fits_sum(&[&none, &gpu], &none));
    }

    #[test]
    fn the_free_room_shortcut_decides_as_the_full_sum() {
        let allocatable = Resources::new()
            .with("cpu", 4000)
            .with("memory", 8 << 30)
            .with("pods", 20)
            .with("nvidia.com/gpu", 1);
        let overheads = [
            Resources::new(),
            Resources::new().with("cpu", 500).with("pods", 2),
            // More than the type has: nothing fits.
            Resources::new().with("cpu", 5000),
            // An extended resource in the overhead: the shortcut steps aside.
            Resources::new().with("nvidia.com/gpu", 1),
        ];
        let requests = [
            Resources::new(),
            Resources::new()
                .with("cpu", 3500)
                .with("memory", 8 << 30)
                .with("pods", 18),
            Resources::new().with("cpu", 3501),
            Resources::new().with("ephemeral-storage", 1),
            Resources::new().with("nvidia.com/gpu", 1),
            Resources::new().with("nvidia.com/gpu", 2),
        ];
        assert!(Free::of(&allocatable, &overheads[2]).is_none());
        assert!(Free::of(&allocatable, &overheads[3]).is_none());
        for overhead in &overheads {
            for asked in &requests {
                let full = fits_sum(&[asked, overhead], &allocatable);
                let free = Free::of(&allocatable, overhead);
                if let Some(free) = free.filter(|_| no_extended(asked)) {
                    assert_eq!(free.holds(asked), full, "{asked:?} besides {overhead:?}");
                }
                let (mut by_free, mut by_sum) = (Room::NONE, Room::NONE);
                if let Some(free) = free {
                    by_free.widen_free(&free, asked);
                    by_sum.widen(&allocatable, overhead, asked);
                    assert_eq!(
                        (by_free.cpu_millis, by_free.memory_bytes, by_free.pods),
                        (by_sum.cpu_millis, by_sum.memory_bytes, by_sum.pods)
                    );
                }
            }
        }
        // The overhead alone fills the type's CPU: a pod asking one more millicore is refused.
        let full =
            Free::of(&allocatable, &Resources::new().with("cpu", 4000)).expect("fits exactly");
        assert!(full.holds(&Resources::new().with("memory", 1)));
        assert!(!full.holds(&Resources::new().with("cpu", 1)));
    }
}
