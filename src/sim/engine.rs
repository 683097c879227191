//! The discrete-event loop.
//!
//! Virtual time only: events sit in a priority queue ordered by (time, sequence number)
//! and are processed one by one; the QoS core reads a [`ManualClock`] that the loop sets
//! to each event's time. No threads, no sleeping, so a run is a pure function of the
//! scenario and its seed.
//!
//! The loop plays the data path's part exactly as the daemon does: the per-volume FIFO of
//! `backend::admission::queue` (only the head offered to admission control), a timer per volume
//! at the returned `until_ns`, a planner tick at the interval [`Planner::plan`]
//! returns (after which every parked head is offered again), and completions reported
//! with admission, slot and completion times.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::backend::admission::queue::{AdmitQueue, Next};
use crate::cost_model::{CostInput, CostModel, IoKind};
use crate::planner::Planner;
use crate::qos::{Charge, IoRequest, ManualClock, QosDevice, Timing, VolumeQos};

use super::disk::Disk;
use super::error::Error;
use super::report::{Completion, SimResult, TracePoint};
use super::scenario::Scenario;
use super::workload::Workload;
use crate::emulated::EmulatedDisk;

/// Index of a request in the slab.
pub(crate) type ReqId = usize;

/// Where virtual time starts on the QoS clock (so that no timestamp is 0).
const T0: u64 = 1_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// Start a workload (closed loop: fill; open loop: first arrival).
    Start(usize),
    /// Open-loop arrival.
    Arrival(usize),
    /// A volume's wait timer (token guards against stale timers).
    Timer(usize, u64),
    /// The disk finished a request.
    Done(ReqId),
    /// Planner tick.
    Plan,
}

#[derive(Debug, Clone)]
struct Req {
    vol: usize,
    wl: usize,
    queue: u32,
    io: IoRequest,
    gen_ns: u64,
    alloc_ns: u64,
    start_ns: u64,
    /// What the disk prices (with the volume's own seq/rand history), set at dispatch.
    input: CostInput,
    cost_ns: u64,
    charge: Option<Charge>,
}

#[derive(Default)]
struct VolState {
    /// The data path's own FIFO discipline (`backend::admission::queue`), slots included.
    parked: AdmitQueue<ReqId, Charge>,
    timer_at: Option<u64>,
    timer_token: u64,
    /// End of the previous admitted request, for the disk's own seq/rand decision.
    prev_end: Option<u64>,
}

struct Sim {
    clock: Arc<ManualClock>,
    qos: QosDevice,
    planner: Planner,
    vols: Vec<Arc<VolumeQos>>,
    vstate: Vec<VolState>,
    wls: Vec<Workload>,
    disk: Disk,
    size_model: Box<dyn CostModel>,
    reqs: Vec<Req>,
    free: Vec<ReqId>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    now: u64,
    end: u64,
    completions: Vec<Completion>,
    trace: Vec<TracePoint>,
    last_plan_at: u64,
}

