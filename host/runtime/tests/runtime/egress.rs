//! Plugins' outgoing HTTPS: the connection goes to the address the host checked (never a
//! second lookup), TLS is verified against the requested name with the operator's CA
//! bundle, and a forward proxy is used through `CONNECT` unless `NO_PROXY` says otherwise.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use joinery_runtime::egress::{Destination, Egress, EgressConfig, Proxy, ProxySettings, Timeouts};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A name that never resolves: reaching the server proves no lookup happened.
const NAME: &str = "pinned.joinery.invalid";
const CA: &[u8] = include_bytes!("../fixtures/ca.pem");
const CERT: &[u8] = include_bytes!("../fixtures/server.pem");
const KEY: &[u8] = include_bytes!("../fixtures/server.key");

const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    first_byte: Duration::from_secs(5),
};

/// An HTTPS server for [`NAME`] on loopback that answers every request with `pinned` and
/// records the request heads it saw.
async fn tls_server() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(CERT)
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_slice(KEY).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut reader = BufReader::new(tls);
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    head.push_str(&line);
                }
                log.lock().unwrap().push(head);
                let _ = reader
                    .get_mut()
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\npinned",
                    )
                    .await;
                let _ = reader.get_mut().shutdown().await;
            });
        }
    });
    (address, seen)
}

/// A forward proxy that records the `CONNECT` lines and tunnels to `target`, whatever the
/// line names (the test's name does not resolve).
async fn connect_proxy(target: SocketAddr) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    match client.read_u8().await {
                        Ok(b) => head.push(b),
                        Err(_) => return,
                    }
                }
                let first = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_string();
                log.lock().unwrap().push(first);
                let Ok(mut upstream) = TcpStream::connect(target).await else {
                    return;
                };
                let _ = client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (port, seen)
}

fn request() -> http::Request<wasmtime_wasi_http::WasiBody> {
    let body = Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync();
    http::Request::get(format!("https://{NAME}/v2/zone"))
        .header("host", NAME)
        .body(body)
        .unwrap()
}

fn trusting_the_test_ca(proxy: ProxySettings) -> Egress {
    let mut config = EgressConfig {
        proxy,
        ..Default::default()
    };
    config.add_ca_bundle(CA).unwrap();
    Egress::new(&config)
}

async fn fetch(
    egress: &Egress,
    pinned: SocketAddr,
) -> Result<(u16, String), wasmtime_wasi_http::Error> {
    let destination = Destination {
        scheme: "https".into(),
        host: NAME.into(),
        port: 443,
        pinned,
    };
    let (response, io) = egress.send(request(), &destination, TIMEOUTS).await?;
    let driver = tokio::spawn(Box::into_pin(io));
    let status = response.status().as_u16();
    let body = response.into_body().collect().await?.to_bytes();
    let _ = driver.await;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

#[tokio::test]
async fn the_connection_goes_to_the_checked_address() {
    let (address, seen) = tls_server().await;
    let egress = trusting_the_test_ca(ProxySettings::default());
    let (status, body) = fetch(&egress, address)
        .await
        .expect("the pinned address answers, with no lookup of the name");
    assert_eq!((status, body.as_str()), (200, "pinned"));
    let heads = seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 1);
    assert!(heads[0].starts_with("GET /v2/zone HTTP/1.1"), "{heads:?}");
    assert!(
        heads[0]
            .to_ascii_lowercase()
            .contains(&format!("host: {NAME}")),
        "{heads:?}"
    );
}

#[tokio::test]
async fn a_certificate_from_an_untrusted_ca_is_refused() {
    let (address, seen) = tls_server().await;
    let egress = Egress::new(&EgressConfig::default());
    let err = fetch(&egress, address)
        .await
        .expect_err("the test CA is not trusted without the bundle");
    assert!(matches!(err, wasmtime_wasi_http::Error::Tls(_)), "{err:?}");
    assert!(seen.lock().unwrap().is_empty(), "no request was sent");
}

#[tokio::test]
async fn a_proxy_is_used_through_connect_unless_no_proxy_names_the_host() {
    let (address, seen) = tls_server().await;
    let (proxy_port, tunnels) = connect_proxy(address).await;
    let proxy = Proxy {
        host: "127.0.0.1".into(),
        port: proxy_port,
    };
    // Pinned to a dead address: only the proxy can make this work.
    let dead: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let proxied = trusting_the_test_ca(ProxySettings {
        https: Some(proxy.clone()),
        ..Default::default()
    });
    let (status, body) = fetch(&proxied, dead).await.expect("through the proxy");
    assert_eq!((status, body.as_str()), (200, "pinned"));
    assert_eq!(
        tunnels.lock().unwrap().clone(),
        vec![format!("CONNECT {NAME}:443 HTTP/1.1")]
    );
    // NO_PROXY: straight to the pinned address, the proxy sees nothing more.
    let direct = trusting_the_test_ca(ProxySettings {
        https: Some(proxy),
        no_proxy: vec![".invalid".into()],
        ..Default::default()
    });
    fetch(&direct, address).await.expect("directly");
    assert_eq!(tunnels.lock().unwrap().len(), 1);
    assert_eq!(seen.lock().unwrap().len(), 2);
}
