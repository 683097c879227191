//! Who may connect to a volume's socket: `socket_mode` and `socket_group` of a
//! `[[volume]]`. QEMU often runs as another user than the daemon (libvirt's
//! `libvirt-qemu`, say), and connecting to a Unix socket needs write permission on it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Permission bits written as an octal string: `"0660"`, `"660"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMode(pub u32);

impl FileMode {
    pub fn parse(text: &str) -> Result<Self, String> {
        let digits = text.trim();
        let digits = digits.strip_prefix("0o").unwrap_or(digits);
        match u32::from_str_radix(digits, 8) {
            Ok(mode) if !digits.is_empty() && mode <= 0o777 => Ok(FileMode(mode)),
            _ => Err(format!(
                "`{text}` is not a permission mode (expected octal like \"0660\", at most 0777)"
            )),
        }
    }
}

impl fmt::Display for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        FileMode::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for FileMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// The numeric id of group `name` (a group name, or a number), from the system's group
/// database.
pub fn group_id(name: &str) -> Result<u32, String> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let c_name =
        std::ffi::CString::new(name).map_err(|_| format!("`{name}` is not a group name"))?;
    let mut group: libc::group = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::group = std::ptr::null_mut();
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    // SAFETY: every pointer is valid for the call; getgrnam_r writes only into `group`,
    // `buf` (of the length given) and `result`.
    let rc = unsafe {
        libc::getgrnam_r(
            c_name.as_ptr(),
            &mut group,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(format!(
            "cannot look up group `{name}`: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    if result.is_null() {
        return Err(format!("no group named `{name}`"));
    }
    Ok(group.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_and_at_most_0777() {
        assert_eq!(FileMode::parse("0660").unwrap().0, 0o660);
        assert_eq!(FileMode::parse("600").unwrap().0, 0o600);
        assert_eq!(FileMode::parse("0o666").unwrap().to_string(), "0666");
        for bad in ["", "0688", "1777", "rw-rw----", "-1"] {
            assert!(FileMode::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn groups_resolve_by_name_or_number() {
        assert_eq!(group_id("root"), Ok(0));
        assert_eq!(group_id("1234"), Ok(1234));
        let e = group_id("no-such-group-here").unwrap_err();
        assert!(e.contains("no group named"), "{e}");
    }
}
