//! Which processes may be a volume's frontend: the peer's credentials, as the kernel
//! gives them for a Unix socket (`SO_PEERCRED`: the connecting process's pid, uid and
//! gid), checked before any vhost-user message is read. Socket permissions decide who may
//! connect at all; this decides, among those, who is served (`allowed_uids`,
//! `allowed_gids`).

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The credentials of a connected peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// The peer of `stream`, from the kernel.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given, and the fd is
    // the open socket `stream` owns.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The users and groups a volume serves (both empty: any peer that can connect).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerFilter {
    pub uids: Vec<u32>,
    pub gids: Vec<u32>,
}

impl PeerFilter {
    /// Neither list is given: any peer that can connect is served, unasked.
    pub fn is_open(&self) -> bool {
        self.uids.is_empty() && self.gids.is_empty()
    }

    /// Whether `peer` may be the frontend: its uid is listed, or its gid is; anyone when
    /// neither list is given.
    pub fn admits(&self, peer: &PeerCred) -> bool {
        self.is_open() || self.uids.contains(&peer.uid) || self.gids.contains(&peer.gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_names_this_process_and_the_lists_decide() {
        let (a, _b) = UnixStream::pair().unwrap();
        let me = peer_cred(&a).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        // SAFETY: plain getters.
        assert_eq!((me.uid, me.gid), unsafe {
            (libc::geteuid(), libc::getegid())
        });
        assert!(PeerFilter::default().admits(&me), "no lists: anyone");
        let only = |uids: Vec<u32>, gids: Vec<u32>| PeerFilter { uids, gids };
        assert!(only(vec![me.uid], vec![]).admits(&me));
        assert!(only(vec![], vec![me.gid]).admits(&me));
        assert!(!only(vec![me.uid + 1], vec![me.gid + 1]).admits(&me));
    }
}
