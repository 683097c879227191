//! `[security]`: whom the daemon runs as once it has opened what it needs.
//!
//! Started as root (by libvirt, a container runtime, a script), the daemon opens the
//! disk, the volumes' own files, its sockets and the state file, then switches to `user`
//! (and `group`, by default the user's primary group) with no capabilities left, so a
//! bug reachable from a guest or a VMM holds only what that user may do.
//!
//! `seccomp` (`enforce` by default) confines every thread of `run` to the system calls
//! its class makes ([`crate::seccomp`]).

use serde::{Deserialize, Serialize};

use super::{group_id, invalid, ConfigError};

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityConfig {
    /// A user name or a numeric uid; absent: keep the identity the daemon started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A group name or a numeric gid; absent: the user's primary group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// `enforce` (a call outside its thread's list kills the daemon with SIGSYS), `log`
    /// (the kernel logs such a call and lets it run) or `off`.
    #[serde(default, skip_serializing_if = "is_enforce")]
    pub seccomp: crate::seccomp::Mode,
}

fn is_enforce(mode: &crate::seccomp::Mode) -> bool {
    *mode == crate::seccomp::Mode::Enforce
}

/// The identity `[security]` names, resolved from the system's databases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
}

impl SecurityConfig {
    pub fn is_empty(&self) -> bool {
        self == &SecurityConfig::default()
    }

    /// The identity to switch to; `None` without `user`.
    pub fn identity(&self) -> Result<Option<Identity>, ConfigError> {
        let Some(user) = &self.user else {
            return match self.group {
                Some(_) => Err(invalid("security.group", "needs security.user")),
                None => Ok(None),
            };
        };
        let (uid, primary_gid) = user_ids(user).map_err(|e| invalid("security.user", e))?;
        if uid == u32::MAX {
            return Err(invalid("security.user", "uid 4294967295 is not a user"));
        }
        if uid == 0 {
            return Err(invalid(
                "security.user",
                format!("`{user}` is root: name an unprivileged user, or leave [security] out"),
            ));
        }
        let gid = match &self.group {
            Some(group) => group_id(group).map_err(|e| invalid("security.group", e))?,
            None => primary_gid.ok_or_else(|| {
                invalid(
                    "security.group",
                    format!("uid {uid} has no entry in the user database: give its group"),
                )
            })?,
        };
        if gid == u32::MAX {
            return Err(invalid("security.group", "gid 4294967295 is not a group"));
        }
        if gid == 0 {
            return Err(invalid(
                "security.group",
                "is root's group: name an unprivileged group",
            ));
        }
        Ok(Some(Identity {
            user: user.clone(),
            uid,
            gid,
        }))
    }
}

/// The uid of user `name` (a name, or a number) and its primary group, if the user
/// database has it.
fn user_ids(name: &str) -> Result<(u32, Option<u32>), String> {
    let by_number = name.parse::<u32>().ok();
    let c_name =
        std::ffi::CString::new(name).map_err(|_| format!("`{name}` is not a user name"))?;
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    // SAFETY: every pointer is valid for the call; getpw*_r write only into `pw`, `buf`
    // (of the length given) and `result`.
    let rc = unsafe {
        match by_number {
            Some(uid) => libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut result),
            None => libc::getpwnam_r(
                c_name.as_ptr(),
                &mut pw,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            ),
        }
    };
    if rc != 0 {
        return Err(format!(
            "cannot look up user `{name}`: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    match (result.is_null(), by_number) {
        (false, _) => Ok((pw.pw_uid, Some(pw.pw_gid))),
        (true, Some(uid)) => Ok((uid, None)),
        (true, None) => Err(format!("no user named `{name}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn security(user: Option<&str>, group: Option<&str>) -> SecurityConfig {
        SecurityConfig {
            user: user.map(str::to_owned),
            group: group.map(str::to_owned),
            ..SecurityConfig::default()
        }
    }

    #[test]
    fn users_resolve_by_name_or_number_with_their_primary_group() {
        assert_eq!(security(None, None).identity().unwrap(), None);
        let nobody = security(Some("nobody"), None).identity().unwrap().unwrap();
        assert_eq!((nobody.uid, nobody.gid), (65534, 65534));
        let numeric = security(Some("65534"), None).identity().unwrap().unwrap();
        assert_eq!((numeric.uid, numeric.gid), (65534, 65534));
        let grouped = security(Some("nobody"), Some("4321"))
            .identity()
            .unwrap()
            .unwrap();
        assert_eq!(grouped.gid, 4321);
    }

    #[test]
    fn root_unknown_users_and_a_lone_group_are_refused_naming_the_key() {
        for (user, group, key, says) in [
            (Some("root"), None, "security.user", "is root"),
            (Some("0"), None, "security.user", "is root"),
            (
                Some("no-such-user-here"),
                None,
                "security.user",
                "no user named",
            ),
            (Some("nobody"), Some("0"), "security.group", "root's group"),
            (
                Some("nobody"),
                Some("no-such-group-here"),
                "security.group",
                "no group",
            ),
            (Some("54321"), None, "security.group", "give its group"),
            (
                None,
                Some("nogroup"),
                "security.group",
                "needs security.user",
            ),
        ] {
            let e = security(user, group).identity().unwrap_err().to_string();
            assert!(
                e.contains(key) && e.contains(says),
                "{user:?} {group:?}: {e}"
            );
        }
    }
}
