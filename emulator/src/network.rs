//! The network the emulated world's servers listen on: loopback TCP, or an in-process
//! network of memory pipes.
//!
//! In real time ([`Network::tcp`]) every server (the Kubernetes API, the simulated cloud, the
//! fakes of Exoscale and Clever Cloud) binds a loopback port that kubectl, Helm or a separate
//! `joinery run` can reach. In virtual time ([`Network::in_process`]) nothing touches the
//! kernel: a server "listens" on an address handed out by the network (127.0.0.1 with ports
//! counted up from [`FIRST_VIRTUAL_PORT`], the same on every run), and a client dialling that
//! address gets one end of a [`tokio::io::duplex`] pipe whose other end the server accepts.
//! The HTTP spoken over the pipe is the same HTTP/1.1 as over TCP. Because every byte moves
//! inside the one executor, the executor knows when the whole world is waiting, which is
//! what lets a paused clock jump to the next timer (see docs/simulate.md).

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// The first port an in-process network hands out.
pub const FIRST_VIRTUAL_PORT: u16 = 40_001;

/// Bytes a pipe buffers in each direction before a writer waits for its reader.
const PIPE_BUFFER: usize = 256 * 1024;

/// A byte stream a server accepted: a TCP connection or one end of an in-process pipe.
pub trait ByteStream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> ByteStream for T {}

/// Where the emulated world's servers listen. Cheap to clone; clones share one network.
#[derive(Clone, Default)]
pub struct Network {
    /// `None`: loopback TCP.
    pipes: Option<Arc<Mutex<Pipes>>>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_in_process() {
            "Network::in_process"
        } else {
            "Network::tcp"
        })
    }
}

/// Two handles are equal when they are the same network.
impl PartialEq for Network {
    fn eq(&self, other: &Network) -> bool {
        match (&self.pipes, &other.pipes) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[derive(Default)]
struct Pipes {
    next_port: u16,
    listeners: BTreeMap<SocketAddr, mpsc::UnboundedSender<DuplexStream>>,
}

/// A listening socket of a [`Network`].
pub enum Listener {
    /// A loopback TCP listener.
    Tcp(TcpListener),
    /// The accepting end of an in-process address.
    Pipe {
        /// The address clients dial.
        address: SocketAddr,
        /// Server ends of the pipes clients dialled.
        incoming: mpsc::UnboundedReceiver<DuplexStream>,
    },
}

impl Network {
    /// Loopback TCP (the default): servers bind real ports.
    pub fn tcp() -> Network {
        Network { pipes: None }
    }

    /// An in-process network of memory pipes, with its own port numbering.
    pub fn in_process() -> Network {
        Network {
            pipes: Some(Arc::new(Mutex::new(Pipes {
                next_port: FIRST_VIRTUAL_PORT,
                listeners: BTreeMap::new(),
            }))),
        }
    }

    /// Whether servers on this network listen in-process.
    pub fn is_in_process(&self) -> bool {
        self.pipes.is_some()
    }

    /// Listens on `address` (port 0: the next free port). In-process, the address is
    /// 127.0.0.1 with a port the network counts up; a port already taken is refused.
    pub async fn bind(&self, address: SocketAddr) -> io::Result<Listener> {
        let Some(pipes) = &self.pipes else {
            return Ok(Listener::Tcp(TcpListener::bind(address).await?));
        };
        let mut pipes = pipes.lock().unwrap_or_else(|p| p.into_inner());
        let address = if address.port() == 0 {
            loop {
                let candidate = SocketAddr::from(([127, 0, 0, 1], pipes.next_port));
                pipes.next_port = pipes.next_port.checked_add(1).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::AddrNotAvailable, "no ports left")
                })?;
                if !pipes.listeners.contains_key(&candidate) {
                    break candidate;
                }
            }
        } else {
            address
        };
        if pipes.listeners.contains_key(&address) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{address} is already listening on the in-process network"),
            ));
        }
        let (sender, incoming) = mpsc::unbounded_channel();
        pipes.listeners.insert(address, sender);
        Ok(Listener::Pipe { address, incoming })
    }

    /// Dials `address` on the in-process network: the client's end of a new pipe, or `None`
    /// on a TCP network (the caller connects over TCP). Nobody listening there is an error,
    /// as a refused connection is.
    pub fn dial(&self, address: SocketAddr) -> Option<io::Result<DuplexStream>> {
        let pipes = self.pipes.as_ref()?;
        let mut pipes = pipes.lock().unwrap_or_else(|p| p.into_inner());
        let refused = || {
            io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("nothing listens on {address} in the in-process network"),
            )
        };
        let Some(listener) = pipes.listeners.get(&address) else {
            return Some(Err(refused()));
        };
        let (client, server) = tokio::io::duplex(PIPE_BUFFER);
        if listener.send(server).is_err() {
            pipes.listeners.remove(&address);
            return Some(Err(refused()));
        }
        Some(Ok(client))
    }

    /// A connector for `hyper_util`'s client that dials this network: in-process pipes, or
    /// TCP on a TCP network.
    pub fn connector(&self) -> Connector {
        Connector {
            network: self.clone(),
            tcp: hyper_util::client::legacy::connect::HttpConnector::new(),
        }
    }
}

