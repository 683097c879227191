//! What each `ctl` command does: one function per command, over a small client of the
//! control API ([`Api`]).

use super::client::{self, encode_segment, Response};
use super::ctl_args::{AddVolumeArgs, QosArgs};
use super::ctl_format::{format_groups, format_qos, format_stats, format_volumes};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(super) struct Api {
    pub(super) socket: PathBuf,
}

impl Api {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Response, String> {
        let body = body.map(|b| b.to_string());
        client::request(&self.socket, method, path, body.as_deref()).map_err(|e| e.to_string())
    }

    /// A call that must succeed (2xx) and answers nothing.
    fn done(&self, method: &str, path: &str) -> Result<(), String> {
        let r = self.call(method, path, None)?;
        if (200..300).contains(&r.status) {
            Ok(())
        } else {
            Err(r.error_message())
        }
    }

    /// A call that must succeed (2xx); returns the JSON body.
    fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let r = self.call(method, path, body)?;
        if (200..300).contains(&r.status) {
            r.json()
        } else {
            Err(r.error_message())
        }
    }

    /// PATCH the volume or, if there is none by that name, the group `name`; returns
    /// which it was and the new view.
    fn patch_node(&self, name: &str, body: &Value) -> Result<(&'static str, Value), String> {
        let seg = encode_segment(name);
        let mut r = self.call("PATCH", &format!("/v1/volumes/{seg}"), Some(body))?;
        let mut kind = "volume";
        if r.status == 404 {
            r = self.call("PATCH", &format!("/v1/groups/{seg}"), Some(body))?;
            kind = "group";
            if r.status == 404 {
                return Err(format!("no volume or group named {name:?}"));
            }
        }
        if !(200..300).contains(&r.status) {
            return Err(r.error_message());
        }
        Ok((kind, r.json()?))
    }
}

fn print_json(v: &Value) -> Result<(), String> {
    println!(
        "{}",
        serde_json::to_string_pretty(v).map_err(|e| e.to_string())?
    );
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("unexpected answer from the daemon: {e}"))
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

