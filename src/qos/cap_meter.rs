//! The meters that enforce caps ([`super::caps`]): six leaky buckets per cap with QEMU's
//! throttling semantics, and one meter per capped volume or group shared by its members,
//! who take turns by weight while it holds them back (design §12).

use std::sync::Mutex;

use super::caps::CapsConfig;
use super::tunables::TURN_GRACE_NS;
use crate::cost_model::IoKind;
use crate::lock::Locked;

/// One leaky bucket (QEMU's `LeakyBucket`).
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    /// Units per second; 0 = off.
    avg: f64,
    /// Burst rate; 0 = no burst beyond the implicit tenth of a second.
    max: f64,
    /// Seconds a full burst lasts.
    burst_length: f64,
    level: f64,
    burst_level: f64,
}

impl Bucket {
    fn new(avg: u64, max: u64, burst_length: u64) -> Self {
        Bucket {
            avg: avg as f64,
            max: if avg == 0 { 0.0 } else { max as f64 },
            burst_length: burst_length as f64,
            level: 0.0,
            burst_level: 0.0,
        }
    }

    fn leak(&mut self, seconds: f64) {
        if self.avg == 0.0 {
            return;
        }
        self.level = (self.level - self.avg * seconds).max(0.0);
        if self.burst_length > 1.0 {
            self.burst_level = (self.burst_level - self.max * seconds).max(0.0);
        }
    }

    /// Seconds until a request may go (0 = now).
    fn wait(&self) -> f64 {
        if self.avg == 0.0 {
            return 0.0;
        }
        let size = if self.max == 0.0 {
            self.avg / 10.0
        } else {
            self.max * self.burst_length
        };
        if self.level > size {
            return (self.level - size) / self.avg;
        }
        if self.burst_length > 1.0 {
            let extra = self.burst_level - self.max / 10.0;
            if extra > 0.0 {
                return extra / self.max;
            }
        }
        0.0
    }

    fn account(&mut self, units: f64) {
        if self.avg == 0.0 {
            return;
        }
        self.level += units;
        if self.burst_length > 1.0 {
            self.burst_level += units;
        }
    }
}

/// Buckets, in order.
const BPS_TOTAL: usize = 0;
const BPS_READ: usize = 1;
const BPS_WRITE: usize = 2;
const OPS_TOTAL: usize = 3;
const OPS_READ: usize = 4;
const OPS_WRITE: usize = 5;

/// The caps of one volume or group: its configuration and one meter shared by every
/// volume under it, so that a group's caps bound the sum of its members (design §12).
///
/// When the meter holds members back, they take turns in proportion to their weights
/// (start-time fair queueing over the seconds of cap each request uses, design §12.2):
/// a member the meter refused registers with its start tag, and when the meter opens
/// again the waiting member with the smallest tag goes first; the others wait for it. A
/// waiter that does not come back within [`TURN_GRACE_NS`] of its retry time, or that is
/// then held back by its budget, loses its place in line but keeps its tag, and one that
/// another cap holds longer is registered for when it really asks again: nobody waits for
/// a member that cannot go.
#[derive(Debug)]
pub(crate) struct NodeCaps {
    pub config: CapsConfig,
    state: Mutex<CapState>,
}

#[derive(Debug)]
struct CapState {
    meter: CapMeter,
    /// The start tag of the request served last (the group's virtual time), seconds of
    /// cap per unit of weight.
    vtime: f64,
    members: Vec<Member>,
}

/// A member's place in the turns.
#[derive(Debug)]
struct Member {
    id: usize,
    /// Finish tag of its last request.
    finish: f64,
    /// Waiting for the meter: when it was told to ask again, ns.
    due_ns: Option<u64>,
}

impl NodeCaps {
    /// Caps of `config` (already validated) with empty buckets.
    pub(crate) fn new(config: CapsConfig, now_ns: u64) -> Self {
        NodeCaps {
            state: Mutex::new(CapState {
                meter: CapMeter::new(&config, now_ns),
                vtime: 0.0,
                members: Vec::new(),
            }),
            config,
        }
    }

