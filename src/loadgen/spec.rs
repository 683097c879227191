//! Tenant workload descriptions: `socket=a.sock,rw=randread,bs=4k,iodepth=32`.

use crate::duration::parse_duration;
use crate::size::ByteSize;
use serde::Serialize;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    RandRead,
    RandWrite,
    /// Random, `read_pct` percent reads.
    RandRw,
    Read,
    Write,
}

impl Pattern {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            "randrw" => Pattern::RandRw,
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            other => {
                return Err(format!(
                    "rw: unknown pattern `{other}` (randread, randwrite, randrw, read, write)"
                ))
            }
        })
    }

    /// The name used by `rw=` (and by fio).
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
            Pattern::RandRw => "randrw",
            Pattern::Read => "read",
            Pattern::Write => "write",
        }
    }

    pub fn is_random(self) -> bool {
        matches!(
            self,
            Pattern::RandRead | Pattern::RandWrite | Pattern::RandRw
        )
    }
}

/// One tenant: a client attached to one volume socket.
#[derive(Clone, Debug, Serialize)]
pub struct TenantSpec {
    pub name: String,
    pub socket: String,
    pub rw: Pattern,
    /// Percentage of reads for `randrw`.
    pub read_pct: u8,
    pub bs: u64,
    pub iodepth: usize,
    /// Optional cap in requests per second.
    pub rate_iops: Option<u32>,
    pub runtime: Duration,
    /// Time at the start not counted in the results.
    pub ramp: Duration,
    /// Time to wait before this tenant starts (tenants that come and go).
    pub delay: Duration,
    /// Issue for `on`, then pause for `off`, repeatedly from the tenant's start (a tenant
    /// whose demand comes and goes); `None`: issue throughout.
    pub duty: Option<Duty>,
    /// vhost-user queues the tenant uses; requests go to them round-robin.
    pub queues: usize,
    /// One client thread per queue, each keeping `iodepth / queues` requests (and its
    /// share of `rate_iops`) in flight on its own queue, instead of one thread for all.
    pub queue_threads: bool,
    /// The client spins on its queue for completions instead of sleeping until the daemon
    /// notifies it, as a guest with polled virtio-blk queues does (Linux's
    /// `virtio_blk.poll_queues` under io_uring's IOPOLL): no wake-up on the client's side,
    /// one CPU kept busy per client thread.
    pub poll: bool,
    /// Check every read of a block this tenant wrote against its last write.
    pub verify: bool,
}

impl Default for TenantSpec {
    fn default() -> Self {
        TenantSpec {
            name: String::new(),
            socket: String::new(),
            rw: Pattern::RandRead,
            read_pct: 50,
            bs: 4096,
            iodepth: 32,
            rate_iops: None,
            runtime: Duration::from_secs(10),
            ramp: Duration::from_secs(0),
            delay: Duration::from_secs(0),
            duty: None,
            queues: 1,
            queue_threads: false,
            poll: false,
            verify: false,
        }
    }
}

/// Every key a tenant (a `--tenant` list, a job file's `[defaults]` or `[[tenant]]` table)
/// may set.
pub const TENANT_KEYS: &[&str] = &[
    "name",
    "socket",
    "rw",
    "rwmixread",
    "bs",
    "iodepth",
    "rate_iops",
    "runtime",
    "ramp",
    "delay",
    "on",
    "off",
    "queues",
    "queue_threads",
    "poll",
    "verify",
];

impl TenantSpec {
    /// Parses `key=value,...` on top of `base`. Keys: [`TENANT_KEYS`].
    pub fn parse(text: &str, base: &TenantSpec) -> Result<Self, String> {
        let mut t = base.clone();
        t.apply_list(text)?;
        t.validate()?;
        Ok(t)
    }

