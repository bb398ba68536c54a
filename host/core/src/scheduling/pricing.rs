//! Cheapest-first ordering of a claim's instance types.

use std::cmp::Ordering;

use crate::instance_type::{InstanceType, Offering};

/// Supplies a price for an offering whose price is unknown (`None` keeps it unknown).
pub type FallbackPrice<'a> = &'a dyn Fn(&InstanceType, &Offering) -> Option<f64>;

/// A fallback that knows nothing.
pub(crate) fn no_fallback(_: &InstanceType, _: &Offering) -> Option<f64> {
    None
}

/// Smaller machines first: CPU, then memory, then the rest of the capacity.
fn by_size(a: &InstanceType, b: &InstanceType) -> Ordering {
    let (ca, cb) = (a.capacity(), b.capacity());
    ca.cpu_millis
        .cmp(&cb.cpu_millis)
        .then(ca.memory_bytes.cmp(&cb.memory_bytes))
        .then(ca.ephemeral_storage_bytes.cmp(&cb.ephemeral_storage_bytes))
        .then(ca.pods.cmp(&cb.pods))
}

/// Orders `indices` (into `types`) cheapest first, the price of type index `i` being
/// `price_of(i)`, and returns each one's price, aligned with the new order.
///
/// Known prices ascend, ties broken by name (as upstream). Types without a known price come
/// after every priced type, smallest machine first (CPU, memory, storage, pods) and only then
/// by name, so an unpriced catalog still prefers small machines instead of alphabetical ones.
pub(crate) fn order_by_price(
    indices: &mut [usize],
    types: &[InstanceType],
    price_of: impl Fn(usize) -> Option<f64>,
) -> Vec<Option<f64>> {
    let mut keyed: Vec<(Option<f64>, usize)> = indices.iter().map(|&i| (price_of(i), i)).collect();
    keyed.sort_by(|&(pa, a), &(pb, b)| {
        let (ta, tb) = (&types[a], &types[b]);
        let primary = match (pa, pb) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => by_size(ta, tb),
        };
        primary.then_with(|| ta.name().cmp(tb.name()))
    });
    for (slot, (_, i)) in indices.iter_mut().zip(&keyed) {
        *slot = *i;
    }
    keyed.into_iter().map(|(p, _)| p).collect()
}
