//! The `clevercloud-pricing` plugin through the real runtime, against the fake Clever Cloud
//! price list (`joinery_emulator::clevercloud::pricing::PricingFake`) over the host's gated HTTP:
//! live rates price, a later failure keeps the last good prices, a price list that fails
//! from the start (or no grant at all) leaves the built-in table.

use crate::common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::engine;
use joinery_emulator::clevercloud::pricing::{PricingFailure, PricingFake, PricingFakeOptions};
use joinery_runtime::contract::PriceRequest;
use joinery_runtime::grants::{Grants, HttpPattern};
use joinery_runtime::manifest::{PluginKind, PluginManifest};
use joinery_runtime::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource};
use joinery_runtime::services::HostServices;

/// The flavors and their built-in EUR/hour prices.
const TABLE: &[(&str, f64, f64, f64)] = &[
    ("2XS", 4.0, 4.0, 0.0333),
    ("XS", 6.0, 8.0, 0.0611),
    ("S", 8.0, 12.0, 0.0889),
    ("M", 10.0, 16.0, 0.1167),
    ("L", 12.0, 24.0, 0.1667),
    ("XL", 16.0, 32.0, 0.2222),
];

fn parts() -> (PluginManifest, &'static [u8]) {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    let text =
        std::fs::read_to_string(common::repo().join("plugins/clevercloud-pricing/plugin.yaml"))
            .unwrap();
    let manifest = PluginManifest::parse(&text, "clevercloud-pricing").unwrap();
    (
        manifest,
        WASM.get_or_init(|| common::wasm("joinery_plugin_clevercloud_pricing.wasm")),
    )
}

/// Loads the plugin pointed at `fake`, refreshing every second. Like a simulation, the test
/// adds the loopback pattern to the plugin's request; the grant names the fake's address.
fn load(fake: &PricingFake) -> Arc<LoadedPlugin> {
    let (mut manifest, wasm) = parts();
    manifest
        .capabilities
        .http
        .push(HttpPattern::parse("http://127.0.0.1:*").unwrap());
    let grants = format!(
        "plugins:\n  clevercloud-pricing:\n    http: [\"{url}\"]\n    config: {{endpoint: \"{url}\", refreshIntervalSeconds: 1, timeoutSeconds: 5}}\n",
        url = fake.url()
    );
    let cx = LoadContext::new(
        engine(),
        Grants::parse(&grants, "test grants").unwrap(),
        HostServices::default(),
    )
    .unwrap();
    Arc::new(
        LoadedPlugin::load(
            &cx,
            PluginBytes {
                manifest,
                source: PluginSource::Builtin,
                wasm,
                compiled: None,
            },
        )
        .unwrap(),
    )
}

fn request(name: &str) -> PriceRequest {
    PriceRequest {
        instance_type: name.into(),
        zone: "par".into(),
        capacity_type: "on-demand".into(),
        cpu_millis: 4000,
        memory_bytes: 4_000_000_000,
        gpu_count: 0,
        known_price: None,
        labels: vec![],
    }
}

fn requests() -> Vec<PriceRequest> {
    let mut all: Vec<PriceRequest> = TABLE.iter().map(|(name, ..)| request(name)).collect();
    all.push(request("c3-4"));
    all
}

/// What the plugin should answer for [`requests`] at these rates.
fn expected(vcpu: f64, ram: f64) -> Vec<Option<f64>> {
    let mut prices: Vec<Option<f64>> = TABLE
        .iter()
        .map(|(_, cpu, gb, _)| Some(((cpu * vcpu + gb * ram) * 1e4).round() / 1e4))
        .collect();
    prices.push(None);
    prices
}

fn table() -> Vec<Option<f64>> {
    let mut prices: Vec<Option<f64>> = TABLE.iter().map(|(.., price)| Some(*price)).collect();
    prices.push(None);
    prices
}

fn unix_second() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Sleeps until 20 ms into the next wall-clock second.
async fn start_of_next_second() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1020 - u64::from(now.subsec_millis()))).await;
}

/// Past the next due time of a one-second schedule (1 s ± 10 %, whole seconds).
async fn next_refresh() {
    tokio::time::sleep(Duration::from_millis(1200)).await;
}