    /// Sets every `key=value` of a comma-separated list, without validating the result.
    pub fn apply_list(&mut self, text: &str) -> Result<(), String> {
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}`: expected key=value"))?;
            self.set(key.trim(), value.trim())?;
        }
        Ok(())
    }

    /// Sets one key from its text form; errors start with the key's name.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let num = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{key}: `{v}` is not a number"))
        };
        let t = self;
        match key {
            "name" => t.name = value.to_string(),
            "socket" => t.socket = value.to_string(),
            "rw" => t.rw = Pattern::parse(value)?,
            "rwmixread" => t.read_pct = num(value)?.min(100) as u8,
            "bs" => t.bs = ByteSize::parse(value).map_err(|e| format!("bs: {e}"))?.0,
            "iodepth" => t.iodepth = num(value)? as usize,
            "rate_iops" => t.rate_iops = Some(num(value)?.min(u64::from(u32::MAX)) as u32),
            "runtime" => t.runtime = parse_duration(value).map_err(|e| format!("runtime: {e}"))?,
            "ramp" => t.ramp = parse_duration(value).map_err(|e| format!("ramp: {e}"))?,
            "delay" => t.delay = parse_duration(value).map_err(|e| format!("delay: {e}"))?,
            "on" | "off" => {
                let d = parse_duration(value).map_err(|e| format!("{key}: {e}"))?;
                let duty = t.duty.get_or_insert(Duty {
                    on: Duration::ZERO,
                    off: Duration::ZERO,
                });
                if key == "on" {
                    duty.on = d;
                } else {
                    duty.off = d;
                }
            }
            "queues" => t.queues = num(value)?.min(1 << 16) as usize,
            "queue_threads" | "poll" | "verify" => {
                let on = match value {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(format!("{key}: `{value}` is not true or false")),
                };
                match key {
                    "verify" => t.verify = on,
                    "poll" => t.poll = on,
                    _ => t.queue_threads = on,
                }
            }
            other => {
                return Err(format!(
                    "unknown tenant key `{other}` (keys: {})",
                    TENANT_KEYS.join(", ")
                ))
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.socket.is_empty() {
            return Err("socket: required".into());
        }
        if self.bs == 0 || self.bs % 512 != 0 || self.bs > 64 << 20 {
            return Err(format!(
                "bs: must be a multiple of 512 up to 64MiB (got {})",
                self.bs
            ));
        }
        if self.iodepth == 0 || self.iodepth > 1024 {
            return Err(format!("iodepth: must be 1..=1024 (got {})", self.iodepth));
        }
        if self.queues == 0 || self.queues > 64 {
            return Err(format!("queues: must be 1..=64 (got {})", self.queues));
        }
        if self.queues > self.iodepth {
            return Err(format!(
                "queues: {} queues need an iodepth of at least {} (got {})",
                self.queues, self.queues, self.iodepth
            ));
        }
        if self.queue_threads && self.iodepth % self.queues != 0 {
            return Err(format!(
                "queue_threads: iodepth ({}) must split evenly over the {} queues",
                self.iodepth, self.queues
            ));
        }
        if self.poll && self.queues > 1 && !self.queue_threads {
            return Err(format!(
                "poll: one client thread spins on one queue; with {} queues set queue_threads = true",
                self.queues
            ));
        }
        if self.queue_threads && self.verify {
            return Err(
                "queue_threads: not with verify (one thread tracks what was written)".into(),
            );
        }
        if self.rate_iops == Some(0) {
            return Err("rate_iops: must be positive".into());
        }
        if self.ramp >= self.runtime {
            return Err("ramp: must be shorter than runtime".into());
        }
        if let Some(d) = self.duty {
            if d.on.is_zero() || d.off.is_zero() {
                return Err(format!(
                    "on, off: give both, each positive (got on={:?}, off={:?})",
                    d.on, d.off
                ));
            }
        }
        Ok(())
    }
}

/// A tenant's demand cycle: `on` issuing, then `off` idle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Duty {
    pub on: Duration,
    pub off: Duration,
}

impl Duty {
    /// Where `elapsed` (time since the tenant started) falls in an off phase, the time
    /// since the start at which the next on phase begins.
    pub fn paused_until(&self, elapsed: Duration) -> Option<Duration> {
        let cycle = self.on + self.off;
        let into = Duration::from_nanos((elapsed.as_nanos() % cycle.as_nanos()) as u64);
        (into >= self.on).then(|| elapsed - into + cycle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tenant_specs_over_defaults() {
        let base = TenantSpec::default();
        let t = TenantSpec::parse(
            "socket=a.sock,rw=randwrite,bs=128k,iodepth=4,runtime=2s,ramp=500ms",
            &base,
        )
        .unwrap();
        assert_eq!(t.rw, Pattern::RandWrite);
        assert_eq!(t.bs, 128 << 10);
        assert_eq!(t.iodepth, 4);
        assert_eq!(t.runtime, Duration::from_secs(2));
        assert_eq!(t.ramp, Duration::from_millis(500));
    }

    #[test]
    fn a_duty_cycle_pauses_between_its_on_phases() {
        let t = TenantSpec::parse("socket=a,on=2s,off=1s", &TenantSpec::default()).unwrap();
        let duty = t.duty.unwrap();
        let s = Duration::from_secs;
        assert_eq!(duty.paused_until(s(0)), None);
        assert_eq!(duty.paused_until(Duration::from_millis(1999)), None);
        assert_eq!(duty.paused_until(s(2)), Some(s(3)));
        assert_eq!(duty.paused_until(Duration::from_millis(2500)), Some(s(3)));
        assert_eq!(duty.paused_until(s(3)), None);
        assert_eq!(duty.paused_until(s(5)), Some(s(6)));
        let e = TenantSpec::parse("socket=a,on=2s", &TenantSpec::default()).unwrap_err();
        assert!(e.starts_with("on, off: give both"), "{e}");
    }

    #[test]
    fn names_the_bad_key() {
        let base = TenantSpec::default();
        assert!(TenantSpec::parse("socket=a,bs=100", &base)
            .unwrap_err()
            .starts_with("bs:"));
        assert!(TenantSpec::parse("socket=a,iodepth=0", &base)
            .unwrap_err()
            .starts_with("iodepth:"));
        assert!(TenantSpec::parse("socket=a,colour=red", &base)
            .unwrap_err()
            .contains("colour"));
        assert!(TenantSpec::parse("bs=4k", &base)
            .unwrap_err()
            .starts_with("socket:"));
    }

    #[test]
    fn a_polling_client_spins_on_one_queue_per_thread() {
        let base = TenantSpec::default();
        assert!(TenantSpec::parse("socket=a,poll=true", &base).unwrap().poll);
        let e = TenantSpec::parse("socket=a,poll=true,queues=2", &base).unwrap_err();
        assert!(e.starts_with("poll:") && e.contains("queue_threads"), "{e}");
        let t = TenantSpec::parse("socket=a,poll=1,queues=2,queue_threads=true", &base);
        assert!(t.unwrap().poll);
        assert!(TenantSpec::parse("socket=a,poll=yes", &base)
            .unwrap_err()
            .starts_with("poll:"));
    }
}
