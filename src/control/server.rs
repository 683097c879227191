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
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// A running control server.
pub struct ControlServer {
    socket: PathBuf,
    shutdown: Arc<Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Bind `path` with mode 0600, replacing a stale socket.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let what = |msg: String| io::Error::other(format!("control socket {}: {msg}", path.display()));
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(what(
                    "another process is listening on it (is another daemon running?)".into(),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing stale control socket");
                std::fs::remove_file(path)
                    .map_err(|e| what(format!("cannot remove the stale socket: {e}")))?;
            }
            Err(e) => return Err(what(format!("exists and cannot be probed: {e}"))),
        },
        Ok(_) => {
            return Err(what(
                "exists and is not a socket; remove it or set another [control] socket".into(),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(what(e.to_string())),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| what(format!("cannot create its directory: {e}")))?;
    }
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
                    if let Err(e) = axum::serve(listener, router)
                        .with_graceful_shutdown(async move { stop.notified().await })
                        .await
                    {
                        tracing::error!("control server failed: {e}");
                    }
                });
            })?;
        Ok(ControlServer {
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
        let _ = std::fs::remove_file(&self.socket);
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
