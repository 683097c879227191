//! systemd's readiness protocol (`sd_notify(3)`), for `Type=notify` units: the unit counts
//! as started only once every volume socket listens, so services ordered after it
//! (libvirtd, the VMs) never find a socket missing.
//!
//! A datagram of `KEY=value` lines to the socket named by `$NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`). Without the variable this does nothing.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `"READY=1\nSTATUS=serving 4 volumes"`). Returns false when not
/// run by systemd.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let target = target.to_string_lossy().into_owned();
    let addr = match target.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        None => SocketAddr::from_pathname(&target)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both address forms systemd uses; one test, since it sets the process environment.
    #[test]
    fn sends_the_state_to_a_path_or_an_abstract_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1").unwrap());
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("vhost-iocost-test-{}", std::process::id());
        let abstract_listener =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
        assert!(notify("STOPPING=1").unwrap());
        let n = abstract_listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");

        std::env::remove_var("NOTIFY_SOCKET");
        assert!(!notify("READY=1").unwrap());
    }
}
