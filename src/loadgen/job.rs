//! Job files and the tenant list of one `vhost-iocost bench` run.
//!
//! A job file is TOML with an optional `[defaults]` table and one `[[tenant]]` table per
//! tenant, using the keys of `--tenant` ([`TENANT_KEYS`]):
//!
//! ```toml
//! [defaults]
//! runtime = "10s"
//! bs = "4k"
//!
//! [[tenant]]
//! name = "light"
//! socket = "light.sock"
//! iodepth = 16
//! ```
//!
//! Precedence, lowest first: built-in defaults, the job file's `[defaults]`, the default
//! flags given on the command line (`--rw --bs --iodepth --runtime --ramp`), then the
//! tenant's own keys (its `[[tenant]]` table or its `--tenant` list). Job tenants come
//! first, then the `--tenant` ones; both get the same defaults.

use super::spec::{TenantSpec, TENANT_KEYS};
use std::path::Path;

/// Keys whose values are durations: a bare integer would mean microseconds, which is never
/// what a job file means, so the job file wants a string there.
const DURATION_KEYS: &[&str] = &["runtime", "ramp", "delay", "on", "off"];

/// A parsed job file: key/value pairs in their text form (the `--tenant` syntax).
#[derive(Debug, Default, PartialEq)]
pub struct JobFile {
    pub defaults: Vec<(String, String)>,
    pub tenants: Vec<Vec<(String, String)>>,
}

impl JobFile {
    /// Parses a job file's text; errors name the table and the key.
    pub fn parse(text: &str) -> Result<Self, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let mut job = JobFile::default();
        for (key, value) in &table {
            match key.as_str() {
                "defaults" => {
                    let t = value
                        .as_table()
                        .ok_or("`defaults` must be a table ([defaults])")?;
                    job.defaults = pairs("[defaults]", t, false)?;
                }
                "tenant" => {
                    let list = value
                        .as_array()
                        .ok_or("`tenant` must be an array of tables ([[tenant]])")?;
                    for (i, v) in list.iter().enumerate() {
                        let what = format!("[[tenant]] {}", i + 1);
                        let t = v.as_table().ok_or(format!("{what}: must be a table"))?;
                        job.tenants.push(pairs(&what, t, true)?);
                    }
                }
                other => {
                    return Err(format!(
                        "unknown top-level key `{other}` (a job file has a [defaults] table and [[tenant]] tables)"
                    ))
                }
            }
        }
        if job.tenants.is_empty() {
            return Err("no [[tenant]] table".into());
        }
        Ok(job)
    }

    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

fn pairs(
    what: &str,
    table: &toml::Table,
    per_tenant: bool,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (key, value) in table {
        if !TENANT_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "{what}: unknown key `{key}` (keys: {})",
                TENANT_KEYS.join(", ")
            ));
        }
        if !per_tenant && (key == "name" || key == "socket") {
            return Err(format!(
                "{what}: `{key}` is per tenant; set it in each [[tenant]]"
            ));
        }
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) if DURATION_KEYS.contains(&key.as_str()) => {
                return Err(format!(
                    "{what}: {key}: give a duration string such as \"{i}s\" or \"{i}ms\""
                ))
            }
            toml::Value::Integer(i) if *i >= 0 => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(format!(
                    "{what}: {key}: expected a string, a non-negative integer or a boolean, got `{other}`"
                ))
            }
        };
        out.push((key.clone(), text));
    }
    Ok(out)
}

/// Builds the tenants of a run from a job file (if any), the default flags given on the
/// command line (`(key, value)`, e.g. `("runtime", "2s")`) and `--tenant` lists. Tenants
/// without a name are called `t1`, `t2`, ... by position; relative sockets are taken inside
/// `socket_dir` when it is given.
pub fn build_tenants(
    job: Option<&JobFile>,
    flags: &[(&str, String)],
    tenant_args: &[String],
    socket_dir: Option<&Path>,
) -> Result<Vec<TenantSpec>, String> {
    let mut base = TenantSpec::default();
    if let Some(job) = job {
        for (k, v) in &job.defaults {
            base.set(k, v).map_err(|e| format!("[defaults]: {e}"))?;
        }
    }
    for (k, v) in flags {
        base.set(k, v).map_err(|e| format!("--{k}: {e}"))?;
    }
    let mut out: Vec<TenantSpec> = Vec::new();
    let job_tenants = job.map(|j| j.tenants.as_slice()).unwrap_or_default();
    for (i, pairs) in job_tenants.iter().enumerate() {
        let what = format!("[[tenant]] {}", i + 1);
        let mut t = base.clone();
        for (k, v) in pairs {
            t.set(k, v).map_err(|e| format!("{what}: {e}"))?;
        }
        finish(&mut t, &what, &out, socket_dir)?;
        out.push(t);
    }
    for (i, text) in tenant_args.iter().enumerate() {
        let what = format!("--tenant {}", i + 1);
        let mut t = base.clone();
        t.apply_list(text).map_err(|e| format!("{what}: {e}"))?;
        finish(&mut t, &what, &out, socket_dir)?;
        out.push(t);
    }
    if out.is_empty() {
        return Err("no tenants: give --job FILE or --tenant KEY=VALUE,...".into());
    }
    Ok(out)
}

