//! The control server: HTTP/1.1 on a unix socket, on its own thread with its own
//! single-threaded tokio runtime.
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
use tokio::sync::Notify;

/// A running control server.
pub struct ControlServer {
    socket: PathBuf,
    bound: Option<crate::socket_path::SocketId>,
    shutdown: Arc<Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Bind `path` with mode 0600, replacing a stale socket ([`crate::socket_path::claim`]).
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let what = |msg: String| io::Error::other(format!("control socket {}: {msg}", path.display()));
    crate::socket_path::claim(path, "control socket")?;
    // SAFETY: umask(2) only swaps the process file-creation mask; restored right after.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = bound.map_err(|e| what(format!("cannot listen: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| what(format!("cannot set mode 0600: {e}")))?;
    Ok(listener)
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
async fn serve_limited(
    listener: tokio::net::UnixListener,
    router: axum::Router,
    stop: Arc<Notify>,
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
            _ = stop.notified() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("control socket: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if let Some(more) = refused.check() {
                tracing::warn!(
                    refused_since_last = more,
                    "control socket: {MAX_CONNECTIONS} connections open; refusing more"
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
                tracing::debug!("control connection: {e}");
            }
            drop(slot);
        });
    }
}

impl ControlServer {
    /// Serve `ctl` on `listener` (bound at `socket`) in a new thread.
    pub fn start(ctl: Arc<Control>, listener: UnixListener, socket: PathBuf) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let shutdown = Arc::new(Notify::new());
        let stop = shutdown.clone();
        let router = handlers::routes().into_router(ctl.clone());
        let path = socket.clone();
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::UnixListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("control socket: {e}");
                            return;
                        }
                    };
                    // Rates (IOPS, bytes/s) are measured between samples once a second.
                    let sampler = ctl.clone();
                    tokio::spawn(async move {
                        let mut tick = tokio::time::interval(Duration::from_secs(1));
                        loop {
                            tick.tick().await;
                            sampler.sample();
                        }
                    });
                    tracing::info!(socket = %path.display(), "control API listening");
                    serve_limited(listener, router, stop).await;
                });
            })?;
        Ok(ControlServer {
            bound: crate::socket_path::id(&socket),
            socket,
            shutdown,
            thread: Some(thread),
        })
    }

    /// Stop serving (waiting up to 2 s for requests in progress) and remove the socket.
    pub fn stop(mut self) {
        self.shutdown.notify_one();
        if let Some(t) = self.thread.take() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        crate::socket_path::remove_if_ours(&self.socket, self.bound);
    }
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
