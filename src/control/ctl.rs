//! `vhost-iocost ctl`: the command-line client of the control API.
//!
//! The socket is `--socket`, else the `[control] socket` of `--config FILE`, else the
//! environment variable `VHOST_IOCOST_SOCKET`. Read commands print tables, or the API's
//! JSON with `--json`. `top` redraws a table every second (like `iocost_monitor`) until
//! Ctrl-C; with `--once` it prints one frame and exits (for scripts and pipes).

use super::client::{self, Response};
use super::ctl_format::{format_groups, format_qos, format_stats, format_volumes};
use crate::config::Config;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Environment variable naming the control socket.
pub const SOCKET_ENV: &str = "VHOST_IOCOST_SOCKET";

#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The daemon's control socket (default: from --config, else $VHOST_IOCOST_SOCKET).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Read the control socket from this daemon config (`[control] socket`).
    #[arg(long, short = 'c', global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// List volumes: group, weight (`*` = changed at runtime), connections, socket, caps.
    Volumes,
    /// List groups: parent, weight, member volumes, caps.
    Groups,
    /// Add a volume at runtime (persistently): its socket listens when this returns.
    /// Without --offset or --path the daemon allocates the first free range of the
    /// device. More keys of `[[volume]]` as KEY=VALUE (e.g. `num_queues=4`,
    /// `'cpu_affinity=[2,3]'`, quoted for the shell: a JSON list `[...]` goes as a list).
    AddVolume {
        /// The volume's name.
        name: String,
        /// Its vhost-user socket (the path the frontend connects to; `--socket` is the
        /// control socket).
        #[arg(long, value_name = "PATH")]
        vhost_socket: String,
        /// Capacity, e.g. "10GiB".
        #[arg(long)]
        size: String,
        /// First byte on the device (default: allocated).
        #[arg(long, conflicts_with = "path")]
        offset: Option<String>,
        /// An image file or block device of its own (created with --size if missing).
        #[arg(long)]
        path: Option<String>,
        /// Its group (default: the root).
        #[arg(long)]
        group: Option<String>,
        /// Weight, 1..10000 (default 100).
        #[arg(long)]
        weight: Option<u32>,
        /// Further `[[volume]]` keys, e.g. `num_queues=4 read_only=true 'cpu_affinity=[2]'`.
        #[arg(value_name = "KEY=VALUE")]
        keys: Vec<String>,
    },
    /// Remove a volume at runtime (persistently). Refused while a frontend is connected
    /// unless --force, which completes its in-flight requests and disconnects it first.
    /// Its data (range or file) is left as it is.
    RemoveVolume {
        name: String,
        #[arg(long)]
        force: bool,
    },
    /// Grow a volume at runtime (persistently), e.g. `resize vm1-root 20GiB`: into the free
    /// space after its range, or by growing its own file. The guest is told when its
    /// frontend set up the channel for it (QEMU does).
    Resize {
        name: String,
        /// The new size, e.g. "20GiB".
        size: String,
    },
    /// Add a group at runtime (persistently).
    AddGroup {
        name: String,
        /// Parent group (default: the root).
        #[arg(long)]
        parent: Option<String>,
        /// Weight, 1..10000 (default 100).
        #[arg(long)]
        weight: Option<u32>,
    },
    /// Remove an empty group at runtime (persistently).
    RemoveGroup { name: String },
    /// Set the weight (1..10000) of a volume or group, at runtime and persistently.
    SetWeight {
        /// Volume or group name.
        name: String,
        /// The new weight.
        weight: u32,
    },
    /// Set the caps of a volume or group, at runtime and persistently: KEY=VALUE pairs
    /// with the keys of `caps` in the config (iops, bps, read_iops, write_bps, burst_iops,
    /// burst_bps, burst_seconds, iops_size; sizes as "200MiB"). The given caps replace
    /// the old ones as a whole; no pairs removes them.
    SetCaps {
        /// Volume or group name.
        name: String,
        /// Limits, e.g. `iops=2000 bps=200MiB`.
        #[arg(value_name = "KEY=VALUE")]
        limits: Vec<String>,
    },
    /// Set a volume's or group's class, at runtime and persistently: `normal`, `latency`
    /// (meets its own latency target, a group's volumes together; give `--target` unless
    /// it has one) or `background` (served from what the others leave idle).
    SetClass {
        /// Volume or group name.
        name: String,
        /// `normal`, `latency` or `background`.
        class: String,
        /// The latency class's target, e.g. "p99 2ms".
        #[arg(long)]
        target: Option<String>,
    },
    /// Set the reservation of a volume or group, at runtime and persistently: KEY=VALUE
    /// pairs with the keys of `reserve` in the config (iops, bps, pct). No pairs removes it.
    SetReserve {
        /// Volume or group name.
        name: String,
        /// e.g. `iops=500` or `pct=30`.
        #[arg(value_name = "KEY=VALUE")]
        values: Vec<String>,
    },
    /// Show the device QoS, or change the given keys (the others keep their values).
    Qos {
        /// Throttle at all (true/false).
        #[arg(long)]
        enable: Option<bool>,
        /// Read latency percentile (0..100).
        #[arg(long)]
        rpct: Option<f64>,
        /// Read latency target ("250us", "5ms").
        #[arg(long)]
        rlat: Option<String>,
        /// Write latency percentile.
        #[arg(long)]
        wpct: Option<f64>,
        /// Write latency target.
        #[arg(long)]
        wlat: Option<String>,
        /// Lower vrate bound, percent.
        #[arg(long)]
        min: Option<f64>,
        /// Upper vrate bound, percent.
        #[arg(long)]
        max: Option<f64>,
        /// Whose latency misses lower vrate: "all" or "underserved".
        #[arg(long)]
        protect: Option<String>,
    },
    /// Per-volume statistics (one table).
    Stats,
    /// A live per-volume table refreshed every second; Ctrl-C exits.
    Top {
        /// Print one frame and exit.
        #[arg(long)]
        once: bool,
        /// Refresh interval in seconds.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
}

