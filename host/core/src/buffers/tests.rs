//! How many chunks a buffer keeps, and its conditions (placement is tested with the
//! scheduler, in `scheduling::tests`).

use std::collections::BTreeMap;

use super::*;

fn chunk(cpu_millis: u64, memory_bytes: u64) -> Resources {
    Resources::new()
        .with("cpu", cpu_millis)
        .with("memory", memory_bytes)
        .with("pods", 1)
}

fn limits(items: &[(&str, u64)]) -> BTreeMap<String, u64> {
    items.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

const GI: u64 = 1 << 30;

#[test]
fn percentage_rounds_up_with_a_floor_of_one() {
    assert_eq!(percentage_chunks(10, 20), 2);
    assert_eq!(percentage_chunks(10, 25), 3);
    assert_eq!(percentage_chunks(3, 10), 1);
    assert_eq!(percentage_chunks(0, 50), 0);
    assert_eq!(percentage_chunks(10, 0), 0);
    assert_eq!(percentage_chunks(i32::MAX, 200), i32::MAX);
}

#[test]
fn replicas_and_percentage_take_the_larger() {
    let c = chunk(1000, GI);
    let size = BufferSize {
        replicas: Some(1),
        percentage: Some(20),
        limits: None,
    };
    // 20 % of 30 is 6, more than 1.
    assert_eq!(desired_chunks(&size, Some(30), &c), 6);
    // 20 % of 2 rounds up to 1; replicas 1: 1.
    assert_eq!(desired_chunks(&size, Some(2), &c), 1);
    let size = BufferSize {
        replicas: Some(4),
        ..size
    };
    assert_eq!(desired_chunks(&size, Some(10), &c), 4);
    // Percentage without a workload (a podTemplateRef buffer) is ignored.
    assert_eq!(desired_chunks(&size, None, &c), 4);
}

#[test]
fn limits_cap_the_count_and_alone_decide_it() {
    let c = chunk(1000, 2 * GI);
    let capped = BufferSize {
        replicas: Some(10),
        percentage: None,
        limits: Some(limits(&[("cpu", 4000), ("memory", 16 * GI)])),
    };
    // cpu allows 4, memory 8: 4.
    assert_eq!(desired_chunks(&capped, None, &c), 4);
    let alone = BufferSize {
        replicas: None,
        ..capped.clone()
    };
    assert_eq!(desired_chunks(&alone, None, &c), 4);
    // A limit on a resource the chunk does not request bounds nothing.
    let unrelated = BufferSize {
        replicas: Some(3),
        percentage: None,
        limits: Some(limits(&[("nvidia.com/gpu", 1)])),
    };
    assert_eq!(desired_chunks(&unrelated, None, &c), 3);
    // Nothing to count with: no chunk.
    assert_eq!(desired_chunks(&BufferSize::default(), Some(10), &c), 0);
    // A limit below one chunk: none.
    let small = BufferSize {
        replicas: Some(2),
        percentage: None,
        limits: Some(limits(&[("cpu", 500)])),
    };
    assert_eq!(desired_chunks(&small, None, &c), 0);
}

#[test]
fn negative_replicas_count_as_none_kept() {
    let size = BufferSize {
        replicas: Some(-3),
        ..Default::default()
    };
    assert_eq!(desired_chunks(&size, None, &chunk(100, GI)), 0);
}

#[test]
fn virtual_pods_carry_the_buffer_and_the_lowest_priority() {
    let shape = crate::scheduling::PendingPod::new("ignored", "shape", chunk(500, GI));
    let pods = virtual_pods("shop", "web-spare", 2, &shape);
    assert_eq!(pods.len(), 2);
    assert_eq!(pods[0].key.to_string(), "shop/capacity-buffer-web-spare-1");
    assert_eq!(pods[1].key.name, "capacity-buffer-web-spare-2");
    assert_ne!(pods[0].uid, pods[1].uid);
    for p in &pods {
        assert_eq!(p.priority, i32::MIN);
        assert_eq!(p.capacity_buffer.as_deref(), Some("shop/web-spare"));
        assert_eq!(p.requests.cpu_millis, 500);
    }
}

#[test]
fn provisioning_condition_follows_readiness_and_count() {
    let not_ready = provisioning_condition(false, 3, None).unwrap();
    assert_eq!(
        (not_ready.status, not_ready.reason),
        (false, "NotReadyForProvisioning")
    );
    let empty = provisioning_condition(true, 0, None).unwrap();
    assert_eq!((empty.status, empty.reason), (false, "BufferEmpty"));
    // Ready with chunks that were not in the pass: left alone.
    assert_eq!(provisioning_condition(true, 2, None), None);
    let outcome = BufferOutcome {
        chunks: 2,
        on_nodes: [("n1".to_string(), 2)].into(),
        ..Default::default()
    };
    let fits = provisioning_condition(true, 2, Some(&outcome)).unwrap();
    assert_eq!((fits.status, fits.reason), (true, "FitsExistingCapacity"));
    assert_eq!(limited_by_quotas_condition(None), None);
    let within = limited_by_quotas_condition(Some(&outcome)).unwrap();
    assert_eq!((within.status, within.reason), (false, "WithinLimits"));
}
