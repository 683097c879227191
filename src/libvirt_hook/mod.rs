//! `vhost-iocost libvirt-hook`: QoS declared in a libvirt domain, applied while the
//! domain runs.
//!
//! libvirt runs its qemu hook (`/etc/libvirt/hooks/qemu`, or each script in
//! `/etc/libvirt/hooks/qemu.d/`) as `HOOK DOMAIN OPERATION SUB-OPERATION EXTRA` with the
//! domain XML on standard input. At `prepare begin` (before QEMU starts, also on a
//! migration's destination) the hook finds each `vhostuser` disk whose socket a daemon
//! serves and applies what the domain declares ([`domain`]): the domain's group, the
//! disk's settings and its `<iotune>` as caps. At `release end` (after the domain
//! stopped, or failed to start) it returns those volumes to their configured settings
//! (`POST /v1/volumes/{name}/reset`) and removes the domain's group. Every other
//! operation is left alone.
//!
//! A daemon that is down, or a setting it refuses, is reported on standard error (libvirt
//! logs it) naming the domain and the disk; the domain starts anyway unless `--required`
//! is given, and then libvirt refuses to start it.

pub mod domain;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::control::client;
use domain::{Disk, Domain};

/// The command line libvirt calls the hook with, and the hook's own options.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Install: a script /etc/libvirt/hooks/qemu.d/vhost-iocost holding\n  \
    #!/bin/sh\n  exec /usr/local/bin/vhost-iocost libvirt-hook --control /run/vhost-iocost/control.sock \"$@\"\n\
    then restart libvirtd. The domain declares its QoS in <metadata> (namespace urn:vhost-iocost:qos:1); \
    see docs/libvirt.md."
)]
pub struct HookArgs {
    /// A daemon's control socket; repeat for each daemon (one per host disk).
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/run/vhost-iocost/control.sock"
    )]
    pub control: Vec<PathBuf>,
    /// Refuse the domain's start when its QoS cannot be applied (a daemon down, a setting
    /// refused). Without it the domain starts anyway, with what could be applied.
    #[arg(long)]
    pub required: bool,
    /// The domain's name (libvirt's first argument).
    pub domain: String,
    /// libvirt's operation: `prepare`, `start`, `started`, `stopped`, `release`, ...
    pub operation: String,
    /// libvirt's sub-operation: `begin` or `end`.
    pub sub_operation: String,
    /// libvirt's extra argument (unused).
    pub extra: Option<String>,
}

/// What the hook does for an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Apply,
    Revert,
    Nothing,
}

fn action(operation: &str, sub_operation: &str) -> Action {
    match (operation, sub_operation) {
        ("prepare", "begin") => Action::Apply,
        ("release", "end") => Action::Revert,
        _ => Action::Nothing,
    }
}

/// Runs the hook: reads the domain XML from standard input, then applies or undoes the
/// domain's QoS if the operation is one the hook acts on.
pub fn run(args: &HookArgs) -> Result<(), String> {
    // Read whatever the operation: libvirt writes the XML in any case, and a hook that
    // left it unread would make that write fail.
    let mut xml = String::new();
    std::io::stdin()
        .read_to_string(&mut xml)
        .map_err(|e| format!("domain {}: cannot read the domain XML: {e}", args.domain))?;
    let action = action(&args.operation, &args.sub_operation);
    if action == Action::Nothing {
        return Ok(());
    }
    let outcome = domain::parse(&xml, &mut warn).and_then(|d| match action {
        Action::Apply => apply(&args.control, &d, &mut warn),
        _ => revert(&args.control, &d, &mut warn),
    });
    match outcome {
        Err(e) if action == Action::Apply && !args.required => {
            warn(format!(
                "{e}; the domain starts anyway, with what could be applied"
            ));
            Ok(())
        }
        Err(e) if action == Action::Revert => {
            warn(e);
            Ok(())
        }
        other => other,
    }
}

fn warn(message: String) {
    eprintln!("vhost-iocost libvirt-hook: warning: {message}");
}

/// A volume of a daemon that serves one of the domain's disks.
struct Served<'a> {
    control: &'a Path,
    volume: String,
    disk: &'a Disk,
}

