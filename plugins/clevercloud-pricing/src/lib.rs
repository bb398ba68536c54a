//! # clevercloud-pricing — Clever Cloud Kubernetes flavors, priced from the live price list
//!
//! Prices the offerings of the `clevercloud` cloud plugin, whose instance types are the
//! flavors of Clever Cloud Kubernetes node groups (`2XS` … `XL`):
//!
//! `price = cpu × vcpuRate + nominalGB × ramRate`, rounded to 4 decimals (EUR/hour).
//!
//! The rates come from Clever Cloud's public price list (no token) when the operator grants
//! the plugin HTTP to it; otherwise, and until a first refresh succeeds, from the built-in
//! rates (0.00277777777 EUR per vCPU-hour, 0.00555555555 EUR per GB-hour), which reproduce
//! the built-in table exactly:
//!
//! | flavor | vCPU | nominal GB | EUR/hour |
//! |---|---|---|---|
//! | 2XS | 4 | 4 | 0.0333 |
//! | XS | 6 | 8 | 0.0611 |
//! | S | 8 | 12 | 0.0889 |
//! | M | 10 | 16 | 0.1167 |
//! | L | 12 | 24 | 0.1667 |
//! | XL | 16 | 32 | 0.2222 |
//!
//! A request is priced when its instance type is a flavor of the catalog, its capacity
//! type `on-demand` and its zone the configured one; anything else gets no price (`None`).
//! A request that carries a known price gets it back.
//!
//! ## Configuration (JSON, every field optional, unknown fields refused)
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `endpoint` | `https://api.clever-cloud.com` | base URL of the API |
//! | `zone` | `par` | zone priced, and `zone_id` asked for |
//! | `refreshIntervalSeconds` | `43200` (12 h) | time between refreshes, ±10 % jitter; 1–86400 |
//! | `timeoutSeconds` | `15` | timeout of each HTTP exchange; 1–60 |
//! | `flavors` | `[]` | overlay: `{name, cpu?, memoryGB?, priceHourly?}`; a built-in name changes those fields, a new name must give all three; `priceHourly` pins the price |
//!
//! ## Endpoints
//!
//! - `GET {endpoint}/v4/kubernetes-product`: the flavors of the `DISTRIBUTED` topology
//!   (`availableFlavors`) are the ones offered;
//! - `GET {endpoint}/v4/billing/price-system?zone_id={zone}`: the `kubernetes.node.vcpu` and
//!   `kubernetes.node.ram` entries give the rates.
//!
//! Both with `Accept: application/json`, `User-Agent: joinery-clevercloud-pricing/<version>`
//! and the configured timeout.
//!
//! ## Validation of a refresh
//!
//! A refresh is accepted only if all of these hold, else it fails as a whole:
//!
//! - both answers are 2xx, arrive within the timeout, are at most 1 MiB and are JSON;
//! - `currency` is `EUR` (and `zone_id`, when present, is the zone asked for);
//! - the vCPU entry is priced per 1 `vcpu`, the memory entry per 10⁹ `B`;
//! - each of the two has exactly one price plan, a price above zero, and that price within
//!   10× of its default either way; each is listed once;
//! - the product has a `DISTRIBUTED` topology offering at least one known flavor. An offered
//!   flavor the catalog does not know (no size) is skipped; a catalog flavor not offered
//!   gets no price while live rates are in use.
//!
//! ## Refresh and last good rates
//!
//! The rates are kept in the host's cache with the SDK's
//! [`Refresher`](joinery_plugin_sdk::refresh::Refresher): refreshed when due (every
//! `refreshIntervalSeconds` ±10 %), and on any failure the last good rates stay, the
//! failure is logged, and the next attempt backs off from a minute, doubling up to the
//! interval. Without any good rates, the built-in ones price.

pub mod catalog;
pub mod config;
pub mod live;

