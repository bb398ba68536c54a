//! Clever Cloud's two public pricing endpoints on loopback, for the `clevercloud-pricing`
//! plugin's tests and for simulations whose cloud is Clever Cloud.
//!
//! ```no_run
//! # async fn demo() -> Result<(), joinery_emulator::SimError> {
//! use joinery_emulator::clevercloud::pricing::{PricingFailure, PricingFake, PricingFakeOptions};
//! let fake = PricingFake::start(PricingFakeOptions::default()).await?;
//! println!("configure endpoint: {} and grant it", fake.url());
//! fake.set_failure(PricingFailure::WrongCurrency);
//! fake.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Calls
//!
//! | call | answer |
//! |---|---|
//! | `GET /v4/kubernetes-product` | `{"topologies": [{"topology": "ALL_IN_ONE", "availableFlavors": ["S","M","L","XL"], …}, {"topology": "DISTRIBUTED", "availableFlavors": ["2XS","XS","S","M","L","XL"], …}], "versions": {"available": ["1.36"], "default": "1.36"}}` |
//! | `GET /v4/billing/price-system?zone_id=par` | `{"zone_id": "par", "currency": "EUR", "countable": [...]}`: `kubernetes.node.vcpu` priced per 1 `vcpu`, `kubernetes.node.ram` per 10⁹ `B`, each with one price plan at the current rates, plus the control plane's entries |
//! | anything else | `404` (`405` for a method other than `GET`) |
//!
//! Every answer carries a few fields real ones carry and consumers ignore (`description`,
//! `first_x_free`, `price_plans[].plan_id`, …). Errors are `{"id", "message", "type": "error"}`.
//!
//! # Failure modes ([`PricingFailure`])
//!
//! - `serverError`: both endpoints answer `500`;
//! - `malformedJson`: both answer `200` with truncated JSON;
//! - `hugeBody`: both answer `200` with their JSON padded past 1.5 MiB (still valid JSON);
//! - `wrongCurrency`, `wrongUnit`, `tieredPlans`: the price list only, with `currency: USD`,
//!   memory priced per `GB` instead of `B`, or two price plans per node entry; the product
//!   answer stays normal.
//!
//! [`PricingFake::requests`] counts every request received, errors included.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::SimError;
use crate::network::Network;

/// Clever Cloud's price of one vCPU for one hour, in EUR.
pub const DEFAULT_VCPU_RATE: f64 = 0.002_777_777_77;
/// Clever Cloud's price of one GB (10⁹ bytes) of memory for one hour, in EUR.
pub const DEFAULT_RAM_RATE_PER_GB: f64 = 0.005_555_555_55;
/// The zone served.
pub const ZONE: &str = "par";
/// Size a `hugeBody` answer is padded past, in bytes.
pub const HUGE_BODY_BYTES: usize = 1536 * 1024;

/// Settings of a [`PricingFake`].
#[derive(Debug, Clone, PartialEq)]
pub struct PricingFakeOptions {
    /// EUR per vCPU-hour in the price list.
    pub vcpu_rate: f64,
    /// EUR per GB-hour of memory in the price list.
    pub ram_rate_per_gb: f64,
    /// The failure mode at start.
    pub failure: PricingFailure,
    /// The network to listen on (loopback TCP by default; see [`crate::network`]).
    pub network: Network,
}

impl Default for PricingFakeOptions {
    fn default() -> Self {
        PricingFakeOptions {
            vcpu_rate: DEFAULT_VCPU_RATE,
            ram_rate_per_gb: DEFAULT_RAM_RATE_PER_GB,
            failure: PricingFailure::None,
            network: Network::tcp(),
        }
    }
}

/// How the fake misbehaves (see the module documentation for what each does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PricingFailure {
    /// Correct answers.
    #[default]
    None,
    /// `500` from both endpoints.
    ServerError,
    /// Truncated JSON from both endpoints.
    MalformedJson,
    /// The price list in `USD`.
    WrongCurrency,
    /// Memory priced per `GB` rather than per 10⁹ `B`.
    WrongUnit,
    /// Two price plans per node entry.
    TieredPlans,
    /// Answers padded past [`HUGE_BODY_BYTES`].
    HugeBody,
}

struct State {
    rates: Mutex<(f64, f64)>,
    failure: Mutex<PricingFailure>,
    requests: AtomicU64,
    last_headers: Mutex<BTreeMap<String, String>>,
}