pub(super) fn top(api: &Api, once: bool, interval: f64, json: bool) -> Result<(), String> {
    // SAFETY: isatty on fd 1 has no preconditions.
    let tty = unsafe { libc::isatty(1) } == 1;
    if !once {
        // SAFETY: installs an async-signal-safe handler (one atomic store).
        unsafe {
            libc::signal(
                libc::SIGINT,
                on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
            libc::signal(
                libc::SIGTERM,
                on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
    let interval = Duration::from_secs_f64(interval.clamp(0.1, 3600.0));
    let mut out = std::io::stdout();
    if tty && !once {
        let _ = write!(out, "\x1b[?25l"); // hide the cursor while redrawing
    }
    let result = (|| loop {
        let v = api.ok("GET", "/v1/stats", None)?;
        let frame = if json {
            format!(
                "{}\n",
                serde_json::to_string(&v).map_err(|e| e.to_string())?
            )
        } else {
            format_stats(&decode(v)?)
        };
        if tty && !once && !json {
            let _ = write!(out, "\x1b[H\x1b[2J");
        }
        let _ = out.write_all(frame.as_bytes());
        let _ = out.flush();
        if once {
            return Ok(());
        }
        let until = Instant::now() + interval;
        while Instant::now() < until {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Ok(());
        }
    })();
    if tty && !once {
        let _ = write!(out, "\x1b[?25h");
        let _ = out.flush();
    }
    result
}

/// `KEY=VALUE` pairs as a JSON object: numbers stay numbers, a list stays a list
/// (`cpu_affinity=[2,3]`), anything else ("200MiB") is passed as a string for the daemon
/// to parse and check.
fn key_values(pairs: &[String]) -> Result<serde_json::Map<String, Value>, String> {
    let mut caps = serde_json::Map::new();
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?}: expected KEY=VALUE, e.g. iops=2000"))?;
        // "0660" (a mode) stays a string; so does anything else that is not a plain number.
        let octal =
            value.len() > 1 && value.starts_with('0') && value.bytes().all(|b| b.is_ascii_digit());
        let list = value
            .starts_with('[')
            .then(|| serde_json::from_str::<Vec<Value>>(value).ok())
            .flatten();
        let value = if let Ok(b) = value.parse::<bool>() {
            Value::from(b)
        } else if let Some(list) = list {
            Value::from(list)
        } else if octal {
            Value::from(value)
        } else if let Ok(n) = value.parse::<u64>() {
            Value::from(n)
        } else if let Ok(x) = value.parse::<f64>() {
            Value::from(x)
        } else {
            Value::from(value)
        };
        caps.insert(key.to_owned(), value);
    }
    Ok(caps)
}

/// Prints `v` as JSON when `json`, else what `text` makes of it.
fn show(
    v: Value,
    json: bool,
    text: impl FnOnce(Value) -> Result<String, String>,
) -> Result<(), String> {
    if json {
        return print_json(&v);
    }
    print!("{}", text(v)?);
    Ok(())
}

/// `ctl volumes`.
pub(super) fn volumes(api: &Api, json: bool) -> Result<(), String> {
    let v = api.ok("GET", "/v1/volumes", None)?;
    show(v, json, |v| Ok(format_volumes(&decode(v)?)))
}

/// `ctl groups`.
pub(super) fn groups(api: &Api, json: bool) -> Result<(), String> {
    let v = api.ok("GET", "/v1/groups", None)?;
    show(v, json, |v| Ok(format_groups(&decode(v)?)))
}

/// `ctl stats`.
pub(super) fn stats(api: &Api, json: bool) -> Result<(), String> {
    let v = api.ok("GET", "/v1/stats", None)?;
    show(v, json, |v| Ok(format_stats(&decode(v)?)))
}

/// `ctl add-volume`.
pub(super) fn add_volume(api: &Api, json: bool, a: &AddVolumeArgs) -> Result<(), String> {
    let mut body = key_values(&a.keys)?;
    body.insert("name".into(), json!(a.name));
    body.insert("socket".into(), json!(a.vhost_socket));
    body.insert("size".into(), json!(a.size));
    let optional = [
        ("offset", a.offset.as_ref().map(|o| json!(o))),
        ("path", a.path.as_ref().map(|p| json!(p))),
        ("group", a.group.as_ref().map(|g| json!(g))),
        ("weight", a.weight.map(|w| json!(w))),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            body.insert(key.into(), value);
        }
    }
    let v = api.ok("POST", "/v1/volumes", Some(&Value::Object(body)))?;
    let (name, socket) = (&a.name, &a.vhost_socket);
    show(v, json, |v| {
        Ok(match v["path"].as_str() {
            Some(p) => format!("volume {name}: added, file {p}, socket {socket}\n"),
            None => format!(
                "volume {name}: added at offset {}, socket {socket}\n",
                v["offset"]
            ),
        })
    })
}

/// `ctl remove-volume`.
pub(super) fn remove_volume(api: &Api, name: &str, force: bool) -> Result<(), String> {
    let query = if force { "?force=true" } else { "" };
    api.done(
        "DELETE",
        &format!("/v1/volumes/{}{query}", encode_segment(name)),
    )?;
    println!("volume {name}: removed");
    Ok(())
}

/// `ctl resize`.
pub(super) fn resize(api: &Api, json: bool, name: &str, size: &str) -> Result<(), String> {
    let path = format!("/v1/volumes/{}", encode_segment(name));
    let v = api.ok("PATCH", &path, Some(&json!({ "size": size })))?;
    show(v, json, |v| {
        Ok(format!("volume {name}: {} bytes\n", v["size"]))
    })
}

/// `ctl add-group`.
pub(super) fn add_group(
    api: &Api,
    json: bool,
    name: &str,
    parent: Option<&str>,
    weight: Option<u32>,
) -> Result<(), String> {
    let mut body = json!({ "name": name });
    if let Some(p) = parent {
        body["parent"] = json!(p);
    }
    if let Some(w) = weight {
        body["weight"] = json!(w);
    }
    let v = api.ok("POST", "/v1/groups", Some(&body))?;
    show(v, json, |v| {
        Ok(format!(
            "group {name}: added under {}\n",
            v["parent"].as_str().unwrap_or("root")
        ))
    })
}

/// `ctl remove-group`.
pub(super) fn remove_group(api: &Api, name: &str) -> Result<(), String> {
    api.done("DELETE", &format!("/v1/groups/{}", encode_segment(name)))?;
    println!("group {name}: removed");
    Ok(())
}

/// `ctl set-weight`.
pub(super) fn set_weight(api: &Api, json: bool, name: &str, weight: u32) -> Result<(), String> {
    let (kind, v) = api.patch_node(name, &json!({ "weight": weight }))?;
    show(v, json, |_| Ok(format!("{kind} {name}: weight {weight}\n")))
}

/// `ctl reset`.
pub(super) fn reset(api: &Api, json: bool, name: &str) -> Result<(), String> {
    let path = format!("/v1/volumes/{}/reset", encode_segment(name));
    let v = api.ok("POST", &path, Some(&json!({})))?;
    show(v, json, |v| {
        Ok(format!(
            "volume {name}: as configured (weight {}, group {}, class {})\n",
            v["weight"]["value"], v["group"]["value"], v["class"]["value"]
        ))
    })
}

/// `ctl set-caps`.
pub(super) fn set_caps(api: &Api, json: bool, name: &str, limits: &[String]) -> Result<(), String> {
    let caps = key_values(limits)?;
    let (kind, v) = api.patch_node(name, &json!({ "caps": caps }))?;
    show(v, json, |v| {
        let caps: crate::qos::CapsConfig =
            serde_json::from_value(v["caps"]["value"].clone()).map_err(|e| e.to_string())?;
        Ok(format!("{kind} {name}: caps {caps}\n"))
    })
}

/// `ctl set-class`.
pub(super) fn set_class(
    api: &Api,
    json: bool,
    name: &str,
    class: &str,
    target: Option<&str>,
) -> Result<(), String> {
    let mut body = json!({ "class": class });
    if let Some(t) = target {
        body["latency_target"] = json!(t);
    }
    let (kind, v) = api.patch_node(name, &body)?;
    show(v, json, |v| {
        Ok(match v["latency_target"]["value"].as_str() {
            Some(t) if class == "latency" => format!("{kind} {name}: class latency, target {t}\n"),
            _ => format!("{kind} {name}: class {class}\n"),
        })
    })
}

/// `ctl set-reserve`.
pub(super) fn set_reserve(
    api: &Api,
    json: bool,
    name: &str,
    values: &[String],
) -> Result<(), String> {
    let reserve = key_values(values)?;
    let (kind, v) = api.patch_node(name, &json!({ "reserve": reserve }))?;
    show(v, json, |v| {
        Ok(format!(
            "{kind} {name}: reserve {}\n",
            v["reserve"]["value"]
        ))
    })
}

/// `ctl qos`: shows the device's QoS, after changing the keys given.
pub(super) fn qos(api: &Api, json: bool, a: &QosArgs) -> Result<(), String> {
    let device = api.ok("GET", "/v1/device", None)?;
    let mut qos = device["qos"]["value"].clone();
    let Some(obj) = qos.as_object_mut() else {
        return Err("unexpected answer from the daemon: no qos".into());
    };
    let mut changed = false;
    let mut set = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            obj.insert(k.into(), v);
            changed = true;
        }
    };
    set("enable", a.enable.map(Value::from));
    set("rpct", a.rpct.map(Value::from));
    set("rlat", a.rlat.clone().map(Value::from));
    set("wpct", a.wpct.map(Value::from));
    set("wlat", a.wlat.clone().map(Value::from));
    set("min", a.min.map(Value::from));
    set("max", a.max.map(Value::from));
    set("protect", a.protect.clone().map(Value::from));
    let mut device = if changed {
        api.ok("PUT", "/v1/device/qos", Some(&qos))?
    } else {
        device
    };
    // The model with the learner's estimate, where there is one.
    device["model"] = api.ok("GET", "/v1/device/model", None)?;
    show(device, json, |d| Ok(format_qos(&d)))
}