use joinery_plugin_sdk::pricing::{PriceRequest, Pricing};
use joinery_plugin_sdk::refresh::{Current, Refresher, Schedule};

use catalog::{Flavor, Rates};
use config::Config;
use live::LiveRates;

/// The capacity type priced.
pub const CAPACITY_TYPE: &str = "on-demand";

/// The cache key of the live rates; the format version, endpoint and zone are part of it.
pub fn cache_key(config: &Config) -> String {
    format!("clevercloud-rates/v1/{}/{}", config.base_url(), config.zone)
}

/// The refresher of `config`: its cache key and its schedule.
pub fn refresher(config: &Config) -> Refresher {
    Refresher::new(
        cache_key(config),
        Schedule::every(config.refresh_interval_seconds).with_jitter(0.1),
    )
}

/// Prices one request from the catalog, with the live rates when there are some.
pub fn price_one(
    request: &PriceRequest,
    zone: &str,
    catalog: &[Flavor],
    live: Option<&LiveRates>,
) -> Option<f64> {
    if let Some(known) = request.known_price {
        return Some(known);
    }
    if request.capacity_type != CAPACITY_TYPE || request.zone != zone {
        return None;
    }
    let flavor = catalog.iter().find(|f| f.name == request.instance_type)?;
    if let Some(pinned) = flavor.pinned_price {
        return Some(pinned);
    }
    match live {
        Some(live) if live.offered.contains(&flavor.name) => Some(live.rates.price(flavor)),
        Some(_) => None,
        None => Some(Rates::DEFAULT.price(flavor)),
    }
}

/// Prices a batch with the rates `current` settled on.
pub fn price_with(
    config: &Config,
    current: &Current<LiveRates>,
    requests: &[PriceRequest],
) -> Vec<Option<f64>> {
    let catalog = config.catalog();
    requests
        .iter()
        .map(|r| price_one(r, &config.zone, &catalog, current.value.as_ref()))
        .collect()
}

/// Prices a batch at `now` (Unix seconds) with jitter draw `draw`: refreshes the rates
/// first when due. Only requests the plugin prices make it look at the rates.
pub fn price_at(
    config: &Config,
    requests: &[PriceRequest],
    now: u64,
    draw: f64,
) -> Vec<Option<f64>> {
    let catalog = config.catalog();
    let needs_rates = requests.iter().any(|r| {
        r.known_price.is_none()
            && r.capacity_type == CAPACITY_TYPE
            && r.zone == config.zone
            && catalog
                .iter()
                .any(|f| f.name == r.instance_type && f.pinned_price.is_none())
    });
    let current = if needs_rates {
        refresher(config).get_at(now, draw, || live::fetch(config, &catalog))
    } else {
        Current {
            value: None,
            fetched_at: None,
            outcome: joinery_plugin_sdk::refresh::Outcome::NotDue,
        }
    };
    price_with(config, &current, requests)
}

/// The Clever Cloud pricing function.
pub struct CleverCloudPricing;

impl Pricing for CleverCloudPricing {
    fn price(requests: Vec<PriceRequest>) -> Result<Vec<Option<f64>>, String> {
        let config = Config::load()?;
        Ok(price_at(
            &config,
            &requests,
            joinery_plugin_sdk::refresh::unix_now(),
            joinery_plugin_sdk::refresh::random_draw(),
        ))
    }
}

joinery_plugin_sdk::export_pricing!(CleverCloudPricing);

#[cfg(test)]
mod tests {
    use super::*;
    use catalog::{DEFAULT_RAM_RATE_PER_GB, DEFAULT_VCPU_RATE, SEED};
    use joinery_plugin_sdk::http;
    use joinery_plugin_sdk::log::Level;
    use joinery_plugin_sdk::testing::{self, FakeHost};
    use live::tests::{price_system, product};
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    const HOUR: u64 = 3600;
    const T0: u64 = 1_900_000_000;

