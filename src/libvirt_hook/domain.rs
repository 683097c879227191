//! What a libvirt domain declares for the daemon: its `vhostuser` disks, the QoS in its
//! `<metadata>`, and each disk's `<iotune>`.
//!
//! ```xml
//! <metadata>
//!   <iocost:qos xmlns:iocost="urn:vhost-iocost:qos:1">
//!     <iocost:domain weight="200" caps.iops="20000"/>
//!     <iocost:disk target="vda" weight="300" class="latency" latency_target="p99 2ms"
//!                  caps.write_bps="100MiB" reserve.iops="1000">
//!       <iocost:iotune><iocost:total_iops_sec>5000</iocost:total_iops_sec></iocost:iotune>
//!     </iocost:disk>
//!   </iocost:qos>
//! </metadata>
//! ```
//!
//! Attributes are the keys of `PATCH /v1/volumes/{name}` (and, on `domain`, of `POST
//! /v1/groups`), a dot naming a key inside an object (`caps.iops` → `{"caps": {"iops":
//! ...}}`): the daemon validates them and names the key it refuses. `<iotune>`, libvirt's
//! own element, maps to the volume's caps: libvirt 9.0 refuses it on a `vhostuser` disk
//! ("iotune is not supported with vhostuser disk": QEMU does not see that disk's I/O), so
//! it is read inside the metadata's `<disk>` as well as in the disk's definition. A key an
//! attribute gives wins over `<iotune>`'s.

use serde_json::{Map, Value};

/// The namespace of the daemon's `<metadata>` element.
pub const NAMESPACE: &str = "urn:vhost-iocost:qos:1";

/// One `vhostuser` disk of the domain.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Disk {
    /// `<target dev>`: how the domain names it (`vda`).
    pub target: String,
    /// `<source path>`: the vhost-user socket.
    pub socket: String,
    /// The volume's settings to apply, as `PATCH /v1/volumes/{name}` takes them (empty:
    /// the domain declares nothing for it).
    pub patch: Map<String, Value>,
}

/// The domain as the hook needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Domain {
    pub name: String,
    /// `<iocost:domain>`: the domain as a group over its disks, as `POST /v1/groups`
    /// takes it (without the name), or None.
    pub group: Option<Map<String, Value>>,
    pub disks: Vec<Disk>,
}

/// `<iotune>` elements and the caps key each becomes. libvirt's per-direction bursts
/// have no counterpart (the daemon's bursts are for the total) and are reported.
const IOTUNE_CAPS: &[(&str, &str)] = &[
    ("total_iops_sec", "iops"),
    ("read_iops_sec", "read_iops"),
    ("write_iops_sec", "write_iops"),
    ("total_bytes_sec", "bps"),
    ("read_bytes_sec", "read_bps"),
    ("write_bytes_sec", "write_bps"),
    ("total_iops_sec_max", "burst_iops"),
    ("total_bytes_sec_max", "burst_bps"),
    ("total_iops_sec_max_length", "burst_seconds"),
];

