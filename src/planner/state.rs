//! What the planner carries from one period to the next, apart from the device state it
//! steers: the latency window and floor, the gross-miss streak, the bookkeeping per tree
//! node ([`super::books`]) and buffers reused so a run with 10 000 volumes does not
//! allocate.

use super::books::{NodeBook, Scratch};
use super::lat_stat::LatWindow;
use super::latency_floor::LatFloors;
use crate::qos::vclock::Now;

#[derive(Debug, Default)]
pub(crate) struct PlannerState {
    /// The periods whose latency will be judged together (see `lat_stat`).
    pub lat_window: LatWindow,
    /// Lowest recent per-window mean device latency (see `latency_floor`).
    pub lat_floors: LatFloors,
    /// When everyone's latency last met the aim (see `attainable`).
    pub attainable: super::attainable::Attainable,
    /// Whether lowering vrate brings the underserved volumes' latency back (see
    /// `attainable`).
    pub reach: super::attainable::Reach,
    /// Consecutive windows with a gross latency miss (see `vrate`).
    pub gross_streak: u32,
    /// Some victim was one by far in a period of the window being gathered (see
    /// `victims::mark`).
    pub far_victim: bool,
    /// Where the weights last slipped (see `slip`).
    pub slip: super::slip::SlipCeiling,
    /// What the latency class found since the device's latency was last judged.
    pub latency_class: super::latency_class::Verdict,
    /// The latency class's limit on vrate rises.
    pub vrate_ceiling: super::latency_class::Ceiling,
    pub scratch: Scratch,
    /// Indexed by tree node id; grown with the tree (see [`PlannerState::books`]).
    nodes: Vec<NodeBook>,
}

impl PlannerState {
    /// The per-node bookkeeping, one entry per node of a tree of `nr_nodes`.
    pub fn books(&mut self, nr_nodes: usize) -> &mut [NodeBook] {
        self.books_and_scratch(nr_nodes).0
    }

    /// [`PlannerState::books`] and the scratch buffers together.
    pub fn books_and_scratch(&mut self, nr_nodes: usize) -> (&mut [NodeBook], &mut Scratch) {
        if self.nodes.len() < nr_nodes {
            self.nodes.resize_with(nr_nodes, NodeBook::default);
        }
        (&mut self.nodes[..nr_nodes], &mut self.scratch)
    }
}

/// Values fixed for one planner run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeriodCtx {
    pub now: Now,
    pub period_at_ns: u64,
    pub period_at_vtime: u64,
    /// vtime elapsed in this period.
    pub period_vtime: u64,
    /// `[1e6 − rppm, 1e6 − wppm]`: allowed misses per direction.
    pub ppm_thr: [u32; 2],
}
