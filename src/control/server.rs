//! The control server: HTTP/1.1 on a unix socket, and the read-only metrics listener
//! (`[metrics] listen`, TCP or a unix socket, `GET /metrics` alone), on one thread with
//! its own single-threaded tokio runtime.
//!
//! The data path never waits for it: worker threads share nothing with this thread but
//! atomics and the QoS device (whose lock the control plane takes exactly like the
//! planner does, briefly, to apply a change or read statistics).
//!
//! The socket is created with mode 0600 (umask 0177 around `bind`, then an explicit
//! chmod). An existing path is replaced only if it is a stale socket (a socket nobody
//! accepts on); anything else (a live daemon's socket, a regular file, a directory) is
//! a start-up error naming the path.

use super::context::Control;
use super::handlers;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A running control server.
pub struct ControlServer {
    /// The unix sockets it bound (removed when it stops, if still its own).
    sockets: Vec<(PathBuf, Option<crate::socket_path::SocketId>)>,
    shutdown: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Bind `path` with mode 0600, replacing a stale socket ([`crate::socket_path::claim`]).
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    bind_unix(path, "control socket", 0o600)
}

/// Bind `path` with `mode`, replacing a stale socket; errors name `what` and the path.
fn bind_unix(path: &Path, what: &str, mode: u32) -> io::Result<UnixListener> {
    let fail = |msg: String| io::Error::other(format!("{what} {}: {msg}", path.display()));
    crate::socket_path::claim(path, what)?;
    // SAFETY: umask(2) only swaps the process file-creation mask; restored right after.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound.map_err(|e| fail(format!("cannot listen: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| fail(format!("cannot set mode {mode:04o}: {e}")))?;
    Ok(listener)
}

/// The metrics listener, bound at start-up so that a taken port is a start-up error.
pub enum MetricsListener {
    Tcp(std::net::TcpListener),
    /// Mode 0660: whoever shares the daemon's group may scrape.
    Unix(UnixListener, PathBuf),
}

impl MetricsListener {
    /// Binds `[metrics] listen`.
    pub fn bind(addr: &crate::config::MetricsAddr) -> io::Result<Self> {
        use crate::config::MetricsAddr;
        match addr {
            MetricsAddr::Tcp(a) => std::net::TcpListener::bind(a)
                .map(MetricsListener::Tcp)
                .map_err(|e| io::Error::other(format!("metrics.listen {a}: cannot listen: {e}"))),
            MetricsAddr::Unix(path) => bind_unix(path, "metrics.listen", 0o660)
                .map(|l| MetricsListener::Unix(l, path.clone())),
        }
    }

    /// What it listens on, for the log: `127.0.0.1:9477` or the socket path.
    pub fn describe(&self) -> String {
        match self {
            MetricsListener::Tcp(l) => l
                .local_addr()
                .map_or_else(|e| format!("? ({e})"), |a| a.to_string()),
            MetricsListener::Unix(_, path) => path.display().to_string(),
        }
    }
}

/// What the servers accept connections on.
trait Accept: Send + 'static {
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    fn next(&self) -> impl std::future::Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn next(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn next(&self) -> io::Result<Self::Stream> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// The whole request header must arrive within this time of the connection's start or
/// of the previous response; a client that sends it more slowly is disconnected.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A request, its body read and its response computed, must finish within this time;
/// otherwise it gets 408.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The same for adding a volume (which may create and allocate its file), growing one
/// (which may allocate) and removing one (which waits for its in-flight requests): their
/// work goes on after a 408, so the answer should rather wait for it.
pub const LONG_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether a request adds, changes or removes a volume (see [`LONG_REQUEST_TIMEOUT`]).
fn is_long(req: &axum::extract::Request) -> bool {
    use axum::http::Method;
    let path = req.uri().path();
    (req.method() == Method::POST && path == "/v1/volumes")
        || ((req.method() == Method::DELETE || req.method() == Method::PATCH)
            && path.starts_with("/v1/volumes/"))
}
/// Connections served at once; the next one is closed at once until one ends.
pub const MAX_CONNECTIONS: usize = 64;

/// Serve `router` on `listener` until `stop` is notified, within the limits above: a
/// client that opens connections and sends nothing, or sends its request byte by byte,
/// holds a connection slot for at most [`HEADER_TIMEOUT`] and can never take more than
/// [`MAX_CONNECTIONS`] of them.
/// `what` names the listener in log lines.
async fn serve_limited<L: Accept>(
    listener: L,
    router: axum::Router,
    mut stop: watch::Receiver<bool>,
    what: &'static str,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let router = router.layer(axum::middleware::from_fn(
        |req: axum::extract::Request, next: axum::middleware::Next| async move {
            let limit = if is_long(&req) {
                LONG_REQUEST_TIMEOUT
            } else {
                REQUEST_TIMEOUT
            };
            match tokio::time::timeout(limit, next.run(req)).await {
                Ok(response) => response,
                Err(_) => axum::response::IntoResponse::into_response(super::error::ApiError {
                    status: axum::http::StatusCode::REQUEST_TIMEOUT,
                    field: None,
                    message: format!("request not complete within {limit:?}"),
                }),
            }
        },
    ));
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut refused = crate::logging::LogLimiter::new(Duration::from_secs(10));
    loop {
        let stream = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.next() => match accepted {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::warn!("{what}: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(more) = refused.check() {
                tracing::warn!(
                    refused_since_last = more,
                    "{what}: {MAX_CONNECTIONS} connections open; refusing more"
                );
            }
            continue; // dropping the stream closes it
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("{what} connection: {e}");
            }
            drop(slot);
        });
    }
}