/// Run a parsed scenario.
pub fn run(sc: &Scenario) -> Result<SimResult, Error> {
    sc.validate().map_err(Error::Invalid)?;
    let model = sc.device.model.build().map_err(Error::Invalid)?;
    let truth_cfg = sc
        .disk
        .truth
        .clone()
        .unwrap_or_else(|| sc.device.model.clone());
    let truth = truth_cfg.build().map_err(Error::Invalid)?;
    let clock = Arc::new(ManualClock::new(T0));
    let qos = QosDevice::new(Box::new(model.clone()), &sc.device.qos, clock.clone());
    for g in &sc.groups {
        qos.add_group(&g.name, g.parent.as_deref(), g.weight)
            .and_then(|()| qos.set_group_policy(&g.name, &g.policy()))
            .map_err(|e| Error::Invalid(format!("group {:?}: {e}", g.name)))?;
    }
    let mut vols = Vec::new();
    for v in &sc.volumes {
        let h = qos
            .add_volume(&v.name, v.group.as_deref(), v.weight)
            .map_err(|e| Error::Invalid(format!("volume {:?}: {e}", v.name)))?;
        qos.set_volume_policy(&v.name, &v.policy())
            .map_err(|e| Error::Invalid(format!("volume {:?}: {e}", v.name)))?;
        vols.push(h);
    }
    let wls = sc
        .workloads
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let vi = sc
                .volumes
                .iter()
                .position(|v| v.name == w.volume)
                .unwrap_or(0);
            let seed = sc.seed.wrapping_mul(0x9e37_79b9).wrapping_add(i as u64);
            Workload::new(w.clone(), vi, sc.volumes[vi].size.0, seed)
        })
        .collect::<Vec<_>>();
    let mut sim = Sim {
        clock,
        planner: Planner::new(&qos),
        qos,
        vstate: (0..vols.len()).map(|_| VolState::default()).collect(),
        vols,
        wls,
        disk: Disk::new(
            EmulatedDisk::new(
                truth,
                sc.disk.speed,
                sc.disk.channels as usize,
                sc.disk.base_latency.0,
            ),
            sc.disk.slots as usize,
        ),
        size_model: Box::new(model),
        reqs: Vec::new(),
        free: Vec::new(),
        events: BinaryHeap::new(),
        seq: 0,
        now: 0,
        end: sc.duration.0,
        completions: Vec::new(),
        trace: Vec::new(),
        last_plan_at: 0,
    };
    for i in 0..sim.wls.len() {
        let at = sim.wls[i].spec.start.0;
        sim.push(at, Event::Start(i));
    }
    sim.push(0, Event::Plan);
    sim.run();
    let names = sc.volumes.iter().map(|v| v.name.clone()).collect();
    let stats = sim.qos.stats();
    Ok(SimResult {
        name: sc.name.clone(),
        duration_ns: sc.duration.0,
        warmup_ns: sc.warmup.0,
        channels: sc.disk.channels,
        period_ns: sim.qos.period_ns(),
        qos_enabled: sim.qos.enabled(),
        volumes: names,
        completions: sim.completions,
        trace: sim.trace,
        dropped: sim.wls.iter().map(|w| w.dropped).sum(),
        stats,
    })
}

impl Sim {
    fn push(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.events.push(Reverse((at, self.seq, ev)));
    }

    fn run(&mut self) {
        while let Some(Reverse((at, _, ev))) = self.events.pop() {
            if at > self.end {
                break;
            }
            self.now = at;
            self.clock.set(T0 + at);
            match ev {
                Event::Start(w) => self.start_workload(w),
                Event::Arrival(w) => self.arrival(w),
                Event::Timer(v, token) => {
                    if self.vstate[v].timer_token == token {
                        self.vstate[v].timer_at = None;
                        self.kick(v);
                    }
                }
                Event::Done(id) => self.done(id),
                Event::Plan => self.plan(),
            }
        }
    }

    fn start_workload(&mut self, w: usize) {
        if self.wls[w].interval_ns().is_some() {
            self.arrival(w);
        } else {
            for _ in 0..self.wls[w].cap() {
                self.generate(w, None);
            }
        }
    }

    fn arrival(&mut self, w: usize) {
        if !self.wls[w].running_at(self.now) {
            return;
        }
        if self.wls[w].outstanding < self.wls[w].cap() {
            self.generate(w, None);
        } else {
            self.wls[w].dropped += 1;
        }
        if let Some(dt) = self.wls[w].interval_ns() {
            let at = self.now + dt;
            self.push(at, Event::Arrival(w));
        }
    }