    /// Caps on one operation of a volume (`op_caps`).
    pub(crate) fn for_op(config: CapsConfig, kind: IoKind, now_ns: u64) -> Self {
        NodeCaps {
            state: Mutex::new(CapState {
                meter: CapMeter::for_op(&config, kind, now_ns),
                vtime: 0.0,
                members: Vec::new(),
            }),
            config,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CapState> {
        self.state.locked()
    }

    /// When member `id` may send a request of `kind`: `None` now, else the time (ns) to
    /// ask again.
    pub(crate) fn wait_until(&self, id: usize, kind: IoKind, now_ns: u64) -> Option<u64> {
        let mut st = self.state();
        let st = &mut *st;
        st.meter.buckets_of(kind)?;
        let Some(until_ns) = st.meter.wait_until(kind, now_ns) else {
            // Open: go unless a member ahead in line is due to ask now.
            let me = st.start_tag(id);
            let ahead = st.members.iter().any(|m| {
                m.id != id
                    && m.due_ns.is_some_and(|due| {
                        due <= now_ns.saturating_add(TURN_GRACE_NS / 4)
                            && now_ns <= due.saturating_add(TURN_GRACE_NS)
                    })
                    && st.vtime.max(m.finish) < me
            });
            if !ahead {
                return None;
            }
            let until_ns = now_ns + TURN_GRACE_NS / 4;
            st.member(id).due_ns = Some(until_ns);
            return Some(until_ns);
        };
        st.member(id).due_ns = Some(until_ns);
        Some(until_ns)
    }

    /// Member `id` was held back by something else after [`NodeCaps::wait_until`] let it
    /// go: it gives up its place in line (its tag stays).
    pub(crate) fn withdraw(&self, id: usize) {
        self.set_due(id, None);
    }

    /// Member `id` will ask again at `until_ns` (another cap on its path holds it that
    /// long): nobody waits for it before then.
    pub(crate) fn asks_again_at(&self, id: usize, until_ns: u64) {
        let mut st = self.state();
        if let Some(m) = st.members.iter_mut().find(|m| m.id == id) {
            // Registered here only if this cap refused it or it was waiting already.
            if m.due_ns.is_some() {
                m.due_ns = Some(until_ns);
            }
        }
    }

    fn set_due(&self, id: usize, due_ns: Option<u64>) {
        let mut st = self.state();
        if let Some(m) = st.members.iter_mut().find(|m| m.id == id) {
            m.due_ns = due_ns;
        }
    }

    /// Count an admitted request of member `id` (of `weight`), `kind` and `len` bytes.
    pub(crate) fn account(&self, id: usize, weight: u32, kind: IoKind, len: u64) {
        let mut st = self.state();
        if st.meter.buckets_of(kind).is_none() {
            return;
        }
        let seconds = st.meter.account(kind, len);
        let start = st.start_tag(id);
        st.vtime = start;
        let m = st.member(id);
        m.finish = start + seconds / f64::from(weight.max(1));
        m.due_ns = None;
    }
}

impl CapState {
    fn member(&mut self, id: usize) -> &mut Member {
        let i = match self.members.iter().position(|m| m.id == id) {
            Some(i) => i,
            None => {
                self.members.push(Member {
                    id,
                    finish: self.vtime,
                    due_ns: None,
                });
                self.members.len() - 1
            }
        };
        &mut self.members[i]
    }

    /// The start tag of member `id`'s next request.
    fn start_tag(&self, id: usize) -> f64 {
        let finish = self.members.iter().find(|m| m.id == id).map(|m| m.finish);
        self.vtime.max(finish.unwrap_or(self.vtime))
    }
}

/// The leaky buckets of one set of caps.
#[derive(Clone, Debug)]
pub struct CapMeter {
    /// Per-operation caps count only this kind (and nothing else counts in them).
    only: Option<IoKind>,
    buckets: [Bucket; 6],
    op_size: f64,
    last_leak_ns: u64,
}

impl CapMeter {
    /// A meter for `cfg` (already validated) with empty buckets, as QEMU starts one.
    pub fn new(cfg: &CapsConfig, now_ns: u64) -> Self {
        let length = cfg.burst_seconds.unwrap_or(1);
        let (bmax, omax) = (cfg.burst_bps.0, cfg.burst_iops);
        let mut buckets = [Bucket::default(); 6];
        buckets[BPS_TOTAL] = Bucket::new(cfg.bps.0, bmax, length);
        buckets[BPS_READ] = Bucket::new(cfg.read_bps.0, bmax, length);
        buckets[BPS_WRITE] = Bucket::new(cfg.write_bps.0, bmax, length);
        buckets[OPS_TOTAL] = Bucket::new(cfg.iops, omax, length);
        buckets[OPS_READ] = Bucket::new(cfg.read_iops, omax, length);
        buckets[OPS_WRITE] = Bucket::new(cfg.write_iops, omax, length);
        CapMeter {
            only: None,
            buckets,
            op_size: cfg.iops_size.0 as f64,
            last_leak_ns: now_ns,
        }
    }

    /// A meter for the caps of one operation (`op_caps`): only requests of `kind` count,
    /// each as one operation of its length.
    pub fn for_op(cfg: &CapsConfig, kind: IoKind, now_ns: u64) -> Self {
        CapMeter {
            only: Some(kind),
            ..CapMeter::new(cfg, now_ns)
        }
    }

    /// The buckets a request of `kind` counts in, or None when caps do not apply to it.
    fn buckets_of(&self, kind: IoKind) -> Option<[usize; 4]> {
        if let Some(only) = self.only {
            // The per-direction buckets are off for an operation's caps (validated).
            return (kind == only).then_some([BPS_TOTAL, BPS_READ, OPS_TOTAL, OPS_READ]);
        }
        match kind {
            IoKind::Read => Some([BPS_TOTAL, BPS_READ, OPS_TOTAL, OPS_READ]),
            IoKind::Write | IoKind::WriteZeroes => {
                Some([BPS_TOTAL, BPS_WRITE, OPS_TOTAL, OPS_WRITE])
            }
            IoKind::Flush | IoKind::Discard => None,
        }
    }

    fn leak(&mut self, now_ns: u64) {
        let seconds = now_ns.saturating_sub(self.last_leak_ns) as f64 / 1e9;
        self.last_leak_ns = self.last_leak_ns.max(now_ns);
        for b in &mut self.buckets {
            b.leak(seconds);
        }
    }

    /// When a request of `kind` may go: `None` now, else the time (ns) to ask again.
    pub fn wait_until(&mut self, kind: IoKind, now_ns: u64) -> Option<u64> {
        let buckets = self.buckets_of(kind)?;
        self.leak(now_ns);
        let wait = buckets
            .iter()
            .map(|&b| self.buckets[b].wait())
            .fold(0.0, f64::max);
        // Round up to whole ns: asking again at the returned time must succeed.
        (wait > 0.0).then(|| now_ns.saturating_add((wait * 1e9).ceil().max(1.0) as u64))
    }

    /// Count an admitted request of `kind` and `len` bytes; returns the seconds of cap
    /// it uses (the largest over its buckets of units / rate; 0 when uncapped).
    pub fn account(&mut self, kind: IoKind, len: u64) -> f64 {
        let Some(buckets) = self.buckets_of(kind) else {
            return 0.0;
        };
        let bytes = len as f64;
        let ops = if self.op_size > 0.0 && bytes > self.op_size {
            bytes / self.op_size
        } else {
            1.0
        };
        let mut seconds: f64 = 0.0;
        for (i, &b) in buckets.iter().enumerate() {
            let bucket = &mut self.buckets[b];
            let units = if i < 2 { bytes } else { ops };
            bucket.account(units);
            if bucket.avg > 0.0 {
                seconds = seconds.max(units / bucket.avg);
            }
        }
        seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn caps(toml_text: &str) -> CapsConfig {
        let c: CapsConfig = toml::from_str(toml_text).unwrap();
        c.validate().unwrap();
        c
    }

    /// A backlogged issuer: `len`-byte requests of `kind` sent as soon as the meter
    /// allows, for `seconds`; returns the requests admitted in each second.
    fn backlogged(cfg: &CapsConfig, kind: IoKind, len: u64, seconds: u64) -> Vec<u64> {
        let mut m = CapMeter::new(cfg, 0);
        let mut per_second = vec![0; seconds as usize];
        let mut now = 0;
        while now < seconds * SEC {
            match m.wait_until(kind, now) {
                None => {
                    m.account(kind, len);
                    per_second[(now / SEC) as usize] += 1;
                }
                Some(t) => {
                    assert!(t > now, "a wait must move time forward");
                    now = t;
                }
            }
        }
        per_second
    }

    #[test]
    fn an_iops_cap_holds_every_second_within_one_request() {
        let per_second = backlogged(&caps("iops = 2000"), IoKind::Read, 4096, 10);
        // The first second also holds the initial tenth-of-a-second burst.
        assert!((2000..=2201).contains(&per_second[0]), "{per_second:?}");
        for &n in &per_second[1..] {
            assert!((1999..=2001).contains(&n), "{per_second:?}");
        }
    }

    #[test]
    fn a_byte_cap_counts_bytes_and_the_other_direction_is_free() {
        let cfg = caps("write_bps = \"1MiB\"");
        let per_second = backlogged(&cfg, IoKind::Write, 64 << 10, 5);
        for &n in &per_second[1..] {
            assert!((15..=17).contains(&n), "{per_second:?}");
        }
        let mut m = CapMeter::new(&cfg, 0);
        for _ in 0..1000 {
            assert_eq!(m.wait_until(IoKind::Read, 0), None);
            m.account(IoKind::Read, 1 << 20);
        }
        assert_eq!(m.wait_until(IoKind::Flush, 0), None);
    }

    /// QEMU's example: 100 IOPS bursting to 2000 for 60 s is a 120 000-operation bucket:
    /// about 63 s at 2000 IOPS, then 100.
    #[test]
    fn a_long_burst_runs_at_its_rate_then_falls_to_the_cap() {
        let cfg = caps("iops = 100\nburst_iops = 2000\nburst_seconds = 60");
        let per_second = backlogged(&cfg, IoKind::Read, 4096, 70);
        for &n in &per_second[1..60] {
            assert!((1999..=2001).contains(&n), "{per_second:?}");
        }
        for &n in &per_second[66..] {
            assert!((99..=101).contains(&n), "{per_second:?}");
        }
    }

    /// A cap below one request: it goes, and the next one waits for it to drain.
    #[test]
    fn a_request_larger_than_the_cap_goes_and_the_next_waits_for_it() {
        let mut m = CapMeter::new(&caps("bps = \"64KiB\""), 0);
        assert_eq!(m.wait_until(IoKind::Read, 0), None);
        m.account(IoKind::Read, 1 << 20);
        let t = m.wait_until(IoKind::Read, 0).unwrap();
        // (1 MiB − 6.4 KiB) at 64 KiB/s.
        let want = ((1 << 20) as f64 - 6553.6) / 65536.0;
        assert!((t as f64 / 1e9 - want).abs() < 1e-6, "{t}");
        assert_eq!(m.wait_until(IoKind::Read, t), None);
    }

    #[test]
    fn large_requests_count_as_several_operations_with_iops_size() {
        let cfg = caps("iops = 100\niops_size = \"4KiB\"");
        let per_second = backlogged(&cfg, IoKind::Read, 16 << 10, 5);
        for &n in &per_second[1..] {
            assert!((24..=26).contains(&n), "{per_second:?}");
        }
    }

    /// Group turns: when the meter opens, the waiting member with the smaller tag goes
    /// first; one that does not come back holds the others up for the grace only.
    #[test]
    fn members_take_turns_and_an_absent_one_holds_no_one_up() {
        const MS: u64 = 1_000_000;
        // 10 IOPS: the bucket holds one operation, so two go at once, then one per 100 ms.
        let c = NodeCaps::new(caps("iops = 10"), 0);
        for _ in 0..2 {
            assert_eq!(c.wait_until(1, IoKind::Read, 0), None);
            c.account(1, 1, IoKind::Read, 4096);
        }
        assert_eq!(c.wait_until(2, IoKind::Read, 0), Some(100 * MS));
        // Member 1 has had two turns; member 2 is due: member 1 waits for it.
        let t = c.wait_until(1, IoKind::Read, 100 * MS).unwrap();
        assert!(t > 100 * MS && t < 100 * MS + TURN_GRACE_NS, "{t}");
        // Member 2 does not come back; after the grace member 1 goes.
        let late = 100 * MS + TURN_GRACE_NS + 1;
        assert_eq!(c.wait_until(1, IoKind::Read, late), None);
        // A member held back elsewhere gives up its place at once.
        let c = NodeCaps::new(caps("iops = 10"), 0);
        for _ in 0..2 {
            c.account(1, 1, IoKind::Read, 4096);
        }
        assert!(c.wait_until(2, IoKind::Read, 0).is_some());
        c.withdraw(2);
        assert_eq!(c.wait_until(1, IoKind::Read, 100 * MS), None);
        // Held longer by another cap on its path: registered for when it asks again.
        let c = NodeCaps::new(caps("iops = 10"), 0);
        for _ in 0..2 {
            c.account(1, 1, IoKind::Read, 4096);
        }
        assert!(c.wait_until(2, IoKind::Read, 0).is_some());
        c.asks_again_at(2, 500 * MS);
        assert_eq!(c.wait_until(1, IoKind::Read, 100 * MS), None);
        // Flushes are not capped and never wait for a turn.
        assert_eq!(c.wait_until(1, IoKind::Flush, 0), None);
    }

    #[test]
    fn invalid_caps_are_refused_naming_the_key() {
        let err = |t: &str| {
            toml::from_str::<CapsConfig>(t)
                .unwrap()
                .validate()
                .unwrap_err()
        };
        assert!(err("iops = 10\nread_iops = 5").starts_with("caps.iops"));
        assert!(err("bps = 10\nwrite_bps = 5").starts_with("caps.bps"));
        assert!(err("burst_iops = 10").starts_with("caps.burst_iops"));
        assert!(err("iops = 100\nburst_iops = 10").starts_with("caps.burst_iops"));
        assert!(err("iops = 100\nburst_seconds = 0").starts_with("caps.burst_seconds"));
        assert!(err("iops = 100\nburst_seconds = 5").starts_with("caps.burst_seconds"));
        assert!(err("bps = 100\niops_size = 4096").starts_with("caps.iops_size"));
        assert!(toml::from_str::<CapsConfig>("iosp = 1").is_err());
    }
}
