//! The HTTP endpoints `joinery run` serves: health probes on `HEALTH_PROBE_PORT`, metrics on
//! `METRICS_PORT`. hyper's HTTP/1 server, with limits so that no client can make them
//! unreachable: at most [`EndpointLimits::max_connections`] connections at a time (one over
//! the cap is closed at once, so a flood neither queues up nor uses up the process's file
//! descriptors), a request head must arrive within [`EndpointLimits::header_read_timeout`]
//! (an idle connection is cut), a whole exchange is cut after
//! [`EndpointLimits::connection_timeout`], and a failing `accept` backs off instead of
//! spinning. Both ports listen on every address without authentication, as upstream's do;
//! the chart's NetworkPolicy (`networkPolicy.enabled`) limits who reaches them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Limits of one endpoint server.
#[derive(Debug, Clone, Copy)]
pub struct EndpointLimits {
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// How long a connection may take to send its request head.
    pub header_read_timeout: Duration,
    /// How long one connection may last in all (a 15 MB scrape on a slow network included).
    pub connection_timeout: Duration,
}

impl Default for EndpointLimits {
    fn default() -> Self {
        EndpointLimits {
            max_connections: 64,
            header_read_timeout: Duration::from_secs(5),
            connection_timeout: Duration::from_secs(60),
        }
    }
}

/// The longest pause after a failed `accept` (the pause doubles from 10 ms up to this).
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Serves `GET`s on `listener` until the process ends: `route` maps a path (query left out)
/// to a status and a plain-text body, `None` answering 404.
pub async fn serve<F>(listener: TcpListener, limits: EndpointLimits, route: F)
where
    F: Fn(&str) -> Option<(u16, String)> + Send + Sync + 'static,
{
    let route = Arc::new(route);
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut backoff = Duration::ZERO;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                stream
            }
            Err(error) => {
                // Out of file descriptors, say: pause rather than retry in a tight loop.
                backoff = (backoff * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_BACKOFF);
                tracing::warn!(%error, pause = ?backoff, "cannot accept a connection on the probe or metrics port");
                tokio::time::sleep(backoff).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let route = route.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let route = route.clone();
                async move { Ok::<_, Infallible>(answer(&request, route.as_ref())) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(limits.connection_timeout, connection).await;
            drop(permit);
        });
    }
}

/// The response to one request.
fn answer<F>(request: &Request<Incoming>, route: &F) -> Response<Full<Bytes>>
where
    F: Fn(&str) -> Option<(u16, String)>,
{
    let (status, body) = if request.method() == hyper::Method::GET {
        route(request.uri().path()).unwrap_or((404, "not found".into()))
    } else {
        (405, "only GET is served".into())
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn server(limits: EndpointLimits) -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, limits, |path| {
            (path == "/healthz").then(|| (200, "ok".to_string()))
        }));
        address
    }

    /// The status line of a GET, or `None` if the server closed the connection first.
    async fn get(address: std::net::SocketAddr, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(address).await.ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await.ok()?;
        reply.lines().next().map(str::to_string)
    }

    #[tokio::test]
    async fn paths_answer_and_unknown_ones_are_404() {
        let address = server(EndpointLimits::default()).await;
        assert_eq!(
            get(address, "/healthz?x=1").await.unwrap(),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(
            get(address, "/nothing").await.unwrap(),
            "HTTP/1.1 404 Not Found"
        );
    }

    // The paused clock jumps to the next timer whenever every task waits: the idle
    // connections' header timeouts pass without a wall-clock race.
    #[tokio::test(start_paused = true)]
    async fn idle_connections_past_the_cap_are_cut_and_probes_get_through() {
        let address = server(EndpointLimits {
            max_connections: 4,
            ..EndpointLimits::default()
        })
        .await;
        let mut idle = Vec::new();
        for _ in 0..20 {
            idle.push(TcpStream::connect(address).await.unwrap());
        }
        let mut answered = None;
        for _ in 0..100 {
            if let Some(status) = get(address, "/healthz").await {
                answered = Some(status);
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert_eq!(answered.as_deref(), Some("HTTP/1.1 200 OK"));
        // The idle connections were closed by the server (past the cap at once, the others
        // at the header timeout): reading one ends.
        let mut buffer = [0u8; 16];
        for stream in &mut idle {
            assert!(matches!(stream.read(&mut buffer).await, Ok(0) | Err(_)));
        }
    }
}