struct Api {
    socket: PathBuf,
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

fn socket_path(args: &CtlArgs) -> Result<PathBuf, String> {
    if let Some(s) = &args.socket {
        return Ok(s.clone());
    }
    if let Some(c) = &args.config {
        let config = Config::load(c).map_err(|e| e.to_string())?;
        return config
            .control
            .socket
            .ok_or_else(|| format!("{}: no [control] socket is configured", c.display()));
    }
    match std::env::var_os(SOCKET_ENV) {
        Some(s) if !s.is_empty() => Ok(PathBuf::from(s)),
        _ => Err(format!(
            "no control socket: give --socket PATH, --config FILE or set {SOCKET_ENV}"
        )),
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

/// Run a ctl command.
pub fn run(args: &CtlArgs) -> Result<(), String> {
    let api = Api {
        socket: socket_path(args)?,
    };
    match &args.command {
        CtlCommand::Volumes => {
            let v = api.ok("GET", "/v1/volumes", None)?;
            if args.json {
                return print_json(&v);
            }
            print!("{}", format_volumes(&decode(v)?));
        }
        CtlCommand::Groups => {
            let v = api.ok("GET", "/v1/groups", None)?;
            if args.json {
                return print_json(&v);
            }
            print!("{}", format_groups(&decode(v)?));
        }
        CtlCommand::AddVolume {
            name,
            vhost_socket: socket,
            size,
            offset,
            path,
            group,
            weight,
            keys,
        } => {
            let mut body = key_values(keys)?;
            body.insert("name".into(), json!(name));
            body.insert("socket".into(), json!(socket));
            body.insert("size".into(), json!(size));
            let optional = [
                ("offset", offset.as_ref().map(|o| json!(o))),
                ("path", path.as_ref().map(|p| json!(p))),
                ("group", group.as_ref().map(|g| json!(g))),
                ("weight", weight.map(|w| json!(w))),
            ];
            for (key, value) in optional {
                if let Some(value) = value {
                    body.insert(key.into(), value);
                }
            }
            let v = api.ok("POST", "/v1/volumes", Some(&Value::Object(body)))?;
            if args.json {
                return print_json(&v);
            }
            match v["path"].as_str() {
                Some(p) => println!("volume {name}: added, file {p}, socket {socket}"),
                None => println!(
                    "volume {name}: added at offset {}, socket {socket}",
                    v["offset"]
                ),
            }
        }
        CtlCommand::RemoveVolume { name, force } => {
            let query = if *force { "?force=true" } else { "" };
            api.done(
                "DELETE",
                &format!("/v1/volumes/{}{query}", encode_segment(name)),
            )?;
            println!("volume {name}: removed");
        }
        CtlCommand::Resize { name, size } => {
            let path = format!("/v1/volumes/{}", encode_segment(name));
            let v = api.ok("PATCH", &path, Some(&json!({ "size": size })))?;
            if args.json {
                return print_json(&v);
            }
            println!("volume {name}: {} bytes", v["size"]);
        }
        CtlCommand::AddGroup {
            name,
            parent,
            weight,
        } => {
            let mut body = json!({ "name": name });
            if let Some(p) = parent {
                body["parent"] = json!(p);
            }
            if let Some(w) = weight {
                body["weight"] = json!(w);
            }
            let v = api.ok("POST", "/v1/groups", Some(&body))?;
            if args.json {
                return print_json(&v);
            }
            println!(
                "group {name}: added under {}",
                v["parent"].as_str().unwrap_or("root")
            );
        }
        CtlCommand::RemoveGroup { name } => {
            api.done("DELETE", &format!("/v1/groups/{}", encode_segment(name)))?;
            println!("group {name}: removed");
        }
        CtlCommand::SetWeight { name, weight } => {
            let (kind, v) = api.patch_node(name, &json!({ "weight": weight }))?;
            if args.json {
                return print_json(&v);
            }
            println!("{kind} {name}: weight {weight}");
        }
        CtlCommand::SetCaps { name, limits } => {
            let caps = key_values(limits)?;
            let (kind, v) = api.patch_node(name, &json!({ "caps": caps }))?;
            if args.json {
                return print_json(&v);
            }
            let caps: crate::qos::CapsConfig =
                serde_json::from_value(v["caps"]["value"].clone()).map_err(|e| e.to_string())?;
            println!("{kind} {name}: caps {caps}");
        }
        CtlCommand::SetClass {
            name,
            class,
            target,
        } => {
            let mut body = json!({ "class": class });
            if let Some(t) = target {
                body["latency_target"] = json!(t);
            }
            let (kind, v) = api.patch_node(name, &body)?;
            if args.json {
                return print_json(&v);
            }
            match v["latency_target"]["value"].as_str() {
                Some(t) if class == "latency" => {
                    println!("{kind} {name}: class latency, target {t}")
                }
                _ => println!("{kind} {name}: class {class}"),
            }
        }
        CtlCommand::SetReserve { name, values } => {
            let reserve = key_values(values)?;
            let (kind, v) = api.patch_node(name, &json!({ "reserve": reserve }))?;
            if args.json {
                return print_json(&v);
            }
            println!("{kind} {name}: reserve {}", v["reserve"]["value"]);
        }
        CtlCommand::Qos {
            enable,
            rpct,
            rlat,
            wpct,
            wlat,
            min,
            max,
            protect,
        } => {
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
            set("enable", enable.map(Value::from));
            set("rpct", rpct.map(Value::from));
            set("rlat", rlat.clone().map(Value::from));
            set("wpct", wpct.map(Value::from));
            set("wlat", wlat.clone().map(Value::from));
            set("min", min.map(Value::from));
            set("max", max.map(Value::from));
            set("protect", protect.clone().map(Value::from));
            let mut device = if changed {
                api.ok("PUT", "/v1/device/qos", Some(&qos))?
            } else {
                device
            };
            // The model with the learner's estimate, where there is one.
            device["model"] = api.ok("GET", "/v1/device/model", None)?;
            if args.json {
                return print_json(&device);
            }
            print!("{}", format_qos(&device));
        }
        CtlCommand::Stats => {
            let v = api.ok("GET", "/v1/stats", None)?;
            if args.json {
                return print_json(&v);
            }
            print!("{}", format_stats(&decode(v)?));
        }
        CtlCommand::Top { once, interval } => top(&api, *once, *interval, args.json)?,
    }
    Ok(())
}

/// Percent-encode a name for a URL path segment.
fn encode_segment(name: &str) -> String {
    let mut out = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn top(api: &Api, once: bool, interval: f64, json: bool) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_resolution_order() {
        let args = |socket: Option<&str>, config: Option<PathBuf>| CtlArgs {
            socket: socket.map(PathBuf::from),
            config,
            json: false,
            command: CtlCommand::Volumes,
        };
        assert_eq!(
            socket_path(&args(Some("/a.sock"), None)).unwrap(),
            PathBuf::from("/a.sock")
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            "[device]\nkind = \"null\"\n[control]\nsocket = \"/run/x.sock\"\n\
             [[volume]]\nname = \"v\"\nsocket = \"v.sock\"\nsize = \"1MiB\"\n",
        )
        .unwrap();
        assert_eq!(
            socket_path(&args(None, Some(cfg))).unwrap(),
            PathBuf::from("/run/x.sock")
        );
        assert_eq!(encode_segment("a b/c"), "a%20b%2Fc");
    }
}