    fn request(name: &str) -> PriceRequest {
        let mut r = PriceRequest::new(name, 4000, 4_000_000_000);
        r.zone = "par".into();
        r
    }

    fn all_flavors() -> Vec<PriceRequest> {
        SEED.iter().map(|(name, ..)| request(name)).collect()
    }

    fn table() -> Vec<Option<f64>> {
        SEED.iter().map(|(.., price)| Some(*price)).collect()
    }

    /// A fake API whose answers the test changes as it goes; counts the requests.
    #[derive(Clone)]
    struct FakeApi {
        rates: Rc<Cell<(f64, f64)>>,
        failing: Rc<RefCell<Option<http::Response>>>,
        requests: Rc<Cell<u32>>,
    }

    impl FakeApi {
        fn install(config: &str) -> (FakeApi, testing::FakeHostGuard) {
            let api = FakeApi {
                rates: Rc::new(Cell::new((DEFAULT_VCPU_RATE, DEFAULT_RAM_RATE_PER_GB))),
                failing: Rc::new(RefCell::new(None)),
                requests: Rc::new(Cell::new(0)),
            };
            let handler = api.clone();
            let host = testing::install(FakeHost::new().with_config(config).with_http(
                move |r: &http::Request| {
                    handler.requests.set(handler.requests.get() + 1);
                    if let Some(answer) = handler.failing.borrow().clone() {
                        return Ok(answer);
                    }
                    let (vcpu, ram) = handler.rates.get();
                    let body = if r.url.contains("kubernetes-product") {
                        product()
                    } else {
                        price_system(vcpu, ram)
                    };
                    Ok(http::Response::new(200, body.to_string()))
                },
            ));
            (api, host)
        }

        fn fail_with(&self, status: u16, body: &str) {
            *self.failing.borrow_mut() = Some(http::Response::new(status, body));
        }

        fn heal(&self) {
            *self.failing.borrow_mut() = None;
        }
    }

    fn config(json: &str) -> Config {
        Config::from_json(json).unwrap()
    }

