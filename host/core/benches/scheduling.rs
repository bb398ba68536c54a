//! Criterion benchmarks of the provisioning scheduler on upstream Karpenter's exported
//! benchmark workloads (`benches/workloads`, see its README): the same pods, the same
//! 400-type catalog. `joinery bench scheduling` prints the full table with upstream's
//! figures beside ours; these benches track regressions.
//!
//! Run with `cargo bench -p joinery-core --features bench`.

use std::io::Read;

use criterion::{Criterion, criterion_group, criterion_main};
use joinery_core::scheduling::{
    PreferencePolicy, SchedulingContext, WorkloadPod, schedule_with_context, workload_input,
};

fn load(file: &str) -> Vec<WorkloadPod> {
    let path = format!("{}/benches/workloads/{file}", env!("CARGO_MANIFEST_DIR"));
    let mut json = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("workload file"))
        .read_to_string(&mut json)
        .expect("gzip JSON");
    serde_json::from_str(&json).expect("workload pods")
}

fn scheduling(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling");
    group.sample_size(10);
    for pods in [50, 500, 2000, 5000] {
        let input =
            workload_input(&load(&format!("diverse_{pods}.json.gz"))).expect("valid workload");
        let context = SchedulingContext::default();
        group.bench_function(format!("diverse-{pods}"), |b| {
            b.iter(|| schedule_with_context(&input, &context, None))
        });
    }
    let preference = workload_input(&load("preference_4000.json.gz")).expect("valid workload");
    for (name, policy) in [
        ("respect-preferences-4000", PreferencePolicy::Respect),
        ("ignore-preferences-4000", PreferencePolicy::Ignore),
    ] {
        let context = SchedulingContext {
            preference_policy: policy,
            ..Default::default()
        };
        group.bench_function(name, |b| {
            b.iter(|| schedule_with_context(&preference, &context, None))
        });
    }
    group.finish();
}

criterion_group!(benches, scheduling);
criterion_main!(benches);