/// Parses the domain XML libvirt hands its hooks. `warn` hears what is ignored.
pub fn parse(xml: &str, warn: &mut dyn FnMut(String)) -> Result<Domain, String> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| format!("domain XML: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "domain" {
        return Err(format!(
            "domain XML: the root element is <{}>, not <domain>",
            root.tag_name().name()
        ));
    }
    let name = child(root, "name")
        .and_then(|n| n.text())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or("domain XML: no <name>")?
        .to_owned();
    let qos = child(root, "metadata").and_then(|m| {
        m.children()
            .find(|c| c.is_element() && c.tag_name().namespace() == Some(NAMESPACE))
    });
    let mut group = None;
    let mut declared: Vec<(String, Map<String, Value>)> = Vec::new();
    for e in qos
        .iter()
        .flat_map(|q| q.children())
        .filter(|c| c.is_element())
    {
        let what = format!("domain {name}: <{}>", e.tag_name().name());
        match e.tag_name().name() {
            "domain" => group = Some(attributes(e, &[], &what)?),
            "disk" => {
                let target = e.attribute("target").ok_or_else(|| {
                    format!("{what}: no target attribute (the disk's <target dev>)")
                })?;
                let mut patch = Map::new();
                if let Some(iotune) = e.children().find(|c| c.tag_name().name() == "iotune") {
                    let what = format!("domain {name} disk {target}");
                    let caps = iotune_caps(iotune, &mut |m| warn(format!("{what}: {m}")))
                        .map_err(|e| format!("{what}: {e}"))?;
                    if !caps.is_empty() {
                        patch.insert("caps".into(), Value::Object(caps));
                    }
                }
                merge(&mut patch, attributes(e, &["target"], &what)?);
                declared.push((target.to_owned(), patch));
            }
            other => warn(format!(
                "domain {name}: <{other}> in the QoS metadata is not known; ignored"
            )),
        }
    }
    let devices = child(root, "devices");
    let mut disks = Vec::new();
    for d in devices.iter().flat_map(|d| d.children()) {
        if !(d.has_tag_name("disk") && d.attribute("type") == Some("vhostuser")) {
            continue;
        }
        let target = child(d, "target").and_then(|t| t.attribute("dev"));
        let socket = child(d, "source").and_then(|s| s.attribute("path"));
        let (Some(target), Some(socket)) = (target, socket) else {
            warn(format!(
                "domain {name}: a vhostuser disk without <target dev> or <source path>; skipped"
            ));
            continue;
        };
        let mut patch = Map::new();
        if let Some(iotune) = child(d, "iotune") {
            let caps = iotune_caps(iotune, &mut |m| {
                warn(format!("domain {name} disk {target}: {m}"))
            })
            .map_err(|e| format!("domain {name} disk {target}: {e}"))?;
            if !caps.is_empty() {
                patch.insert("caps".into(), Value::Object(caps));
            }
        }
        if let Some(i) = declared.iter().position(|(t, _)| t == target) {
            merge(&mut patch, declared.swap_remove(i).1);
        }
        disks.push(Disk {
            target: target.to_owned(),
            socket: socket.to_owned(),
            patch,
        });
    }
    for (target, _) in declared {
        warn(format!("domain {name}: the QoS metadata names disk {target}, which is no vhostuser disk of the domain; ignored"));
    }
    Ok(Domain { name, group, disks })
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|c| c.has_tag_name(tag))
}

/// The attributes of `e` but `skip` as a JSON object, `a.b` nested.
fn attributes(e: roxmltree::Node, skip: &[&str], what: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for a in e.attributes().filter(|a| !skip.contains(&a.name())) {
        let (outer, inner) = match a.name().split_once('.') {
            Some((o, i)) => (o, Some(i)),
            None => (a.name(), None),
        };
        let value = scalar(a.value());
        match inner {
            None => {
                out.insert(outer.to_owned(), value);
            }
            Some(inner) => {
                let slot = out
                    .entry(outer.to_owned())
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(obj) = slot else {
                    return Err(format!(
                        "{what}: {outer} is given both as a value and as {}",
                        a.name()
                    ));
                };
                obj.insert(inner.to_owned(), value);
            }
        }
    }
    Ok(out)
}

/// An attribute's text as JSON: a number when it is one, else a string (`"100MiB"`,
/// `"latency"`).
fn scalar(text: &str) -> Value {
    if let Ok(n) = text.parse::<u64>() {
        return Value::from(n);
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => Value::from(f),
        _ => Value::from(text),
    }
}

/// `<iotune>`'s children as caps keys.
fn iotune_caps(
    iotune: roxmltree::Node,
    warn: &mut dyn FnMut(String),
) -> Result<Map<String, Value>, String> {
    let mut caps = Map::new();
    for e in iotune.children().filter(|c| c.is_element()) {
        let tag = e.tag_name().name();
        let Some((_, key)) = IOTUNE_CAPS.iter().find(|(t, _)| *t == tag) else {
            warn(format!(
                "<iotune><{tag}> has no counterpart in the daemon's caps; ignored"
            ));
            continue;
        };
        let text = e.text().unwrap_or("").trim();
        let n: u64 = text
            .parse()
            .map_err(|_| format!("<iotune><{tag}>: expected a whole number (got {text:?})"))?;
        if n > 0 {
            caps.insert((*key).to_owned(), Value::from(n));
        }
    }
    Ok(caps)
}