    #[test]
    fn without_network_the_built_in_table_prices() {
        // No HTTP handler: every request fails like a denied one.
        let _host = testing::install(FakeHost::new());
        assert_eq!(
            price_at(&Config::default(), &all_flavors(), T0, 0.5),
            table()
        );
        let warnings: Vec<String> = testing::logs()
            .into_iter()
            .filter(|(l, _)| *l == Level::Warn)
            .map(|(_, m)| m)
            .collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("no good data yet"), "{warnings:?}");
    }

    #[test]
    fn the_exported_function_reads_the_configuration() {
        let _host = testing::install(
            FakeHost::new().with_config(r#"{"flavors": [{"name": "M", "priceHourly": 0.5}]}"#),
        );
        let prices = CleverCloudPricing::price(vec![request("M"), request("2XS")]).unwrap();
        assert_eq!(prices, [Some(0.5), Some(0.0333)]);
        let _host = testing::install(FakeHost::new().with_config(r#"{"zone": 7}"#));
        assert!(
            CleverCloudPricing::price(vec![request("M")])
                .unwrap_err()
                .contains("invalid plugin configuration")
        );
    }

    #[test]
    fn live_rates_price_once_validated_and_are_reused_until_due() {
        let (api, _host) = FakeApi::install("{}");
        let c = Config::default();
        api.rates.set((0.003, 0.006));
        let prices = price_at(&c, &[request("M"), request("XL")], T0, 0.5);
        assert_eq!(
            prices,
            [
                Some(round(10.0 * 0.003 + 16.0 * 0.006)),
                Some(round(16.0 * 0.003 + 32.0 * 0.006))
            ]
        );
        assert_eq!(api.requests.get(), 2, "one refresh reads both endpoints");
        // Not due for 12 h: new rates are not seen, nothing is fetched.
        api.rates.set((0.004, 0.007));
        assert_eq!(
            price_at(&c, &[request("M")], T0 + 10 * HOUR, 0.5),
            [Some(0.126)]
        );
        assert_eq!(api.requests.get(), 2);
        // Due: the new rates price.
        assert_eq!(
            price_at(&c, &[request("M")], T0 + 12 * HOUR, 0.5),
            [Some(round(0.04 + 16.0 * 0.007))]
        );
        assert_eq!(api.requests.get(), 4);
    }

    fn round(p: f64) -> f64 {
        joinery_plugin_sdk::pricing::round_to(p, 4)
    }

    #[test]
    fn any_failure_keeps_the_last_good_rates() {
        let (api, _host) = FakeApi::install("{}");
        let c = config(r#"{"refreshIntervalSeconds": 100}"#);
        api.rates.set((0.003, 0.006));
        let good = price_at(&c, &all_flavors(), T0, 0.5);
        assert_ne!(good, table());
        let mut now = T0;
        for (status, body) in [
            (500, "oops".to_string()),
            (200, "{not json".to_string()),
            (
                200,
                price_system(0.003, 0.006).to_string().replace("EUR", "USD"),
            ),
            (200, price_system(1.0, 0.006).to_string()),
            (200, " ".repeat(live::MAX_BODY_BYTES + 1)),
        ] {
            now += 1000; // past any due time or backoff of this schedule
            api.fail_with(status, &body);
            let before = api.requests.get();
            assert_eq!(
                price_at(&c, &all_flavors(), now, 0.5),
                good,
                "after {status} {}",
                &body[..body.len().min(40)]
            );
            assert!(api.requests.get() > before, "a refresh was attempted");
        }
        let warnings = testing::logs()
            .into_iter()
            .filter(|(l, _)| *l == Level::Warn)
            .count();
        assert_eq!(warnings, 5, "each failure is logged");
        // Healed: the next attempt after the backoff takes the new rates.
        api.heal();
        api.rates.set((DEFAULT_VCPU_RATE, DEFAULT_RAM_RATE_PER_GB));
        assert_eq!(price_at(&c, &all_flavors(), now + 1000, 0.5), table());
    }

    #[test]
    fn a_failed_refresh_backs_off_instead_of_retrying_every_call() {
        let (api, _host) = FakeApi::install("{}");
        let c = Config::default();
        api.fail_with(503, "down");
        assert_eq!(price_at(&c, &all_flavors(), T0, 0.5), table());
        assert_eq!(api.requests.get(), 1);
        assert_eq!(price_at(&c, &all_flavors(), T0 + 30, 0.5), table());
        assert_eq!(api.requests.get(), 1, "within the first minute, no retry");
        api.heal();
        api.rates.set((0.003, 0.006));
        assert_ne!(
            price_at(&c, &all_flavors(), T0 + 60, 0.5),
            table(),
            "retried after a minute"
        );
    }

    #[test]
    fn the_refresh_interval_has_ten_percent_jitter() {
        let (_api, _host) = FakeApi::install("{}");
        let c = Config::default();
        let r = refresher(&c);
        for (draw, expected) in [
            (0.0, T0 + 43_200 * 9 / 10),
            (0.5, T0 + 43_200),
            (0.999_999_9, T0 + 43_200 * 11 / 10),
        ] {
            r.clear();
            price_at(&c, &[request("M")], T0, draw);
            let next = r.snapshot::<LiveRates>().unwrap().next_attempt;
            assert!(
                next.abs_diff(expected) <= 1,
                "draw {draw}: {next} vs {expected}"
            );
        }
    }

    #[test]
    fn the_cache_key_follows_endpoint_and_zone() {
        let a = cache_key(&Config::default());
        assert_eq!(a, "clevercloud-rates/v1/https://api.clever-cloud.com/par");
        assert_ne!(
            a,
            cache_key(&config(r#"{"endpoint": "http://127.0.0.1:9"}"#))
        );
        assert_ne!(a, cache_key(&config(r#"{"zone": "rbx"}"#)));
    }

    #[test]
    fn only_known_on_demand_flavors_in_the_zone_are_priced() {
        let (api, _host) = FakeApi::install("{}");
        let c = Config::default();
        let mut spot = request("M");
        spot.capacity_type = "spot".into();
        let mut elsewhere = request("M");
        elsewhere.zone = "rbx".into();
        let mut known = request("c3-4");
        known.known_price = Some(1.25);
        let prices = price_at(
            &c,
            &[
                request("m"),
                request("c3-4"),
                spot.clone(),
                elsewhere.clone(),
                known,
            ],
            T0,
            0.5,
        );
        assert_eq!(prices, [None, None, None, None, Some(1.25)]);
        assert_eq!(
            api.requests.get(),
            0,
            "nothing to price from rates, nothing fetched"
        );
    }

    #[test]
    fn live_prices_cover_only_the_offered_flavors() {
        let _host = testing::install(FakeHost::new().with_http(|r: &http::Request| {
            let mut p = product();
            p["topologies"][1]["availableFlavors"] = serde_json::json!(["XS", "M", "3XL"]);
            let body = if r.url.contains("kubernetes-product") {
                p
            } else {
                price_system(0.003, 0.006)
            };
            Ok(http::Response::new(200, body.to_string()))
        }));
        let prices = price_at(&Config::default(), &all_flavors(), T0, 0.5);
        let priced: Vec<bool> = prices.iter().map(Option::is_some).collect();
        assert_eq!(priced, [false, true, false, true, false, false]);
    }

    #[test]
    fn the_overlay_resizes_pins_and_adds_flavors() {
        let (api, _host) = FakeApi::install("{}");
        let c = config(
            r#"{"flavors": [{"name": "L", "memoryGB": 20}, {"name": "XL", "priceHourly": 0.2},
                            {"name": "2XL", "cpu": 32, "memoryGB": 64, "priceHourly": 0.45}]}"#,
        );
        let requests = [request("L"), request("XL"), request("2XL")];
        // Built-in rates (the API is down): a resized flavor follows the formula, pins hold.
        api.fail_with(500, "");
        let fallback = price_at(&c, &requests, T0, 0.5);
        assert_eq!(
            fallback,
            [
                Some(round(
                    12.0 * DEFAULT_VCPU_RATE + 20.0 * DEFAULT_RAM_RATE_PER_GB
                )),
                Some(0.2),
                Some(0.45)
            ]
        );
        // Live rates: the same, with the live rates; pinned prices still hold, and a pinned
        // new flavor is priced although the API does not offer it.
        api.heal();
        api.rates.set((0.003, 0.006));
        let live = price_at(&c, &requests, T0 + 10_000, 0.5);
        assert_eq!(
            live,
            [
                Some(round(12.0 * 0.003 + 20.0 * 0.006)),
                Some(0.2),
                Some(0.45)
            ]
        );
    }

    #[test]
    fn pinned_prices_alone_need_no_refresh() {
        let (api, _host) = FakeApi::install("{}");
        let c = config(r#"{"flavors": [{"name": "M", "priceHourly": 0.1}]}"#);
        assert_eq!(price_at(&c, &[request("M")], T0, 0.5), [Some(0.1)]);
        assert_eq!(api.requests.get(), 0);
    }

    #[test]
    fn one_price_per_request_in_order() {
        let _host = testing::install(FakeHost::new());
        assert!(price_at(&Config::default(), &[], T0, 0.5).is_empty());
        let many: Vec<PriceRequest> = (0..300).map(|i| request(SEED[i % SEED.len()].0)).collect();
        let prices = price_at(&Config::default(), &many, T0, 0.5);
        assert_eq!(prices.len(), 300);
        assert_eq!(prices[7], Some(SEED[1].3));
    }
}