#[test]
fn the_component_fits_the_size_budget_and_asks_only_for_the_price_list() {
    let (manifest, wasm) = parts();
    assert!(
        wasm.len() <= 512 * 1024,
        "clevercloud-pricing is {} bytes, over the 512 KiB budget",
        wasm.len()
    );
    assert_eq!(manifest.kind, PluginKind::Pricing);
    let http: Vec<&str> = manifest
        .capabilities
        .http
        .iter()
        .map(HttpPattern::as_str)
        .collect();
    assert_eq!(http, ["https://api.clever-cloud.com"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_rates_price_and_a_later_failure_keeps_the_last_good_prices() {
    let fake = PricingFake::start(PricingFakeOptions {
        vcpu_rate: 0.003,
        ram_rate_per_gb: 0.006,
        ..Default::default()
    })
    .await
    .unwrap();
    let plugin = load(&fake);
    // The plugin's clock counts whole seconds, so a refresh at second S is due again at
    // S + 1: start just after a second begins for the two calls to share one.
    start_of_next_second().await;
    let first_second = unix_second();
    assert_eq!(
        plugin.price(&requests()).await.unwrap(),
        expected(0.003, 0.006)
    );
    assert_eq!(fake.requests(), 2, "one refresh reads both endpoints");
    let headers = fake.last_request_headers();
    assert_eq!(
        headers.get("accept").map(String::as_str),
        Some("application/json")
    );
    assert!(
        headers["user-agent"].starts_with("joinery-clevercloud-pricing/"),
        "{headers:?}"
    );

    // Not due yet: the cache answers, nothing is fetched. A machine too slow to make both
    // calls within one second cannot check this.
    assert_eq!(
        plugin.price(&[request("M")]).await.unwrap(),
        expected(0.003, 0.006)[3..4]
    );
    if unix_second() == first_second {
        assert_eq!(fake.requests(), 2);
    } else {
        eprintln!("both calls did not fit in one clock second: not-due check skipped");
    }

    // Due: the new rates price.
    fake.set_rates(0.004, 0.007);
    next_refresh().await;
    assert_eq!(
        plugin.price(&requests()).await.unwrap(),
        expected(0.004, 0.007)
    );

    // The price list breaks (and changes): every attempt fails, the last good prices stay.
    fake.set_rates(0.005, 0.008);
    for failure in [
        PricingFailure::ServerError,
        PricingFailure::WrongCurrency,
        PricingFailure::HugeBody,
    ] {
        fake.set_failure(failure);
        let before = fake.requests();
        next_refresh().await;
        assert_eq!(
            plugin.price(&requests()).await.unwrap(),
            expected(0.004, 0.007),
            "{failure:?}"
        );
        assert!(
            fake.requests() > before,
            "{failure:?}: a refresh was attempted"
        );
    }

    // Healed: the next attempt takes the current rates.
    fake.set_failure(PricingFailure::None);
    next_refresh().await;
    assert_eq!(
        plugin.price(&requests()).await.unwrap(),
        expected(0.005, 0.008)
    );
    fake.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_list_failing_from_the_start_leaves_the_built_in_table() {
    let fake = PricingFake::start(PricingFakeOptions {
        vcpu_rate: 0.003,
        ram_rate_per_gb: 0.006,
        failure: PricingFailure::TieredPlans,
        ..Default::default()
    })
    .await
    .unwrap();
    let plugin = load(&fake);
    assert_eq!(plugin.price(&requests()).await.unwrap(), table());
    assert_eq!(
        fake.requests(),
        2,
        "the product was read, the tiered price list refused"
    );
    fake.shutdown().await;
}

#[tokio::test]
async fn without_a_grant_the_plugin_loads_and_prices_from_its_table() {
    let (manifest, wasm) = parts();
    let cx = LoadContext::new(engine(), Grants::default(), HostServices::default()).unwrap();
    let plugin = LoadedPlugin::load(
        &cx,
        PluginBytes {
            manifest,
            source: PluginSource::Builtin,
            wasm,
            compiled: None,
        },
    )
    .expect("a pricing plugin that requests HTTP loads without a grant");
    assert_eq!(plugin.price(&requests()).await.unwrap(), table());
}
