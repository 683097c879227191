//! `vhost-iocost libvirt-hook` as libvirt runs it (domain, operation and sub-operation as
//! arguments, the domain XML on standard input) against a running daemon: the domain's
//! QoS applies at `prepare begin` and is undone at `release end`; errors name the domain
//! and the disk; a daemon that is down does not block a start unless `--required`.
//! The same hook under a real libvirtd is in `libvirt.rs`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::daemon::{config, control_get, ctl, volume, DaemonProcess, SLOW_MODEL};

/// Runs the hook for `domain_xml` with `args` (after the control socket `control`).
pub fn hook(control: &Path, args: &[&str], domain_xml: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vhost-iocost"))
        .args(["libvirt-hook", "--control"])
        .arg(control)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(domain_xml.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A domain named `name` whose vhostuser disk `vda` is on `socket` with `<iotune>`
/// `iotune` and whose `<metadata>` holds `qos` (inside `<iocost:qos>`), plus a second
/// vhostuser disk on `other` that declares nothing.
pub fn domain_xml(name: &str, socket: &Path, iotune: &str, qos: &str, other: &Path) -> String {
    format!(
        r#"<domain type='qemu'>
  <name>{name}</name>
  <metadata>
    <iocost:qos xmlns:iocost="urn:vhost-iocost:qos:1">{qos}</iocost:qos>
  </metadata>
  <devices>
    <disk type='vhostuser' device='disk'>
      <source type='unix' path='{socket}'/>
      <target dev='vda' bus='virtio'/>
      <iotune>{iotune}</iotune>
    </disk>
    <disk type='vhostuser' device='disk'>
      <source type='unix' path='{other}'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
  </devices>
</domain>"#,
        socket = socket.display(),
        other = other.display(),
    )
}

/// The QoS settings of a volume as `GET /v1/volumes/{name}` shows them: (value, source)
/// of weight, group, caps, class, latency target and reservation.
pub fn settings(d: &DaemonProcess, name: &str) -> Value {
    let v = control_get(d, &format!("/v1/volumes/{name}"));
    let keys = [
        "weight",
        "group",
        "caps",
        "class",
        "latency_target",
        "reserve",
    ];
    Value::Object(
        keys.iter()
            .map(|k| ((*k).to_owned(), v[*k].clone()))
            .collect(),
    )
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_domains_qos_applies_while_it_runs_and_is_undone_after() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}[control]\nsocket = \"control.sock\"\n"),
        &(volume("vm-root", 0, 16, "weight = 50\ncaps = { iops = 3000 }")
            + &volume("vm-data", 16, 16, "")
            + &volume("other", 32, 16, "weight = 70")),
    ));
    let control = d.path("control.sock");
    let configured = settings(&d, "vm-root");
    let untouched = settings(&d, "vm-data");
    let xml = domain_xml(
        "web 1",
        &d.path("vm-root.sock"),
        "<total_iops_sec>800</total_iops_sec><write_bytes_sec>10485760</write_bytes_sec>",
        r#"<iocost:domain weight="400"/>
           <iocost:disk target="vda" weight="300" class="latency" latency_target="p99 5ms"
                        caps.iops="700" reserve.iops="100"/>"#,
        &d.path("vm-data.sock"),
    );
    // Operations other than prepare and release change nothing.
    for (op, sub) in [("start", "begin"), ("started", "begin"), ("stopped", "end")] {
        let out = hook(&control, &["web 1", op, sub, "-"], &xml);
        assert!(out.status.success(), "{op}: {}", text(&out));
    }
    assert_eq!(settings(&d, "vm-root"), configured);

    let out = hook(&control, &["web 1", "prepare", "begin", "-"], &xml);
    assert!(out.status.success(), "{}", text(&out));
    let running = control_get(&d, "/v1/volumes/vm-root");
    assert_eq!(running["weight"]["value"], 300);
    assert_eq!(running["group"]["value"], "libvirt-web_1");
    // The metadata's caps.iops wins over <iotune>'s total; its write bandwidth stays.
    assert_eq!(
        running["caps"]["value"],
        json!({"iops": 700, "write_bps": "10MiB"})
    );
    assert_eq!(running["class"]["value"], "latency");
    assert_eq!(running["latency_target"]["value"], "p99 5ms");
    assert_eq!(running["reserve"]["value"], json!({"iops": 100}));
    let group = control_get(&d, "/v1/groups/libvirt-web_1");
    assert_eq!(group["weight"]["value"], 400);
    // The second disk joins the domain's group and keeps everything else.
    let data = control_get(&d, "/v1/volumes/vm-data");
    assert_eq!(data["group"]["value"], "libvirt-web_1");
    assert_eq!(data["weight"], untouched["weight"]);
    assert_eq!(settings(&d, "other")["weight"]["value"], 70);
    // A libvirtd restarted prepares again: the same settings, no error.
    let again = hook(&control, &["web 1", "prepare", "begin", "-"], &xml);
    assert!(again.status.success(), "{}", text(&again));

    let out = hook(&control, &["web 1", "release", "end", "-"], &xml);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(settings(&d, "vm-root"), configured, "back as configured");
    assert_eq!(settings(&d, "vm-data"), untouched);
    let gone =
        vhost_iocost::control::client::request(&control, "GET", "/v1/groups/libvirt-web_1", None)
            .unwrap();
    assert_eq!(gone.status, 404, "the domain's group is removed");
    // Nothing of the domain is left in the state file for the next start.
    let state = std::fs::read_to_string(d.path("config.toml.state.json")).unwrap_or_default();
    assert!(
        !state.contains("libvirt-web_1") && !state.contains("vm-root"),
        "{state}"
    );

    // The same reset by hand.
    ctl(&d, &["set-weight", "other", "5"]);
    let out = ctl(&d, &["reset", "other"]);
    assert!(
        out.contains("volume other: as configured (weight 70"),
        "{out}"
    );
    assert_eq!(
        settings(&d, "other")["weight"],
        json!({"value": 70, "source": "config"})
    );
}

