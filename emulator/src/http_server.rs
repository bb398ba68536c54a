//! The HTTP/1 accept loop every server of the emulated world shares (the Kubernetes API, the
//! simulated cloud, the fakes of Exoscale and Clever Cloud), on loopback TCP or on the
//! in-process network (see [`crate::network`]).

use std::convert::Infallible;
use std::future::Future;

use http::{Request, Response};
use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use crate::network::Listener;

/// Serves each connection of `listener` with `handle` until `stopped` turns true; open
/// connections are dropped then too. `server` names the server in logs.
pub(crate) async fn serve<H, Fut, B>(
    mut listener: Listener,
    mut stopped: watch::Receiver<bool>,
    server: &'static str,
    handle: H,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connections_stopped = stopped.clone();
    loop {
        tokio::select! {
            biased;
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Some(Ok(pair)) => pair,
                    None => break,
                    Some(Err(error)) => {
                        tracing::warn!(%error, server, "accept failed");
                        continue;
                    }
                };
                let handle = handle.clone();
                let mut connection_stopped = connections_stopped.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let answer = handle(request);
                        async move { Ok::<_, Infallible>(answer.await) }
                    });
                    let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        biased;
                        result = connection => {
                            if let Err(error) = result {
                                tracing::debug!(%error, %peer, server, "connection ended with an error");
                            }
                        }
                        _ = connection_stopped.wait_for(|stop| *stop) => {}
                    }
                });
            }
            _ = stopped.wait_for(|stop| *stop) => break,
        }
    }
    tracing::debug!(server, "stopped accepting connections");
}

/// Decodes a URL query component: `+` becomes a space and `%XX` the byte it names; a
/// malformed escape is kept as written.
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        match bytes[index] {
            b'+' => decoded.push(b' '),
            b'%' if index + 2 < bytes.len() => {
                let hex_digits = std::str::from_utf8(&bytes[index + 1..index + 3]).ok();
                match hex_digits.and_then(|digits| u8::from_str_radix(digits, 16).ok()) {
                    Some(byte) => {
                        decoded.push(byte);
                        index += 2;
                    }
                    None => decoded.push(b'%'),
                }
            }
            other => decoded.push(other),
        }
        index += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}