    fn generate(&mut self, w: usize, queue: Option<u32>) {
        if !self.wls[w].running_at(self.now) {
            return;
        }
        let (q, kind, offset, len) = self.wls[w].next(queue);
        self.wls[w].outstanding += 1;
        let req = Req {
            vol: self.wls[w].vol,
            wl: w,
            queue: q,
            io: IoRequest { kind, offset, len },
            gen_ns: self.now,
            alloc_ns: 0,
            start_ns: 0,
            input: CostInput {
                kind,
                offset,
                len,
                prev_end: None,
            },
            cost_ns: 0,
            charge: None,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.reqs[id] = req;
                id
            }
            None => {
                self.reqs.push(req);
                self.reqs.len() - 1
            }
        };
        let v = self.reqs[id].vol;
        let io = self.reqs[id].io;
        self.vstate[v].parked.push(id, io, T0 + self.now);
        if self.vstate[v].parked.len() == 1 {
            self.kick(v);
        }
    }

    /// Offer parked heads until one has to wait.
    fn kick(&mut self, v: usize) {
        loop {
            let vol = self.vols[v].as_ref();
            let now_ns = crate::backend::admission::Admission::now_ns(vol);
            let disk = &self.disk;
            let take_slot = || disk.in_device < disk.slots;
            match self.vstate[v].parked.next(vol, now_ns, take_slot) {
                Next::Start(p) => {
                    let admitted = p.admitted_ns.saturating_sub(T0);
                    self.dispatch(p.req, p.ticket.expect("admitted"), admitted);
                }
                Next::WaitUntil(until_ns) => {
                    let at = until_ns.saturating_sub(T0).max(self.now + 1);
                    let st = &mut self.vstate[v];
                    if st.timer_at.is_some_and(|t| t <= at) {
                        return; // an earlier timer will re-evaluate
                    }
                    st.timer_token += 1;
                    st.timer_at = Some(at);
                    let token = st.timer_token;
                    self.push(at, Event::Timer(v, token));
                    return;
                }
                Next::NoSlot => {
                    // Woken when a request completes, as a worker is by its wake eventfd
                    // (the daemon wakes every waiting worker and the first to run takes the
                    // slot; here waiting volumes take freed slots in the order they asked).
                    if !self.disk.slot_waiters.contains(&v) {
                        self.disk.slot_waiters.push_back(v);
                    }
                    return;
                }
                Next::Empty => return,
            }
        }
    }

    /// Start an admitted request that holds a device slot.
    fn dispatch(&mut self, id: ReqId, charge: Charge, admitted_ns: u64) {
        let v = self.reqs[id].vol;
        let io = self.reqs[id].io;
        let input = CostInput {
            kind: io.kind,
            offset: io.offset,
            len: io.len,
            prev_end: self.vstate[v].prev_end,
        };
        if io.kind != IoKind::Flush {
            self.vstate[v].prev_end = Some(io.offset.saturating_add(io.len));
        }
        let r = &mut self.reqs[id];
        r.input = input;
        r.alloc_ns = admitted_ns;
        r.charge = Some(charge);
        self.start(id);
    }

    fn start(&mut self, id: ReqId) {
        self.disk.in_device += 1;
        let service = self.disk.emulated.serve(self.now, &self.reqs[id].input);
        let r = &mut self.reqs[id];
        r.start_ns = self.now;
        r.cost_ns = service.cost_ns;
        self.push(service.done_ns, Event::Done(id));
    }

    fn done(&mut self, id: ReqId) {
        self.disk.in_device -= 1;
        let r = self.reqs[id].clone();
        if let Some(charge) = r.charge {
            let timing = Timing {
                arrived_ns: T0 + r.gen_ns,
                admitted_ns: T0 + r.alloc_ns,
                submitted_ns: T0 + r.start_ns,
                completed_ns: T0 + self.now,
            };
            self.vols[r.vol].complete_batch(&[(charge, timing)]);
            self.completions.push(Completion {
                vol: r.vol as u32,
                kind: r.io.kind,
                bytes: r.io.len,
                gen_ns: r.gen_ns,
                alloc_ns: r.alloc_ns,
                start_ns: r.start_ns,
                done_ns: self.now,
                device_ns: r.cost_ns,
                abs_cost: charge.abs_cost,
                size_ns: self.size_model.size_cost(r.io.kind, r.io.len)
                    / crate::vtime::VTIME_PER_NSEC,
            });
        }
        self.free.push(id);
        if let Some(v) = self.disk.slot_waiters.pop_front() {
            self.kick(v);
        }
        let w = r.wl;
        self.wls[w].outstanding -= 1;
        if self.wls[w].interval_ns().is_none() {
            self.generate(w, Some(r.queue));
        }
    }

    fn plan(&mut self) {
        let next = self.planner.plan().max(1);
        let rec = self.qos.last_period();
        if rec.at_ns != 0 && rec.at_ns != self.last_plan_at {
            self.last_plan_at = rec.at_ns;
            self.trace.push(TracePoint {
                at_ns: rec.at_ns - T0,
                vrate_ppm: rec.vrate_after_ppm,
                vrate_effective_ppm: rec.vrate_effective_ppm,
                busy_level: rec.busy_level,
                missed_ppm: rec.missed_ppm,
                rq_wait_pct: rec.rq_wait_pct,
                judged_periods: rec.judged_periods,
            });
        }
        let at = self.now + next;
        self.push(at, Event::Plan);
        // The kernel kicks every waiter once per period: donation or a vrate change may
        // have made a parked head admissible before its timer.
        for v in 0..self.vstate.len() {
            if !self.vstate[v].parked.is_empty() {
                self.kick(v);
            }
        }
    }
}