impl Listener {
    /// The address clients reach this listener at.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(listener) => listener.local_addr(),
            Listener::Pipe { address, .. } => Ok(*address),
        }
    }

    /// The next connection and who made it; `None` once the network is gone.
    pub async fn accept(&mut self) -> Option<io::Result<(Box<dyn ByteStream>, String)>> {
        match self {
            Listener::Tcp(listener) => {
                Some(listener.accept().await.map(|(stream, peer)| {
                    (Box::new(stream) as Box<dyn ByteStream>, peer.to_string())
                }))
            }
            Listener::Pipe { incoming, .. } => incoming.recv().await.map(|stream| {
                Ok((
                    Box::new(stream) as Box<dyn ByteStream>,
                    "in-process".to_string(),
                ))
            }),
        }
    }
}

/// A [`Network`]'s connector for `hyper_util`'s legacy client.
#[derive(Clone)]
pub struct Connector {
    network: Network,
    tcp: hyper_util::client::legacy::connect::HttpConnector,
}

/// A connection a [`Connector`] made.
pub enum NetStream {
    /// Over TCP.
    Tcp(TokioIo<tokio::net::TcpStream>),
    /// Over an in-process pipe.
    Pipe(TokioIo<DuplexStream>),
}

type ConnectFuture = Pin<Box<dyn Future<Output = io::Result<NetStream>> + Send>>;

impl tower::Service<http::Uri> for Connector {
    type Response = NetStream;
    type Error = io::Error;
    type Future = ConnectFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<http::Uri>::poll_ready(&mut self.tcp, cx).map_err(io::Error::other)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        if self.network.is_in_process() {
            let network = self.network.clone();
            return Box::pin(async move {
                let address = uri_address(&uri)?;
                let pipe = network
                    .dial(address)
                    .expect("an in-process network dials in-process")?;
                Ok(NetStream::Pipe(TokioIo::new(pipe)))
            });
        }
        let connecting = tower::Service::call(&mut self.tcp, uri);
        Box::pin(async move {
            let stream = connecting.await.map_err(io::Error::other)?;
            Ok(NetStream::Tcp(TokioIo::new(stream.into_inner())))
        })
    }
}

/// The socket address a URI names (`http://127.0.0.1:40001`): in-process addresses are
/// always IP literals with a port.
fn uri_address(uri: &http::Uri) -> io::Result<SocketAddr> {
    let authority = uri
        .authority()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri} has no host")))?;
    authority.as_str().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{authority} is not an in-process address (ip:port)"),
        )
    })
}

impl Connection for NetStream {
    fn connected(&self) -> Connected {
        match self {
            NetStream::Tcp(stream) => stream.inner().connected(),
            NetStream::Pipe(_) => Connected::new(),
        }
    }
}

impl hyper::rt::Read for NetStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NetStream::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            NetStream::Pipe(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for NetStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            NetStream::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            NetStream::Pipe(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NetStream::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            NetStream::Pipe(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            NetStream::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            NetStream::Pipe(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}