/// The domain's disks that the daemons serve, each with its daemon and volume, and an
/// error for each daemon that cannot be asked (the others are served all the same).
fn served<'a>(controls: &'a [PathBuf], d: &'a Domain) -> (Vec<Served<'a>>, Vec<String>) {
    let mut out = Vec::new();
    let mut unreachable = Vec::new();
    for control in controls {
        let volumes = match call(control, "GET", "/v1/volumes", None) {
            Ok(v) => v,
            Err(e) => {
                unreachable.push(format!("domain {}: {e}", d.name));
                continue;
            }
        };
        for disk in &d.disks {
            let serves = |v: &&Value| {
                ["socket", "handover_socket"]
                    .iter()
                    .any(|k| v[*k].as_str().is_some_and(|s| same_path(s, &disk.socket)))
            };
            if let Some(v) = volumes["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(serves)
            {
                out.push(Served {
                    control,
                    volume: v["name"].as_str().unwrap_or_default().to_owned(),
                    disk,
                });
            }
        }
    }
    (out, unreachable)
}

/// The domain's group on a daemon: `name` in `<iocost:domain>`, else `libvirt-` and the
/// domain's name in the characters a group name may have.
fn group_name(d: &Domain) -> Option<String> {
    let group = d.group.as_ref()?;
    if let Some(name) = group.get("name").and_then(Value::as_str) {
        return Some(name.to_owned());
    }
    let safe: String = d
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(56)
        .collect();
    Some(format!("libvirt-{safe}"))
}

/// Sets every declared disk a daemon serves as declared; what fails (a daemon that cannot
/// be asked, a refused setting) does not stop the rest and is returned together.
fn apply(controls: &[PathBuf], d: &Domain, warn: &mut dyn FnMut(String)) -> Result<(), String> {
    let (served, mut errors) = served(controls, d);
    let group = group_name(d);
    let mut daemons: Vec<&Path> = served.iter().map(|s| s.control).collect();
    daemons.dedup();
    if let (Some(name), Some(settings)) = (&group, &d.group) {
        for control in &daemons {
            if let Err(e) = ensure_group(control, name, settings) {
                errors.push(format!("domain {}: group {name}: {e}", d.name));
            }
        }
    }
    for s in &served {
        let mut patch = s.disk.patch.clone();
        if let Some(name) = &group {
            patch.insert("group".into(), Value::from(name.as_str()));
        }
        if patch.is_empty() {
            continue;
        }
        let path = format!("/v1/volumes/{}", client::encode_segment(&s.volume));
        match call(s.control, "PATCH", &path, Some(&Value::Object(patch))) {
            Ok(_) => eprintln!(
                "vhost-iocost libvirt-hook: domain {} disk {}: volume {} set as declared",
                d.name, s.disk.target, s.volume
            ),
            Err(e) => errors.push(format!(
                "domain {} disk {} (volume {}): {e}",
                d.name, s.disk.target, s.volume
            )),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    if served.is_empty() && (d.group.is_some() || d.disks.iter().any(|k| !k.patch.is_empty())) {
        warn(format!(
            "domain {}: declares QoS, but no daemon at {} serves any of its vhostuser disks",
            d.name,
            controls
                .iter()
                .map(|c| c.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(())
}

/// Creates the domain's group, or sets an existing one (a restarted libvirtd prepares a
/// domain again) to `settings`.
fn ensure_group(control: &Path, name: &str, settings: &Map<String, Value>) -> Result<(), String> {
    let mut body = settings.clone();
    body.remove("name");
    let path = format!("/v1/groups/{}", client::encode_segment(name));
    match call(control, "GET", &path, None) {
        Ok(_) => call(control, "PATCH", &path, Some(&Value::Object(body))).map(drop),
        Err(_) => {
            body.insert("name".into(), Value::from(name));
            call(control, "POST", "/v1/groups", Some(&Value::Object(body))).map(drop)
        }
    }
}

fn revert(controls: &[PathBuf], d: &Domain, warn: &mut dyn FnMut(String)) -> Result<(), String> {
    let group = group_name(d);
    let mut daemons: Vec<&Path> = Vec::new();
    let (served, unreachable) = served(controls, d);
    for e in unreachable {
        warn(e);
    }
    for s in served {
        if s.disk.patch.is_empty() && group.is_none() {
            continue;
        }
        let path = format!("/v1/volumes/{}/reset", client::encode_segment(&s.volume));
        match call(s.control, "POST", &path, Some(&json!({}))) {
            Ok(_) => eprintln!(
                "vhost-iocost libvirt-hook: domain {} disk {}: volume {} back to its configured settings",
                d.name, s.disk.target, s.volume
            ),
            Err(e) => warn(format!("domain {} disk {} (volume {}): {e}", d.name, s.disk.target, s.volume)),
        }
        if !daemons.contains(&s.control) {
            daemons.push(s.control);
        }
    }
    if let Some(name) = group {
        for control in daemons {
            let path = format!("/v1/groups/{}", client::encode_segment(&name));
            if let Err(e) = call(control, "DELETE", &path, None) {
                warn(format!("domain {}: group {name}: {e}", d.name));
            }
        }
    }
    Ok(())
}

/// One request to a daemon; an answer other than 2xx is an error with the daemon's
/// message (which names the key it refuses).
fn call(control: &Path, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let body = body.map(Value::to_string);
    let r = client::request(control, method, path, body.as_deref()).map_err(|e| e.to_string())?;
    if !(200..300).contains(&r.status) {
        return Err(r.error_message());
    }
    Ok(r.json().unwrap_or(Value::Null))
}

/// Whether two socket paths name the same file (as given, or once resolved).
fn same_path(a: &str, b: &str) -> bool {
    a == b || {
        let resolve = |p: &str| std::fs::canonicalize(p).ok();
        resolve(a).is_some_and(|x| Some(x) == resolve(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_prepare_and_release_act() {
        assert_eq!(action("prepare", "begin"), Action::Apply);
        assert_eq!(action("release", "end"), Action::Revert);
        for (op, sub) in [
            ("start", "begin"),
            ("started", "begin"),
            ("stopped", "end"),
            ("migrate", "begin"),
            ("prepare", "end"),
        ] {
            assert_eq!(action(op, sub), Action::Nothing, "{op} {sub}");
        }
    }

    #[test]
    fn group_names_are_valid_names() {
        let mut d = Domain {
            name: "web server #1".into(),
            group: Some(Map::new()),
            ..Domain::default()
        };
        assert_eq!(group_name(&d).unwrap(), "libvirt-web_server__1");
        d.group
            .as_mut()
            .unwrap()
            .insert("name".into(), Value::from("tenant-a"));
        assert_eq!(group_name(&d).unwrap(), "tenant-a");
        d.group = None;
        assert_eq!(group_name(&d), None);
    }
}