impl ControlServer {
    /// Serve `ctl` in a new thread: the control API on `control` (a listener bound at
    /// its socket path), `GET /metrics` alone on `metrics`; either may be absent.
    pub fn start(
        ctl: Arc<Control>,
        control: Option<(UnixListener, PathBuf)>,
        metrics: Option<MetricsListener>,
    ) -> io::Result<Self> {
        // Its blocking threads (hot add, removal, resize) are started by the control
        // thread and run under its filter.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .on_thread_start(|| crate::seccomp::inherited(crate::seccomp::ThreadClass::Control))
            .build()?;
        let (shutdown, stop) = watch::channel(false);
        let mut sockets = Vec::new();
        if let Some((listener, path)) = &control {
            listener.set_nonblocking(true)?;
            sockets.push((path.clone(), crate::socket_path::id(path)));
        }
        match &metrics {
            Some(MetricsListener::Tcp(l)) => l.set_nonblocking(true)?,
            Some(MetricsListener::Unix(l, path)) => {
                l.set_nonblocking(true)?;
                sockets.push((path.clone(), crate::socket_path::id(path)));
            }
            None => {}
        }
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                crate::seccomp::confine(crate::seccomp::ThreadClass::Control);
                runtime.block_on(serve(ctl, control, metrics, stop))
            })?;
        Ok(ControlServer {
            sockets,
            shutdown,
            thread: Some(thread),
        })
    }

    /// Stop serving (waiting up to 2 s for requests in progress) and remove the sockets.
    pub fn stop(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.thread.take() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        for (path, bound) in &self.sockets {
            crate::socket_path::remove_if_ours(path, *bound);
        }
    }
}

/// The server thread's work: sample rates once a second, serve each listener until
/// `stop` is notified.
async fn serve(
    ctl: Arc<Control>,
    control: Option<(UnixListener, PathBuf)>,
    metrics: Option<MetricsListener>,
    stop: watch::Receiver<bool>,
) {
    // Rates (IOPS, bytes/s) are measured between samples once a second.
    let sampler = ctl.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            sampler.sample();
        }
    });
    let mut servers = tokio::task::JoinSet::new();
    if let Some(listener) = metrics {
        let router = handlers::metrics_router(ctl.clone());
        let stop = stop.clone();
        let at = listener.describe();
        match listener {
            MetricsListener::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
                Ok(l) => {
                    tracing::info!(address = %at, "metrics listening (GET /metrics)");
                    servers.spawn(
                        async move { serve_limited(l, router, stop, "metrics.listen").await },
                    );
                }
                Err(e) => tracing::error!("metrics.listen {at}: {e}"),
            },
            MetricsListener::Unix(l, _) => match tokio::net::UnixListener::from_std(l) {
                Ok(l) => {
                    tracing::info!(address = %at, "metrics listening (GET /metrics)");
                    servers.spawn(
                        async move { serve_limited(l, router, stop, "metrics.listen").await },
                    );
                }
                Err(e) => tracing::error!("metrics.listen {at}: {e}"),
            },
        }
    }
    if let Some((listener, path)) = control {
        let router = handlers::routes().into_router(ctl.clone());
        match tokio::net::UnixListener::from_std(listener) {
            Ok(l) => {
                tracing::info!(socket = %path.display(), "control API listening");
                servers
                    .spawn(async move { serve_limited(l, router, stop, "control socket").await });
            }
            Err(e) => tracing::error!("control socket: {e}"),
        }
    }
    while servers.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_0600_replaces_stale_refuses_live_and_non_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl.sock");
        let l = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = bind(&path).unwrap_err().to_string();
        assert!(e.contains("another process is listening"), "{e}");
        drop(l); // the file stays: now a stale socket
        assert!(path.exists());
        let _l = bind(&path).unwrap();
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let e = bind(&file).unwrap_err().to_string();
        assert!(e.contains("is not a socket") && e.contains("plain"), "{e}");
    }
}
