//! Reading and validating Clever Cloud's two public pricing endpoints.
//!
//! A refresh reads `GET {endpoint}/v4/kubernetes-product` (the flavors the DISTRIBUTED
//! topology offers) and `GET {endpoint}/v4/billing/price-system?zone_id={zone}` (the rates),
//! and accepts them only when every rule below holds; otherwise it fails as a whole and the
//! last good rates stay.

use joinery_plugin_sdk::http;
use joinery_plugin_sdk::pricing::check_rate;
use joinery_plugin_sdk::url::percent_encode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::{DEFAULT_RAM_RATE_PER_GB, DEFAULT_VCPU_RATE, Flavor, Rates};
use crate::config::Config;

/// Largest response body accepted, in bytes (1 MiB).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How far a rate may stray from its default, either way.
pub const MAX_RATE_FACTOR: f64 = 10.0;
/// The currency prices must be in.
pub const CURRENCY: &str = "EUR";
/// The topology whose flavors are offered to node groups.
pub const TOPOLOGY: &str = "DISTRIBUTED";
/// The price-list entry of a node's vCPU.
pub const VCPU_SERVICE: &str = "kubernetes.node.vcpu";
/// The price-list entry of a node's memory.
pub const RAM_SERVICE: &str = "kubernetes.node.ram";
/// What every request says it is.
pub const USER_AGENT: &str = concat!("joinery-clevercloud-pricing/", env!("CARGO_PKG_VERSION"));

/// What a successful refresh yields, and what the cache keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveRates {
    /// The rates of the price list.
    pub rates: Rates,
    /// The catalog flavors the API offers, in the API's order.
    pub offered: Vec<String>,
}

/// Reads both endpoints and validates them against the flavors of `catalog`.
pub fn fetch(config: &Config, catalog: &[Flavor]) -> Result<LiveRates, String> {
    let product = get(config, "/v4/kubernetes-product")?;
    let offered = parse_product(&product, catalog)?;
    let path = format!(
        "/v4/billing/price-system?zone_id={}",
        percent_encode(&config.zone)
    );
    let prices = get(config, &path)?;
    let rates = parse_price_system(&prices, &config.zone)?;
    Ok(LiveRates { rates, offered })
}

/// One `GET` with the plugin's headers and timeout; a non-2xx status or a body over
/// [`MAX_BODY_BYTES`] is an error.
fn get(config: &Config, path: &str) -> Result<Vec<u8>, String> {
    let url = format!("{}{path}", config.base_url());
    let response = http::Request::get(&url)
        .header("accept", "application/json")
        .header("user-agent", USER_AGENT)
        .timeout_ms(config.timeout_seconds.saturating_mul(1000))
        .send()
        .and_then(http::Response::error_for_status)
        .map_err(|e| format!("GET {path}: {e}"))?;
    check_body_size(path, response.body)
}

/// Refuses a body over [`MAX_BODY_BYTES`].
pub fn check_body_size(path: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
    if body.len() > MAX_BODY_BYTES {
        return Err(format!(
            "GET {path}: the body is {} bytes, over the {MAX_BODY_BYTES}-byte limit",
            body.len()
        ));
    }
    Ok(body)
}

