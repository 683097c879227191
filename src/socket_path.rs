//! Claiming a path for a listening Unix socket without destroying anything.
//!
//! A socket path in the configuration may be mistyped to name a disk image, or may
//! belong to a daemon that is still running. Only a *stale* socket (one nobody listens
//! on any more) is removed; anything else is an error that names the path and leaves it
//! alone. On shutdown a socket is removed only if it is still the one this process
//! bound, not a successor's.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The longest path a Unix socket can be bound at (`sun_path` holds 108 bytes, the last
/// a NUL).
pub const MAX_LEN: usize = 107;

/// The hand-over socket of a volume whose socket is `socket`: `<socket>.handover`, where a
/// second frontend (a migration's destination on this host) attaches while the first is
/// still connected (design §8.9).
pub fn handover(socket: &Path) -> std::path::PathBuf {
    let mut path = socket.as_os_str().to_owned();
    path.push(".handover");
    path.into()
}

/// The identity of a bound socket file (device, inode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketId(u64, u64);

/// Make `path` free for a new socket: nothing there (its directory is created), or a
/// stale socket, which is removed. `what` names the path in errors (`"control socket"`,
/// `"volume r0: socket"`).
pub fn claim(path: &Path, what: &str) -> io::Result<()> {
    let fail = |msg: String| io::Error::other(format!("{what} {}: {msg}", path.display()));
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path) {
            Ok(_) => {
                return Err(fail(
                    "another process is listening on it (is another daemon running?)".into(),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing stale {what}");
                std::fs::remove_file(path)
                    .map_err(|e| fail(format!("cannot remove the stale socket: {e}")))?;
            }
            Err(e) => return Err(fail(format!("exists and cannot be probed: {e}"))),
        },
        Ok(_) => return Err(fail(
            "exists and is not a socket; nothing was removed (remove it or choose another path)"
                .into(),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e.to_string())),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| fail(format!("cannot create its directory: {e}")))?;
    }
    Ok(())
}

/// Gives the socket at `path` permission bits `mode` and group `gid` (each if given).
/// Called right after binding; until then the umask's bits apply (the systemd unit's
/// `UMask=0077` lets nobody else connect in between).
pub fn set_access(path: &Path, mode: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The identity of the socket now at `path` (call right after binding it).
pub fn id(path: &Path) -> Option<SocketId> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    meta.file_type()
        .is_socket()
        .then(|| SocketId(meta.dev(), meta.ino()))
}

/// Remove the socket at `path` if it is still the one identified by `bound`.
pub fn remove_if_ours(path: &Path, bound: Option<SocketId>) {
    if bound.is_some() && id(path) == bound {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_regular_file_is_never_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let image = dir.join("disk.img");
        std::fs::write(&image, b"precious").unwrap();
        let e = claim(&image, "volume v: socket").unwrap_err().to_string();
        assert!(
            e.contains("is not a socket") && e.contains("volume v"),
            "{e}"
        );
        assert_eq!(std::fs::read(&image).unwrap(), b"precious");
    }

    #[test]
    fn a_live_socket_is_refused_and_a_stale_one_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let path = dir.join("s.sock");
        let live = UnixListener::bind(&path).unwrap();
        let e = claim(&path, "control socket").unwrap_err().to_string();
        assert!(e.contains("another process is listening"), "{e}");
        assert!(id(&path).is_some(), "the live socket is still there");
        drop(live); // the file stays, nobody listens: stale
        claim(&path, "control socket").unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn only_the_socket_this_process_bound_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("s.sock");
        let _first = UnixListener::bind(&path).unwrap();
        let ours = id(&path);
        // Another socket takes the path (bound elsewhere, renamed over it).
        let elsewhere = tmp.path().join("other.sock");
        let _successor = UnixListener::bind(&elsewhere).unwrap();
        std::fs::rename(&elsewhere, &path).unwrap();
        remove_if_ours(&path, ours);
        assert!(path.exists(), "a successor's socket is left alone");
        let theirs = id(&path);
        remove_if_ours(&path, theirs);
        assert!(!path.exists());
    }
}
