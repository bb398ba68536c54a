//! The host's Kubernetes clients, with every request bounded in time.
//!
//! `kube`'s defaults leave a request unbounded once connected: an API server (or a proxy in
//! front of it) that accepts a request and never answers would stall the loop that sent it
//! for as long as the connection lives, minutes or forever. Here every request gets a
//! deadline ([`REQUEST_DEADLINE`]) for its whole exchange: connecting, sending, the response's
//! head and, except for watches, its whole body. A watch's stream is long-lived by design;
//! its head is bounded here and its silence by `kube`'s watcher (an idle timeout past the
//! server-side watch timeout).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use kube::client::{Body, ClientBuilder};

/// How long one request may take, from connecting to the last byte of a non-watch response.
/// Generous for a list page of 500 objects on a loaded API server; far shorter than the
/// connection lifetimes a stuck request could otherwise last.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(60);

/// How long opening a connection to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request went past its deadline.
#[derive(Debug, thiserror::Error)]
#[error(
    "the Kubernetes API server did not answer within {0:?} (the request deadline); check the API server's health and the network path to it"
)]
pub struct DeadlineExceeded(pub Duration);

/// A client for `config` whose requests are bounded as this module describes.
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(ClientBuilder::try_from(config)?
        .with_layer(&RequestDeadlineLayer(REQUEST_DEADLINE))
        .build())
}

/// A `tower` layer bounding each request's whole exchange by a deadline (see the module
/// doc); for watches, only until the response's head.
#[derive(Debug, Clone, Copy)]
pub struct RequestDeadlineLayer(pub Duration);

impl<S> tower::Layer<S> for RequestDeadlineLayer {
    type Service = RequestDeadline<S>;

    fn layer(&self, inner: S) -> RequestDeadline<S> {
        RequestDeadline {
            inner,
            deadline: self.0,
        }
    }
}

/// The service [`RequestDeadlineLayer`] wraps around a client's stack.
#[derive(Debug, Clone)]
pub struct RequestDeadline<S> {
    inner: S,
    deadline: Duration,
}

/// The body of a bounded response: a non-watch response's body, read in full within the
/// deadline, or a watch's stream.
pub type BoundedBody = UnsyncBoxBody<Bytes, BoxError>;

impl<S, B> tower::Service<Request<Body>> for RequestDeadline<S>
where
    S: tower::Service<Request<Body>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<BoundedBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<BoundedBody>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let watch = is_watch(request.uri());
        let deadline = self.deadline;
        let exchange = self.inner.call(request);
        Box::pin(async move {
            let bounded = async {
                let response = exchange.await.map_err(Into::into)?;
                let (head, body) = response.into_parts();
                let body = if watch {
                    body.map_err(Into::into).boxed_unsync()
                } else {
                    let bytes = body.collect().await.map_err(Into::into)?.to_bytes();
                    Full::new(bytes)
                        .map_err(|never| match never {})
                        .boxed_unsync()
                };
                Ok::<_, BoxError>(Response::from_parts(head, body))
            };
            match tokio::time::timeout(deadline, bounded).await {
                Ok(result) => result,
                Err(_) => Err(Box::new(DeadlineExceeded(deadline)) as BoxError),
            }
        })
    }
}

/// Whether a request asks for a watch stream (`watch=true` or `watch=1` in its query).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server on loopback that reads each request and then sends `reply` (perhaps nothing,
    /// perhaps a head without its body) and keeps the connection open.
    async fn stuck_server(reply: &'static [u8]) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = [0u8; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(reply).await;
                open.push(stream);
            }
        });
        url
    }

    fn config(url: &str) -> kube::Config {
        let mut config = kube::Config::new(url.parse().unwrap());
        config.default_namespace = "default".into();
        config
    }

    // The paused clock jumps to the deadline as soon as every task waits: no wall-clock race.
    #[tokio::test(start_paused = true)]
    async fn a_request_the_server_never_answers_fails_at_the_deadline() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = stuck_server(b"").await;
        let api = kube::Api::<ConfigMap>::default_namespaced(client(config(&url)).unwrap());
        let error = api.get("anything").await.unwrap_err();
        assert!(
            error.to_string().contains("did not answer within 60s"),
            "{error}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_response_whose_body_never_ends_fails_at_the_deadline() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = stuck_server(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"kind\"",
        )
        .await;
        let api = kube::Api::<ConfigMap>::default_namespaced(client(config(&url)).unwrap());
        let error = api.get("anything").await.unwrap_err();
        assert!(error.to_string().contains("request deadline"), "{error}");
    }

    #[test]
    fn watches_are_told_from_other_requests() {
        let uri = |s: &str| s.parse::<http::Uri>().unwrap();
        assert!(is_watch(&uri("/api/v1/pods?watch=true&resourceVersion=1")));
        assert!(is_watch(&uri("/api/v1/pods?labelSelector=a&watch=1")));
        assert!(!is_watch(&uri("/api/v1/pods?limit=500")));
        assert!(!is_watch(&uri("/api/v1/pods?watchdog=true")));
        assert!(!is_watch(&uri("/api/v1/pods")));
    }
}