#[derive(Deserialize)]
struct Product {
    topologies: Vec<Topology>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Topology {
    topology: String,
    #[serde(default)]
    available_flavors: Vec<String>,
}

/// The flavors of `catalog` the DISTRIBUTED topology offers. An offered flavor the
/// catalog does not know is skipped (and logged); offering none of the known flavors is
/// an error, as is a missing DISTRIBUTED topology.
pub fn parse_product(body: &[u8], catalog: &[Flavor]) -> Result<Vec<String>, String> {
    let product: Product = serde_json::from_slice(body)
        .map_err(|e| format!("kubernetes-product: not the expected JSON: {e}"))?;
    let topology = product
        .topologies
        .into_iter()
        .find(|t| t.topology == TOPOLOGY)
        .ok_or_else(|| format!("kubernetes-product: no {TOPOLOGY} topology"))?;
    let mut offered = Vec::new();
    let mut skipped = Vec::new();
    for name in topology.available_flavors {
        if catalog.iter().any(|f| f.name == name) {
            if !offered.contains(&name) {
                offered.push(name);
            }
        } else if skipped.len() < 16 {
            skipped.push(name);
        }
    }
    if !skipped.is_empty() {
        joinery_plugin_sdk::log::info(format!(
            "kubernetes-product offers flavors without a known size, not priced: {}",
            skipped.join(", ")
        ));
    }
    if offered.is_empty() {
        return Err(format!(
            "kubernetes-product: the {TOPOLOGY} topology offers none of the known flavors"
        ));
    }
    Ok(offered)
}

/// The vCPU and memory rates of a price list, after checking its currency (and zone, when
/// it names one) and both entries: unit, quantity, one price plan, a price above zero and
/// within [`MAX_RATE_FACTOR`]× of the default.
pub fn parse_price_system(body: &[u8], zone: &str) -> Result<Rates, String> {
    let doc: Value = serde_json::from_slice(body)
        .map_err(|e| format!("price-system: not the expected JSON: {e}"))?;
    let currency = doc.get("currency").and_then(Value::as_str);
    if currency != Some(CURRENCY) {
        return Err(format!(
            "price-system: currency is {}, expected {CURRENCY}",
            shown(doc.get("currency"))
        ));
    }
    if let Some(answered) = doc.get("zone_id")
        && answered.as_str() != Some(zone)
    {
        return Err(format!(
            "price-system: zone_id is {}, expected {zone:?}",
            shown(Some(answered))
        ));
    }
    let countables = doc
        .get("countable")
        .and_then(Value::as_array)
        .ok_or_else(|| "price-system: no countable list".to_string())?;
    let vcpu = rate(countables, VCPU_SERVICE, "vcpu", 1.0, DEFAULT_VCPU_RATE)?;
    let per_quantity = rate(countables, RAM_SERVICE, "B", 1e9, DEFAULT_RAM_RATE_PER_GB)?;
    Ok(Rates {
        vcpu,
        ram_per_gb: per_quantity,
    })
}

/// The validated price of the one entry of `service`.
fn rate(
    countables: &[Value],
    service: &str,
    unit: &str,
    quantity: f64,
    default: f64,
) -> Result<f64, String> {
    let mut entries = countables
        .iter()
        .filter(|c| c.get("service").and_then(Value::as_str) == Some(service));
    let entry = entries
        .next()
        .ok_or_else(|| format!("price-system: no {service} entry"))?;
    if entries.next().is_some() {
        return Err(format!("price-system: {service} is listed more than once"));
    }
    let at = |what: String| format!("price-system: {service}: {what}");
    let data_unit = entry.get("data_unit").and_then(Value::as_str);
    if data_unit != Some(unit) {
        return Err(at(format!(
            "data_unit is {}, expected {unit:?}",
            shown(entry.get("data_unit"))
        )));
    }
    let per = entry
        .get("data_quantity_for_price")
        .and_then(|q| q.get("quantity"));
    if per.and_then(Value::as_f64) != Some(quantity) {
        return Err(at(format!(
            "priced per {} {unit}, expected per {quantity} {unit}",
            shown(per)
        )));
    }
    let plans = entry
        .get("price_plans")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let [plan] = plans else {
        return Err(at(format!(
            "{} price plans, expected exactly one",
            plans.len()
        )));
    };
    let price = plan.get("price").and_then(Value::as_f64).ok_or_else(|| {
        at(format!(
            "price is {}, not a number",
            shown(plan.get("price"))
        ))
    })?;
    check_rate(service, price, default, MAX_RATE_FACTOR).map_err(|e| format!("price-system: {e}"))
}

/// A JSON value as it reads in an error, `missing` when absent, at most 64 characters.
fn shown(value: Option<&Value>) -> String {
    let mut text = value.map_or_else(|| "missing".to_string(), Value::to_string);
    if text.len() > 64 {
        let mut cut = 64;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog::seed_flavors;
    use joinery_plugin_sdk::testing::{self, FakeHost};
    use serde_json::json;

    /// The product answer of the reference, plus fields real answers carry.
    pub(crate) fn product() -> Value {
        json!({
            "topologies": [
                {"topology": "ALL_IN_ONE", "availableFlavors": ["S", "M", "L", "XL"], "description": "one node"},
                {"topology": "DISTRIBUTED", "availableFlavors": ["2XS", "XS", "S", "M", "L", "XL"], "default": true}
            ],
            "versions": {"available": ["1.36"], "default": "1.36"}
        })
    }

    /// The price list of the reference with the given rates, plus the control-plane entries.
    pub(crate) fn price_system(vcpu: f64, ram: f64) -> Value {
        json!({
            "zone_id": "par",
            "currency": "EUR",
            "countable": [
                {"service": "kubernetes.node.vcpu", "data_unit": "vcpu", "data_quantity_for_price": {"quantity": 1},
                 "price_plans": [{"price": vcpu, "max_quantity": null}], "first_x_free": 0},
                {"service": "kubernetes.node.ram", "data_unit": "B", "data_quantity_for_price": {"quantity": 1_000_000_000u64},
                 "price_plans": [{"price": ram}]},
                {"service": "kubernetes.controlPlane.distributed.vcpu", "data_unit": "vcpu",
                 "data_quantity_for_price": {"quantity": 1}, "price_plans": [{"price": 0.0}, {"price": 0.01}]}
            ]
        })
    }

    fn defaults() -> Value {
        price_system(DEFAULT_VCPU_RATE, DEFAULT_RAM_RATE_PER_GB)
    }

    fn prices(doc: &Value) -> Result<Rates, String> {
        parse_price_system(doc.to_string().as_bytes(), "par")
    }

    fn offered(doc: &Value) -> Result<Vec<String>, String> {
        parse_product(doc.to_string().as_bytes(), &seed_flavors())
    }

    /// `doc` with the entry of `service` changed by `f`.
    fn with_entry(service: &str, f: impl FnOnce(&mut Value)) -> Value {
        let mut doc = defaults();
        let entry = doc["countable"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["service"] == service)
            .unwrap();
        f(entry);
        doc
    }

    #[track_caller]
    fn refused(result: Result<Rates, String>, words: &[&str]) {
        let e = result.unwrap_err();
        assert!(words.iter().all(|w| e.contains(w)), "{e}");
    }

    #[test]
    fn the_reference_answers_are_accepted() {
        assert_eq!(prices(&defaults()).unwrap(), Rates::DEFAULT);
        assert_eq!(
            offered(&product()).unwrap(),
            ["2XS", "XS", "S", "M", "L", "XL"]
        );
        let higher = prices(&price_system(0.003, 0.006)).unwrap();
        assert_eq!(
            higher,
            Rates {
                vcpu: 0.003,
                ram_per_gb: 0.006
            }
        );
    }

    #[test]
    fn rule_currency_must_be_eur() {
        let mut doc = defaults();
        doc["currency"] = json!("USD");
        refused(prices(&doc), &["currency", "USD", "EUR"]);
        doc["currency"] = json!("eur");
        refused(prices(&doc), &["currency"]);
        doc.as_object_mut().unwrap().remove("currency");
        refused(prices(&doc), &["currency is missing"]);
    }

    #[test]
    fn rule_the_answer_is_for_the_zone_asked() {
        let mut doc = defaults();
        doc["zone_id"] = json!("rbx");
        refused(prices(&doc), &["zone_id", "rbx"]);
        doc.as_object_mut().unwrap().remove("zone_id");
        assert!(
            prices(&doc).is_ok(),
            "a list that names no zone is the zone asked for"
        );
    }

    #[test]
    fn rule_vcpu_is_priced_per_one_vcpu() {
        refused(
            prices(&with_entry(VCPU_SERVICE, |e| {
                e["data_unit"] = json!("core")
            })),
            &[VCPU_SERVICE, "data_unit", "core"],
        );
        refused(
            prices(&with_entry(VCPU_SERVICE, |e| {
                e["data_quantity_for_price"]["quantity"] = json!(1000)
            })),
            &[VCPU_SERVICE, "per 1000", "expected per 1 vcpu"],
        );
        refused(
            prices(&with_entry(VCPU_SERVICE, |e| {
                e["data_quantity_for_price"] = json!(null)
            })),
            &["per missing"],
        );
    }

    #[test]
    fn rule_ram_is_priced_per_1e9_bytes() {
        refused(
            prices(&with_entry(RAM_SERVICE, |e| e["data_unit"] = json!("GB"))),
            &[RAM_SERVICE, "data_unit", "GB"],
        );
        refused(
            prices(&with_entry(RAM_SERVICE, |e| {
                e["data_quantity_for_price"]["quantity"] = json!(1_073_741_824u64)
            })),
            &[RAM_SERVICE, "per 1073741824", "expected per 1000000000 B"],
        );
        // 1e9 written as a float is the same quantity.
        assert!(
            prices(&with_entry(RAM_SERVICE, |e| e["data_quantity_for_price"]
                ["quantity"] = json!(1e9)))
            .is_ok()
        );
    }

    #[test]
    fn rule_exactly_one_price_plan() {
        for service in [VCPU_SERVICE, RAM_SERVICE] {
            let tiered = with_entry(service, |e| {
                e["price_plans"] = json!([{"price": 0.003}, {"price": 0.002}])
            });
            refused(prices(&tiered), &[service, "2 price plans", "exactly one"]);
            refused(
                prices(&with_entry(service, |e| e["price_plans"] = json!([]))),
                &["0 price plans"],
            );
            refused(
                prices(&with_entry(service, |e| e["price_plans"] = json!(null))),
                &["0 price plans"],
            );
        }
    }

    #[test]
    fn rule_price_above_zero() {
        for service in [VCPU_SERVICE, RAM_SERVICE] {
            for bad in [json!(0), json!(-0.003)] {
                refused(
                    prices(&with_entry(service, |e| e["price_plans"][0]["price"] = bad)),
                    &[service, "not a positive number"],
                );
            }
            refused(
                prices(&with_entry(service, |e| {
                    e["price_plans"][0]["price"] = json!("0.003")
                })),
                &["not a number"],
            );
        }
    }

    #[test]
    fn rule_each_rate_within_ten_times_its_default() {
        for (service, default) in [
            (VCPU_SERVICE, DEFAULT_VCPU_RATE),
            (RAM_SERVICE, DEFAULT_RAM_RATE_PER_GB),
        ] {
            for ok in [default * 10.0, default / 10.0, default * 3.0] {
                assert!(
                    prices(&with_entry(service, |e| e["price_plans"][0]["price"] = json!(ok)))
                        .is_ok(),
                    "{service} {ok}"
                );
            }
            for bad in [default * 10.5, default / 10.5, 1.0] {
                refused(
                    prices(&with_entry(service, |e| {
                        e["price_plans"][0]["price"] = json!(bad)
                    })),
                    &[service, "within 10x"],
                );
            }
        }
    }

    #[test]
    fn rule_both_entries_present_once() {
        let mut doc = defaults();
        doc["countable"]
            .as_array_mut()
            .unwrap()
            .retain(|c| c["service"] != RAM_SERVICE);
        refused(prices(&doc), &["no kubernetes.node.ram entry"]);
        let mut doc = defaults();
        let copy = doc["countable"][0].clone();
        doc["countable"].as_array_mut().unwrap().push(copy);
        refused(
            prices(&doc),
            &["kubernetes.node.vcpu is listed more than once"],
        );
        refused(prices(&json!({"currency": "EUR"})), &["no countable list"]);
    }

    #[test]
    fn rule_malformed_json_is_refused() {
        assert!(
            parse_price_system(b"{\"currency\": \"EUR\", ", "par")
                .unwrap_err()
                .contains("not the expected JSON")
        );
        assert!(parse_price_system(b"<html>busy</html>", "par").is_err());
        assert!(
            parse_product(b"[]", &seed_flavors())
                .unwrap_err()
                .contains("not the expected JSON")
        );
    }

    #[test]
    fn rule_body_at_most_one_mib() {
        assert!(check_body_size("/p", vec![b' '; MAX_BODY_BYTES]).is_ok());
        let e = check_body_size("/p", vec![b' '; MAX_BODY_BYTES + 1]).unwrap_err();
        assert!(
            e.contains("1048577 bytes") && e.contains("1048576-byte limit"),
            "{e}"
        );
    }

    #[test]
    fn rule_product_needs_the_distributed_topology() {
        let mut doc = product();
        doc["topologies"]
            .as_array_mut()
            .unwrap()
            .retain(|t| t["topology"] != TOPOLOGY);
        assert!(
            offered(&doc)
                .unwrap_err()
                .contains("no DISTRIBUTED topology")
        );
        let mut doc = product();
        doc["topologies"][1]["availableFlavors"] = json!(["3XL"]);
        assert!(
            offered(&doc)
                .unwrap_err()
                .contains("none of the known flavors")
        );
    }

    #[test]
    fn rule_unknown_offered_flavors_are_skipped_and_unoffered_ones_left_out() {
        let _host = testing::install(FakeHost::new());
        let mut doc = product();
        doc["topologies"][1]["availableFlavors"] = json!(["XS", "3XL", "M", "M"]);
        assert_eq!(offered(&doc).unwrap(), ["XS", "M"]);
        let logs = testing::logs();
        assert!(
            logs.iter().any(|(_, line)| line.contains("3XL")),
            "{logs:?}"
        );
    }

    #[test]
    fn requests_carry_accept_user_agent_and_timeout_and_read_both_endpoints() {
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = seen.clone();
        let _host = testing::install(FakeHost::new().with_http(move |r: &http::Request| {
            log.borrow_mut().push(r.clone());
            let body = if r.url.contains("kubernetes-product") {
                product()
            } else {
                price_system(0.003, 0.006)
            };
            Ok(http::Response::new(200, body.to_string()))
        }));
        let config =
            Config::from_json(r#"{"endpoint": "http://fake:1/", "timeoutSeconds": 7}"#).unwrap();
        let live = fetch(&config, &seed_flavors()).unwrap();
        assert_eq!(
            live.rates,
            Rates {
                vcpu: 0.003,
                ram_per_gb: 0.006
            }
        );
        let seen = seen.borrow();
        let urls: Vec<&str> = seen.iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://fake:1/v4/kubernetes-product",
                "http://fake:1/v4/billing/price-system?zone_id=par"
            ]
        );
        for r in seen.iter() {
            assert_eq!(r.method, "GET");
            assert_eq!(r.header_value("accept"), Some("application/json"));
            assert!(
                r.header_value("user-agent")
                    .unwrap()
                    .starts_with("joinery-clevercloud-pricing/")
            );
            assert_eq!(r.timeout_ms, Some(7000));
        }
    }

    #[test]
    fn rule_non_2xx_transport_errors_and_timeouts_fail_the_refresh() {
        let config = Config::default();
        for (answer, words) in [
            (
                Ok(http::Response::new(503, "maintenance")),
                "HTTP status 503",
            ),
            (
                Err(http::Error::Transport("ConnectionReadTimeout".into())),
                "ConnectionReadTimeout",
            ),
            (
                Err(http::Error::Transport("HttpRequestDenied".into())),
                "HttpRequestDenied",
            ),
            (
                Ok(http::Response::new(200, vec![b' '; MAX_BODY_BYTES + 10])),
                "over the 1048576-byte limit",
            ),
        ] {
            let _host = testing::install(FakeHost::new().with_http(move |_| answer.clone()));
            let e = fetch(&config, &seed_flavors()).unwrap_err();
            assert!(
                e.contains("GET /v4/kubernetes-product") && e.contains(words),
                "{e}"
            );
        }
    }
}
