//! What the planner carries from one period to the next, apart from the device state it
//! steers: the latency window and floor, the gross-miss streak, bookkeeping per tree
//! node, and buffers reused so a run with 10 000 volumes does not allocate.

use crate::qos::tree::NodeId;

use super::lat_stat::{LatCounts, LatWindow};
use super::latency_floor::LatFloors;

#[derive(Debug, Default)]
pub(crate) struct PlannerState {
    /// The periods whose latency will be judged together (see `lat_stat`).
    pub lat_window: LatWindow,
    /// Lowest recent per-window mean device latency (see `latency_floor`).
    pub lat_floors: LatFloors,
    /// When everyone's latency last met the aim (see `attainable`).
    pub attainable: super::attainable::Attainable,
    /// Consecutive windows with a gross latency miss (see `vrate`).
    pub gross_streak: u32,
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

/// Reusable buffers.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// Donor volumes of the current run.
    pub surpluses: Vec<NodeId>,
    /// Inner nodes above the donors.
    pub inner: Vec<NodeId>,
    /// Marks inner nodes already collected in this run.
    pub stamp: u64,
    /// Latency-class groups with active volumes in this run.
    pub latency_groups: Vec<NodeId>,
}

/// What the planner remembers about one tree node.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeBook {
    // --- volumes: counters at the end of the previous period, and this period's usage ---
    pub last_abs_vusage: u64,
    pub usage_delta_us: u64,
    pub last_met: [u32; 2],
    pub last_missed: [u32; 2],
    pub last_rq_wait_ns: u64,
    pub last_lat_sum_us: [u64; 2],
    pub last_lat_sq_sum: [u64; 2],
    /// This period's latency counters of the volume alone.
    pub lat_period: LatCounts,
    /// This period's usage in absolute cost (model time at 100 %).
    pub usage_delta_abs: u64,
    /// Set by `victims::mark`: the volume gets less than it is entitled to, so its
    /// latency misses are a reason to throttle the others (see `lat_stat::of_victims`).
    pub victim: bool,
    /// Its recent share of the device's service (see `victims`).
    pub service: super::victims::Service,
    /// When `victims::mark` last saw the volume active, ns.
    pub seen_active_ns: u64,
    // --- donation (design §6.5), valid during one planner run ---
    pub hweight_donating: u32,
    pub hweight_after: u32,
    pub stamp: u64,
    pub b: u64,
    pub b_prime: u64,
    pub t: u64,
    pub t_prime: u64,
    pub child_adjusted_sum: u64,
    // --- the latency class (design §15) ---
    /// Windows in a row that met the target with margin.
    pub latency_met_streak: u32,
    /// The boost changed: the next window shows the old boost's effect, skip it.
    pub latency_skip: bool,
    /// Above the margin at the last judgment: vrate must not rise.
    pub latency_unmet: bool,
}