#[test]
fn errors_name_the_domain_and_the_disk_and_block_only_when_required() {
    let d = DaemonProcess::start(&config(
        &format!("{SLOW_MODEL}[control]\nsocket = \"control.sock\"\n"),
        &volume("vm-root", 0, 16, ""),
    ));
    let control = d.path("control.sock");
    let configured = settings(&d, "vm-root");
    let bad = domain_xml(
        "db",
        &d.path("vm-root.sock"),
        "",
        r#"<iocost:disk target="vda" weight="0"/>"#,
        &d.path("nothing.sock"),
    );
    let out = hook(
        &control,
        &["--required", "db", "prepare", "begin", "-"],
        &bad,
    );
    assert!(!out.status.success());
    let err = text(&out);
    assert!(
        err.contains("domain db disk vda (volume vm-root)") && err.contains("weight"),
        "{err}"
    );
    // Without --required the domain starts, with the volume as it was.
    let out = hook(&control, &["db", "prepare", "begin", "-"], &bad);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("domain db disk vda"), "{}", text(&out));
    assert_eq!(settings(&d, "vm-root"), configured);

    // A daemon that is down.
    let down = d.path("down.sock");
    let ok = domain_xml("db", &d.path("vm-root.sock"), "", "", &d.path("x.sock"));
    let out = hook(&down, &["db", "prepare", "begin", "-"], &ok);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("down.sock"), "{}", text(&out));
    let out = hook(&down, &["--required", "db", "prepare", "begin", "-"], &ok);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("domain db") && text(&out).contains("down.sock"),
        "{}",
        text(&out)
    );
    // Stopping never fails, whatever happens.
    let out = hook(&down, &["--required", "db", "release", "end", "-"], &ok);
    assert!(out.status.success(), "{}", text(&out));
    // One daemon down does not keep the hook from the others: the volume of the one that
    // answers is set (and reset at release), the down one is named.
    let declared = domain_xml(
        "db",
        &d.path("vm-root.sock"),
        "",
        r#"<iocost:disk target="vda" weight="222"/>"#,
        &d.path("x.sock"),
    );
    let both = ["--control", down.to_str().unwrap()];
    let out = hook(
        &control,
        &[&both[..], &["db", "prepare", "begin", "-"]].concat(),
        &declared,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("down.sock"), "{}", text(&out));
    assert_eq!(settings(&d, "vm-root")["weight"]["value"], 222);
    let out = hook(
        &control,
        &[&both[..], &["db", "release", "end", "-"]].concat(),
        &declared,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(settings(&d, "vm-root"), configured);
    // Bad XML is named.
    let out = hook(
        &control,
        &["--required", "db", "prepare", "begin", "-"],
        "<domain>",
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("domain XML"), "{}", text(&out));
}