fn finish(
    t: &mut TenantSpec,
    what: &str,
    before: &[TenantSpec],
    socket_dir: Option<&Path>,
) -> Result<(), String> {
    if t.name.is_empty() {
        t.name = format!("t{}", before.len() + 1);
    }
    if let Some(dir) = socket_dir {
        if !t.socket.is_empty() && Path::new(&t.socket).is_relative() {
            t.socket = dir.join(&t.socket).to_string_lossy().into_owned();
        }
    }
    t.validate()
        .map_err(|e| format!("{what} ({}): {e}", t.name))?;
    if before.iter().any(|b| b.name == t.name) {
        return Err(format!("{what}: tenant name `{}` used twice", t.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::Pattern;
    use std::time::Duration;

    const JOB: &str = r#"
[defaults]
runtime = "5s"
ramp = "1s"
bs = "8k"
iodepth = 8

[[tenant]]
name = "light"
socket = "light.sock"

[[tenant]]
name = "heavy"
socket = "/abs/heavy.sock"
rw = "randrw"
rwmixread = 70
iodepth = 32
queues = 2
rate_iops = 5000
delay = "2s"
"#;

    fn build(
        job: &str,
        flags: &[(&str, String)],
        args: &[&str],
    ) -> Result<Vec<TenantSpec>, String> {
        let job = JobFile::parse(job)?;
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        build_tenants(Some(&job), flags, &args, Some(Path::new("/run/d")))
    }

    #[test]
    fn job_file_defaults_and_tenants() {
        let t = build(JOB, &[], &[]).unwrap();
        assert_eq!(t.len(), 2);
        let (light, heavy) = (&t[0], &t[1]);
        assert_eq!(light.name, "light");
        assert_eq!(light.socket, "/run/d/light.sock");
        assert_eq!(light.rw, Pattern::RandRead);
        assert_eq!((light.bs, light.iodepth, light.queues), (8192, 8, 1));
        assert_eq!(light.runtime, Duration::from_secs(5));
        assert_eq!(light.ramp, Duration::from_secs(1));
        assert_eq!(light.delay, Duration::ZERO);
        assert_eq!(heavy.socket, "/abs/heavy.sock");
        assert_eq!((heavy.rw, heavy.read_pct), (Pattern::RandRw, 70));
        assert_eq!((heavy.iodepth, heavy.queues), (32, 2));
        assert_eq!(heavy.rate_iops, Some(5000));
        assert_eq!(heavy.delay, Duration::from_secs(2));
    }

    #[test]
    fn precedence_flags_over_job_defaults_under_tenant_keys() {
        let job = "[defaults]\nruntime = \"5s\"\nbs = \"8k\"\n[[tenant]]\nsocket = \"a\"\n\
                   [[tenant]]\nsocket = \"b\"\nruntime = \"7s\"\n";
        let flags = [("runtime", "2s".to_string()), ("iodepth", "4".to_string())];
        let t = build(job, &flags, &["socket=c,bs=16k"]).unwrap();
        assert_eq!(
            t[0].runtime,
            Duration::from_secs(2),
            "flag beats [defaults]"
        );
        assert_eq!(
            t[1].runtime,
            Duration::from_secs(7),
            "tenant key beats flag"
        );
        assert_eq!(t[0].bs, 8192, "[defaults] beats built-in");
        assert_eq!(t[0].iodepth, 4);
        // --tenant lists come after the job's tenants, on the same defaults.
        assert_eq!(t[2].socket, "/run/d/c");
        assert_eq!((t[2].bs, t[2].iodepth), (16384, 4));
        assert_eq!(t[2].runtime, Duration::from_secs(2));
        let names: Vec<_> = t.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["t1", "t2", "t3"]);
    }

    #[test]
    fn flags_and_tenant_lists_alone() {
        let args = vec!["socket=x.sock,rw=write,bs=1M".to_string()];
        let t = build_tenants(None, &[("ramp", "1s".into())], &args, None).unwrap();
        assert_eq!(t[0].socket, "x.sock");
        assert_eq!((t[0].rw, t[0].bs), (Pattern::Write, 1 << 20));
        assert_eq!(t[0].ramp, Duration::from_secs(1));
        assert!(build_tenants(None, &[], &[], None)
            .unwrap_err()
            .contains("no tenants"));
    }

    fn err(job: &str) -> String {
        build(job, &[], &[]).unwrap_err()
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = err("[[tenant]]\nsocket = \"a\"\ncolour = \"red\"\n");
        assert!(e.starts_with("[[tenant]] 1: unknown key `colour`"), "{e}");
        let e = err("[defaults]\nblocksize = \"4k\"\n[[tenant]]\nsocket = \"a\"\n");
        assert!(e.starts_with("[defaults]: unknown key `blocksize`"), "{e}");
        let e = err("[global]\nbs = \"4k\"\n[[tenant]]\nsocket = \"a\"\n");
        assert!(e.contains("unknown top-level key `global`"), "{e}");
        let e = err("[[tenant]]\nsocket = \"a\"\n[[tenant]]\nsocket = \"b\"\nqueue = 2\n");
        assert!(e.starts_with("[[tenant]] 2: unknown key `queue`"), "{e}");
    }

    #[test]
    fn bad_values_name_the_tenant_and_key() {
        let e = err("[[tenant]]\nname = \"r\"\nsocket = \"a\"\nbs = \"1000\"\n");
        assert!(e.starts_with("[[tenant]] 1 (r): bs:"), "{e}");
        let e = err("[[tenant]]\nname = \"r\"\n");
        assert!(e.starts_with("[[tenant]] 1 (r): socket: required"), "{e}");
        let e = err("[[tenant]]\nsocket = \"a\"\nrw = \"randomread\"\n");
        assert!(
            e.starts_with("[[tenant]] 1: rw: unknown pattern `randomread`"),
            "{e}"
        );
        let e = err("[[tenant]]\nsocket = \"a\"\nruntime = 10\n");
        assert!(e.contains("runtime: give a duration string"), "{e}");
        let e = err("[[tenant]]\nsocket = \"a\"\niodepth = -1\n");
        assert!(
            e.contains("iodepth: expected a string, a non-negative integer or a boolean"),
            "{e}"
        );
        let e = err("[[tenant]]\nsocket = \"a\"\niodepth = 2\nqueues = 4\n");
        assert!(
            e.contains("queues: 4 queues need an iodepth of at least 4"),
            "{e}"
        );
        let e = err("[[tenant]]\nsocket = \"a\"\nqueues = 0\n");
        assert!(e.contains("queues: must be 1..=64"), "{e}");
        let e = err("[defaults]\nsocket = \"a\"\n[[tenant]]\nname = \"x\"\n");
        assert!(e.starts_with("[defaults]: `socket` is per tenant"), "{e}");
        let e = err("[defaults]\nruntime = \"1s\"\nramp = \"2s\"\n[[tenant]]\nsocket = \"a\"\n");
        assert!(e.contains("ramp: must be shorter than runtime"), "{e}");
        let e = err(
            "[[tenant]]\nname = \"a\"\nsocket = \"a\"\n[[tenant]]\nname = \"a\"\nsocket = \"b\"\n",
        );
        assert!(e.contains("tenant name `a` used twice"), "{e}");
        assert!(err("[defaults]\nbs = \"4k\"\n").contains("no [[tenant]] table"));
        assert!(
            err("[[tenant]\n").contains("line 1"),
            "TOML syntax errors carry the line"
        );
        assert!(err("tenant = 3\n").contains("array of tables"));
    }

    #[test]
    fn shipped_example_jobs_parse() {
        for name in ["weighted-split.toml", "noisy-neighbour.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("configs/bench")
                .join(name);
            let job = JobFile::load(&path).unwrap();
            let t = build_tenants(Some(&job), &[], &[], None).unwrap();
            assert_eq!(t.len(), 2, "{name}");
        }
    }
}