/// `extra`'s keys into `patch`, key by key inside objects (`caps` from `<iotune>` and
/// from the metadata together).
fn merge(patch: &mut Map<String, Value>, extra: Map<String, Value>) {
    for (k, v) in extra {
        match (patch.get_mut(&k), v) {
            (Some(Value::Object(old)), Value::Object(new)) => old.extend(new),
            (_, v) => {
                patch.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const XML: &str = r#"<domain type='qemu'>
  <name>vm1</name>
  <metadata>
    <other:thing xmlns:other="http://example.org/x"/>
    <iocost:qos xmlns:iocost="urn:vhost-iocost:qos:1">
      <iocost:domain weight="200" caps.iops="20000"/>
      <iocost:disk target="vda" weight="300" class="latency" latency_target="p99 2ms"
                   caps.write_bps="100MiB" caps.iops="900"/>
      <iocost:disk target="vdz" weight="5"/>
      <iocost:disk target="vdb"><iocost:iotune><iocost:write_iops_sec>70</iocost:write_iops_sec>
        </iocost:iotune></iocost:disk>
    </iocost:qos>
  </metadata>
  <devices>
    <disk type='vhostuser' device='disk'>
      <source type='unix' path='/run/vm1.sock'/>
      <target dev='vda' bus='virtio'/>
      <iotune><total_iops_sec>1000</total_iops_sec><read_bytes_sec>5000000</read_bytes_sec>
              <read_iops_sec_max>9</read_iops_sec_max></iotune>
    </disk>
    <disk type='vhostuser' device='disk'>
      <source type='unix' path='/run/vm1-data.sock'/>
      <target dev='vdb' bus='virtio'/>
    </disk>
    <disk type='file' device='disk'>
      <source file='/var/lib/x.img'/>
      <target dev='vdc' bus='virtio'/>
    </disk>
  </devices>
</domain>"#;

    #[test]
    fn metadata_and_iotune_become_patches() {
        let mut warnings = Vec::new();
        let d = parse(XML, &mut |w| warnings.push(w)).unwrap();
        assert_eq!(d.name, "vm1");
        assert_eq!(
            Value::Object(d.group.unwrap()),
            json!({"weight": 200, "caps": {"iops": 20000}})
        );
        assert_eq!(d.disks.len(), 2, "only vhostuser disks");
        let vda = &d.disks[0];
        assert_eq!(
            (vda.target.as_str(), vda.socket.as_str()),
            ("vda", "/run/vm1.sock")
        );
        // The metadata's caps.iops wins over <iotune>'s; the other keys merge.
        assert_eq!(
            Value::Object(vda.patch.clone()),
            json!({"weight": 300, "class": "latency", "latency_target": "p99 2ms",
                   "caps": {"iops": 900, "read_bps": 5000000, "write_bps": "100MiB"}})
        );
        assert_eq!(
            Value::Object(d.disks[1].patch.clone()),
            json!({"caps": {"write_iops": 70}}),
            "<iotune> inside the metadata"
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("read_iops_sec_max"), "{warnings:?}");
        assert!(warnings[1].contains("vdz"), "{warnings:?}");
    }

    #[test]
    fn bad_input_is_named() {
        let mut ignore = |_| {};
        let e = parse("<domain><name>x</name", &mut ignore).unwrap_err();
        assert!(e.starts_with("domain XML:"), "{e}");
        let e = parse("<pool><name>x</name></pool>", &mut ignore).unwrap_err();
        assert!(e.contains("not <domain>"), "{e}");
        let bad_iotune = XML.replace("<total_iops_sec>1000<", "<total_iops_sec>lots<");
        let e = parse(&bad_iotune, &mut ignore).unwrap_err();
        assert!(
            e.contains("total_iops_sec") && e.contains("lots") && e.contains("vda"),
            "{e}"
        );
        let no_target = XML.replace(r#"target="vdz" "#, "");
        let e = parse(&no_target, &mut ignore).unwrap_err();
        assert!(e.contains("domain vm1") && e.contains("target"), "{e}");
        let clash = XML.replace(r#"caps.iops="20000""#, r#"caps="1" caps.iops="2""#);
        let e = parse(&clash, &mut ignore).unwrap_err();
        assert!(e.contains("caps is given both"), "{e}");
    }

    #[test]
    fn a_domain_without_metadata_declares_nothing() {
        let plain = XML.split("<metadata>").next().unwrap().to_owned()
            + XML.split("</metadata>").nth(1).unwrap();
        let d = parse(&plain, &mut |_| {}).unwrap();
        assert!(d.group.is_none());
        assert_eq!(d.disks[0].patch, {
            let Value::Object(m) = json!({"caps": {"iops": 1000, "read_bps": 5000000}}) else {
                unreachable!()
            };
            m
        });
    }
}