impl State {
    fn rates(&self) -> (f64, f64) {
        *self.rates.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn failure(&self) -> PricingFailure {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A running fake of the pricing endpoints. Dropping it stops the server.
pub struct PricingFake {
    url: String,
    state: Arc<State>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl PricingFake {
    /// Binds an ephemeral port on 127.0.0.1 and starts serving in the background.
    pub async fn start(options: PricingFakeOptions) -> Result<PricingFake, SimError> {
        let listener = options
            .network
            .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .map_err(SimError::Bind)?;
        let address = listener.local_addr().map_err(SimError::Bind)?;
        let url = format!("http://{address}");
        let state = Arc::new(State {
            rates: Mutex::new((options.vcpu_rate, options.ram_rate_per_gb)),
            failure: Mutex::new(options.failure),
            requests: AtomicU64::new(0),
            last_headers: Mutex::new(BTreeMap::new()),
        });
        let (stop, stopped) = watch::channel(false);
        let served = state.clone();
        let task = tokio::spawn(crate::http_server::serve(
            listener,
            stopped,
            "fake Clever Cloud pricing API",
            move |request| {
                let state = served.clone();
                async move { handle(&state, request) }
            },
        ));
        tracing::info!(%url, "fake Clever Cloud pricing API listening");
        Ok(PricingFake {
            url,
            state,
            stop,
            task: Some(task),
        })
    }

    /// The base URL, `http://127.0.0.1:<port>`: the plugin's `endpoint`, and what to grant.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Changes the failure mode; applies to the next request.
    pub fn set_failure(&self, failure: PricingFailure) {
        *self.state.failure.lock().unwrap_or_else(|p| p.into_inner()) = failure;
    }

    /// Changes the rates of the price list (EUR per vCPU-hour and per GB-hour).
    pub fn set_rates(&self, vcpu: f64, ram_per_gb: f64) {
        *self.state.rates.lock().unwrap_or_else(|p| p.into_inner()) = (vcpu, ram_per_gb);
    }

    /// Requests received so far, errors included.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The headers of the last request, names in lower case (a repeated name keeps its last
    /// value).
    pub fn last_request_headers(&self) -> BTreeMap<String, String> {
        self.state
            .last_headers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stops serving and waits for the server task to end.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for PricingFake {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

type HttpResponse = Response<Full<Bytes>>;

fn respond(status: u16, body: String) -> HttpResponse {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("static response parts are valid")
}

fn error(status: u16, id: u32, message: &str) -> HttpResponse {
    respond(
        status,
        json!({"id": id, "message": message, "type": "error"}).to_string(),
    )
}

fn handle(state: &State, request: Request<Incoming>) -> HttpResponse {
    state.requests.fetch_add(1, Ordering::SeqCst);
    let headers = request
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    *state.last_headers.lock().unwrap_or_else(|p| p.into_inner()) = headers;
    let path = request.uri().path().trim_end_matches('/');
    let query = request.uri().query().unwrap_or_default();
    let is_product = path == "/v4/kubernetes-product";
    let is_prices = path == "/v4/billing/price-system";
    if !is_product && !is_prices {
        return error(404, 4004, &format!("no such endpoint {path}"));
    }
    if request.method() != Method::GET {
        return error(
            405,
            4005,
            &format!("{} is not allowed here", request.method()),
        );
    }
    if is_prices {
        let zone = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(name, _)| *name == "zone_id")
            .map(|(_, value)| crate::http_server::percent_decode(value));
        if zone.as_deref() != Some(ZONE) {
            return error(
                404,
                4004,
                &format!("zone {} not found", zone.as_deref().unwrap_or("(none)")),
            );
        }
    }
    let failure = state.failure();
    if failure == PricingFailure::ServerError {
        return error(500, 5000, "internal server error (injected)");
    }
    let mut doc = if is_product {
        product()
    } else {
        price_system(state.rates(), failure)
    };
    match failure {
        PricingFailure::MalformedJson => {
            let text = doc.to_string();
            return respond(200, text[..text.len() / 2].to_string());
        }
        PricingFailure::HugeBody => {
            doc["padding"] = Value::String("x".repeat(HUGE_BODY_BYTES));
        }
        _ => {}
    }
    respond(200, doc.to_string())
}

/// The product answer: the two topologies and the Kubernetes versions.
fn product() -> Value {
    json!({
        "topologies": [
            {"topology": "ALL_IN_ONE", "description": "control plane and workloads on the same nodes",
             "availableFlavors": ["S", "M", "L", "XL"]},
            {"topology": "DISTRIBUTED", "description": "dedicated control plane, node groups for workloads",
             "availableFlavors": ["2XS", "XS", "S", "M", "L", "XL"]}
        ],
        "versions": {"available": ["1.36"], "default": "1.36"}
    })
}

/// One price-list entry, with the fields real entries carry besides the ones consumers read.
fn countable(service: &str, unit: &str, quantity: u64, plans: &[f64]) -> Value {
    let plans: Vec<Value> = plans
        .iter()
        .enumerate()
        .map(|(i, price)| json!({"plan_id": format!("plan_{service}_{i}"), "max_quantity": null, "price": price}))
        .collect();
    json!({
        "service": service,
        "name": service.replace('.', " "),
        "data_unit": unit,
        "data_quantity_for_price": {"secability": "CONTINUOUS", "quantity": quantity},
        "time_interval_for_price": "PT1H",
        "first_x_free": 0,
        "price_plans": plans,
    })
}

/// The price list at `(vcpu, ram per GB)`, bent by `failure` where it concerns the list.
fn price_system((vcpu, ram): (f64, f64), failure: PricingFailure) -> Value {
    let tiers = |price: f64| {
        if failure == PricingFailure::TieredPlans {
            vec![price, price * 0.8]
        } else {
            vec![price]
        }
    };
    let (ram_unit, ram_quantity) = if failure == PricingFailure::WrongUnit {
        ("GB", 1)
    } else {
        ("B", 1_000_000_000)
    };
    let currency = if failure == PricingFailure::WrongCurrency {
        "USD"
    } else {
        "EUR"
    };
    json!({
        "zone_id": ZONE,
        "currency": currency,
        "id": "price-system-par",
        "runtime": [],
        "countable": [
            countable("kubernetes.node.vcpu", "vcpu", 1, &tiers(vcpu)),
            countable("kubernetes.node.ram", ram_unit, ram_quantity, &tiers(ram)),
            countable("kubernetes.controlPlane.distributed.vcpu", "vcpu", 1, &[vcpu]),
            countable("kubernetes.controlPlane.distributed.ram", "B", 1_000_000_000, &[ram]),
            countable("kubernetes.controlPlane.allInOne.vcpu", "vcpu", 1, &[vcpu]),
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// `GET url` with the headers the plugin sends; the status and the body.
    async fn get(url: &str) -> (u16, Vec<u8>) {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let request = Request::get(url)
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, "test/1")
            .body(Full::default())
            .unwrap();
        let response = client.request(request).await.unwrap();
        let status = response.status().as_u16();
        (
            status,
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
    }

    async fn get_json(url: &str) -> Value {
        let (status, body) = get(url).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).unwrap()
    }

    fn entry<'a>(doc: &'a Value, service: &str) -> &'a Value {
        doc["countable"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["service"] == service)
            .unwrap()
    }

    #[tokio::test]
    async fn serves_the_reference_shapes_at_the_current_rates() {
        let fake = PricingFake::start(PricingFakeOptions::default())
            .await
            .unwrap();
        let product = get_json(&format!("{}/v4/kubernetes-product", fake.url())).await;
        let distributed = product["topologies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["topology"] == "DISTRIBUTED")
            .unwrap();
        assert_eq!(
            distributed["availableFlavors"],
            json!(["2XS", "XS", "S", "M", "L", "XL"])
        );
        assert_eq!(product["versions"]["default"], "1.36");

        let prices = get_json(&format!(
            "{}/v4/billing/price-system?zone_id=par",
            fake.url()
        ))
        .await;
        assert_eq!(
            (prices["zone_id"].as_str(), prices["currency"].as_str()),
            (Some("par"), Some("EUR"))
        );
        let vcpu = entry(&prices, "kubernetes.node.vcpu");
        assert_eq!(
            (
                vcpu["data_unit"].as_str(),
                vcpu["data_quantity_for_price"]["quantity"].as_u64()
            ),
            (Some("vcpu"), Some(1))
        );
        assert_eq!(vcpu["price_plans"].as_array().unwrap().len(), 1);
        assert_eq!(
            vcpu["price_plans"][0]["price"].as_f64(),
            Some(DEFAULT_VCPU_RATE)
        );
        let ram = entry(&prices, "kubernetes.node.ram");
        assert_eq!(
            (
                ram["data_unit"].as_str(),
                ram["data_quantity_for_price"]["quantity"].as_u64()
            ),
            (Some("B"), Some(1_000_000_000))
        );
        assert_eq!(
            ram["price_plans"][0]["price"].as_f64(),
            Some(DEFAULT_RAM_RATE_PER_GB)
        );
        assert!(prices["countable"].as_array().unwrap().iter().any(|c| {
            c["service"]
                .as_str()
                .unwrap()
                .starts_with("kubernetes.controlPlane.")
        }));

        fake.set_rates(0.003, 0.006);
        let prices = get_json(&format!(
            "{}/v4/billing/price-system?zone_id=par",
            fake.url()
        ))
        .await;
        assert_eq!(
            entry(&prices, "kubernetes.node.vcpu")["price_plans"][0]["price"].as_f64(),
            Some(0.003)
        );
        assert_eq!(
            entry(&prices, "kubernetes.node.ram")["price_plans"][0]["price"].as_f64(),
            Some(0.006)
        );
        assert_eq!(fake.requests(), 3);
        let headers = fake.last_request_headers();
        assert_eq!(
            (headers["accept"].as_str(), headers["user-agent"].as_str()),
            ("application/json", "test/1")
        );
        fake.shutdown().await;
    }

    #[tokio::test]
    async fn other_zones_paths_and_methods_are_refused() {
        let fake = PricingFake::start(PricingFakeOptions::default())
            .await
            .unwrap();
        for path in [
            "/v4/billing/price-system?zone_id=rbx",
            "/v4/billing/price-system",
            "/v4/products",
            "/",
        ] {
            let (status, body) = get(&format!("{}{path}", fake.url())).await;
            assert_eq!(status, 404, "{path}");
            let error: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(error["type"], "error");
        }
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let post = Request::post(format!("{}/v4/kubernetes-product", fake.url()))
            .body(Full::default())
            .unwrap();
        assert_eq!(client.request(post).await.unwrap().status().as_u16(), 405);
        assert_eq!(fake.requests(), 5);
    }

    #[tokio::test]
    async fn each_failure_mode_bends_the_answers_as_documented() {
        let fake = PricingFake::start(PricingFakeOptions {
            failure: PricingFailure::ServerError,
            ..Default::default()
        })
        .await
        .unwrap();
        let product_url = format!("{}/v4/kubernetes-product", fake.url());
        let prices_url = format!("{}/v4/billing/price-system?zone_id=par", fake.url());
        assert_eq!(get(&product_url).await.0, 500);
        assert_eq!(get(&prices_url).await.0, 500);

        fake.set_failure(PricingFailure::MalformedJson);
        for url in [&product_url, &prices_url] {
            let (status, body) = get(url).await;
            assert_eq!(status, 200);
            assert!(serde_json::from_slice::<Value>(&body).is_err());
        }

        fake.set_failure(PricingFailure::HugeBody);
        for url in [&product_url, &prices_url] {
            let (status, body) = get(url).await;
            assert_eq!(status, 200);
            assert!(body.len() > HUGE_BODY_BYTES && body.len() > 1024 * 1024);
            assert!(
                serde_json::from_slice::<Value>(&body).is_ok(),
                "still valid JSON"
            );
        }

        fake.set_failure(PricingFailure::WrongCurrency);
        assert_eq!(get_json(&prices_url).await["currency"], "USD");
        assert_eq!(
            get_json(&product_url).await,
            product(),
            "the product answer stays normal"
        );

        fake.set_failure(PricingFailure::WrongUnit);
        let ram = get_json(&prices_url).await;
        assert_eq!(entry(&ram, "kubernetes.node.ram")["data_unit"], "GB");

        fake.set_failure(PricingFailure::TieredPlans);
        let tiered = get_json(&prices_url).await;
        for service in ["kubernetes.node.vcpu", "kubernetes.node.ram"] {
            assert_eq!(
                entry(&tiered, service)["price_plans"]
                    .as_array()
                    .unwrap()
                    .len(),
                2,
                "{service}"
            );
        }

        fake.set_failure(PricingFailure::None);
        assert_eq!(get_json(&prices_url).await["currency"], "EUR");
    }

    #[test]
    fn failure_modes_read_from_camel_case() {
        let modes: Vec<PricingFailure> = serde_json::from_str(
            r#"["none", "serverError", "malformedJson", "wrongCurrency", "wrongUnit", "tieredPlans", "hugeBody"]"#,
        )
        .unwrap();
        assert_eq!(modes.len(), 7);
        assert_eq!(modes[6], PricingFailure::HugeBody);
        assert_eq!(PricingFailure::default(), PricingFailure::None);
    }
}
