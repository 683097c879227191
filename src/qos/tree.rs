//! The weight tree of one device: root → groups (nested) → volumes.
//!
//! Only volumes (leaves) issue IO and are throttled; groups exist to divide the device
//! hierarchically. Each volume keeps its root-to-leaf path of [`NodeWeights`] and can
//! compute its hweights without the lock. The only structural change is moving a volume
//! to another group ([`Tree::reparent`], under the device lock); the volume's path is then
//! replaced as a whole and the hweight generation bumped.
//!
//! Weight propagation (design §4.3): when a volume becomes active, goes idle or changes its
//! `inuse`, the change is pushed up the tree. Each parent's child sums are adjusted and
//! the parent's own `active`/`inuse` recomputed (`active` = weight while any child is
//! active, `inuse` scaled by the fraction of its children's weight still in use); the walk
//! stops at the first ancestor that did not change. Any change marks the weights
//! updated; [`Tree::commit_weights`] then bumps the generation so cached hweights
//! everywhere are recomputed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed, Ordering::Release};
use std::sync::Arc;

use crate::vtime::{cdiv_wide, vdiff, WEIGHT_ONE};

use super::cap_meter::NodeCaps;
use super::class::LatencyTarget;
use super::tunables::BACKGROUND_DIVISOR;
use super::volume_core::VolumeCore;
use super::weights::{NodeWeights, WEIGHT_DEFAULT};

pub(crate) use super::node_id::{NodeId, ROOT};

/// Per-node state that only the lock holder touches.
#[derive(Debug)]
pub(crate) struct TreeNode {
    /// The group or volume name (empty for the root).
    pub name: String,
    pub level: usize,
    /// `[root, ..., self]`.
    pub ancestors: Vec<NodeId>,
    pub weights: Arc<NodeWeights>,
    /// Set for volumes (leaves).
    pub volume: Option<Arc<VolumeCore>>,
    /// `inuse` before the most recent propagation; restored on reactivation.
    pub last_inuse: u32,
    /// Cumulative device time used by this subtree, µs.
    pub usage_us: u64,
    /// When the volume last became active.
    pub activated_at_ns: u64,
    /// The node's caps, shared by every volume under it (design §12).
    pub caps: Option<Arc<NodeCaps>>,
    /// A volume's caps per operation (design §12.3), as configured and as meters.
    pub op_caps: Option<(super::caps::OpCapsConfig, Vec<Arc<NodeCaps>>)>,
    /// A background volume or group (design §13): it competes at [`background_weight`].
    pub background: bool,
    /// The volume's reservation as configured (design §14).
    pub reserve: Option<super::reserve::ReserveConfig>,
    /// Class `latency` (design §15), with its target.
    pub latency: bool,
    pub latency_target: Option<LatencyTarget>,
    /// What the latency class multiplies the node's weight by (1 = no boost).
    pub boost: f64,
    /// A latency-class group's window: its volumes' completions since its target was
    /// last judged (a volume's own is in its `hist.target`).
    pub group_window: Option<Box<super::histogram::TargetWindow>>,
    /// Active children that are foreground: normal or latency volumes, or groups with
    /// such a child. A group without one is itself background.
    pub fg_children: u32,
    /// Removed at runtime ([`Tree::remove`]): the slot stays so that ids stay valid, but
    /// the node has no name, no children and no share of anything.
    pub removed: bool,
}

impl TreeNode {
    fn new(parent: Option<&TreeNode>, id: NodeId, weights: Arc<NodeWeights>) -> Self {
        let mut ancestors = parent.map(|p| p.ancestors.clone()).unwrap_or_default();
        ancestors.push(id);
        TreeNode {
            name: String::new(),
            level: ancestors.len() - 1,
            ancestors,
            weights,
            volume: None,
            last_inuse: 0,
            usage_us: 0,
            activated_at_ns: 0,
            caps: None,
            op_caps: None,
            background: false,
            reserve: None,
            latency: false,
            latency_target: None,
            boost: 1.0,
            group_window: None,
            fg_children: 0,
            removed: false,
        }
    }

    /// The weight (× W) the node competes with (design §4.5, §13, §15): its configured
    /// weight times the latency class's boost, at most [`WEIGHT_CAP`], reduced for a
    /// background volume.
    pub(crate) fn competing_weight(&self) -> u32 {
        let w = f64::from(self.weights.configured.load(Relaxed)) * f64::from(WEIGHT_ONE);
        let w = (w * self.boost).min(f64::from(WEIGHT_CAP)) as u32;
        if self.background {
            background_weight(w)
        } else {
            w
        }
    }

    /// The node's class.
    pub(crate) fn class(&self) -> super::class::Class {
        use super::class::Class;
        match (self.background, self.latency) {
            (true, _) => Class::Background,
            (false, true) => Class::Latency,
            (false, false) => Class::Normal,
        }
    }

    pub(crate) fn parent(&self) -> Option<NodeId> {
        self.level.checked_sub(1).map(|l| self.ancestors[l])
    }
}

/// The arena of nodes plus a name index.
#[derive(Debug)]
pub(crate) struct Tree {
    pub nodes: Vec<TreeNode>,
    pub by_name: HashMap<String, NodeId>,
    /// All volume node ids, in creation order.
    pub volumes: Vec<NodeId>,
    /// Some weight changed since the last [`Tree::commit_weights`].
    pub weights_updated: bool,
    /// Some foreground volume is active (the root has a foreground child); shared with
    /// the issue path, which holds background volumes back while it is set.
    pub foreground_active: Arc<AtomicBool>,
}

impl Tree {
    pub(crate) fn new() -> Self {
        let root = TreeNode::new(None, ROOT, Arc::new(NodeWeights::new(WEIGHT_DEFAULT)));
        Tree {
            nodes: vec![root],
            by_name: HashMap::new(),
            volumes: Vec::new(),
            weights_updated: false,
            foreground_active: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Append a node under `parent`; returns its id.
    pub(crate) fn add_node(
        &mut self,
        name: &str,
        parent: NodeId,
        weights: Arc<NodeWeights>,
    ) -> NodeId {
        let id = self.nodes.len();
        let mut node = TreeNode::new(Some(&self.nodes[parent]), id, weights);
        node.name = name.to_owned();
        self.nodes.push(node);
        self.by_name.insert(name.to_owned(), id);
        id
    }

    /// The tightest latency target a latency-class volume or group declares: the
    /// smallest latency, and of equal ones the highest percentile.
    pub(crate) fn declared_latency_target(&self) -> Option<LatencyTarget> {
        self.nodes
            .iter()
            .filter(|n| !n.removed && n.latency)
            .filter_map(|n| n.latency_target)
            .min_by(|a, b| a.us.cmp(&b.us).then(b.pct.total_cmp(&a.pct)))
    }

    /// Children of `id` that are not removed.
    pub(crate) fn children(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        (1..self.nodes.len())
            .filter(move |&c| !self.nodes[c].removed && self.nodes[c].parent() == Some(id))
    }

    /// Takes an inactive, childless node out of the tree: its name is free again and it
    /// holds no reservation, caps or volume. Its slot stays (ids index per-node state
    /// elsewhere).
    pub(crate) fn remove(&mut self, id: NodeId) {
        let node = &mut self.nodes[id];
        self.by_name.remove(&node.name);
        node.name.clear();
        node.removed = true;
        node.volume = None;
        node.reserve = None;
        node.caps = None;
        node.op_caps = None;
        node.latency = false;
        node.group_window = None;
        self.volumes.retain(|&v| v != id);
    }

    /// Move node `id`, with everything under it, under `parent` (not inside `id`). The
    /// caller must have taken `id` out of its old parent's sums first (propagate it to
    /// zero) and re-propagate it afterwards.
    pub(crate) fn reparent(&mut self, id: NodeId, parent: NodeId) {
        let old_level = self.nodes[id].level;
        let prefix = &self.nodes[parent].ancestors;
        let moved: Vec<(NodeId, Vec<NodeId>)> = (0..self.nodes.len())
            .filter(|&n| !self.nodes[n].removed && self.nodes[n].ancestors.contains(&id))
            .map(|n| {
                let tail = &self.nodes[n].ancestors[old_level..];
                (n, prefix.iter().chain(tail).copied().collect())
            })
            .collect();
        for (n, ancestors) in moved {
            let node = &mut self.nodes[n];
            node.level = ancestors.len() - 1;
            node.ancestors = ancestors;
        }
    }

    /// The root-to-node path of weight cells.
    pub(crate) fn path(&self, id: NodeId) -> Box<[Arc<NodeWeights>]> {
        self.nodes[id]
            .ancestors
            .iter()
            .map(|&a| Arc::clone(&self.nodes[a].weights))
            .collect()
    }

    /// The caps on the root-to-node path, root first, then the node's per-operation caps.
    pub(crate) fn caps_path(&self, id: NodeId) -> Box<[Arc<NodeCaps>]> {
        let node = &self.nodes[id];
        let op_caps = node
            .op_caps
            .iter()
            .flat_map(|(_, meters)| meters.iter().cloned());
        node.ancestors
            .iter()
            .filter_map(|&a| self.nodes[a].caps.clone())
            .chain(op_caps)
            .collect()
    }

    /// The volumes at or under node `id`.
    pub(crate) fn volumes_under(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.volumes
            .iter()
            .copied()
            .filter(move |&v| self.nodes[v].ancestors.contains(&id))
    }

    /// Set a node's `active`/`inuse` and push the change up (design §4.3). `save_vnow`:
    /// remember the volume's current budget as its `saved_margin` (the snapback
    /// reference point).
    ///
    /// Background (design §13): a node that is background itself or has no foreground
    /// below it competes at [`background_weight`] of its weight, so a subtree of
    /// background volumes, or a background group, yields to its foreground siblings at
    /// every level. A background volume's own weight cell
    /// already holds the reduced weight; a group's is applied here, from the count of its
    /// active foreground children, which the walk keeps.
    pub(crate) fn propagate(
        &mut self,
        id: NodeId,
        active: u32,
        inuse: u32,
        save_vnow: Option<u64>,
    ) {
        let node = &self.nodes[id];
        let w = &node.weights;
        let inner = node.volume.is_none();
        let child_active_sum = w.child_active_sum.load(Relaxed);
        let active = if inner && active != 0 && (node.fg_children == 0 || node.background) {
            background_weight(active)
        } else {
            active
        };
        let inuse = if inner && child_active_sum != 0 {
            // Inner node: inuse follows the children's inuse/active ratio.
            let v = cdiv_wide(
                u128::from(active) * u128::from(w.child_inuse_sum.load(Relaxed)),
                u128::from(child_active_sum),
            );
            v.min(u64::from(active)) as u32
        } else {
            inuse.max(1).min(active)
        };
        let cur_active = w.active.load(Relaxed);
        let cur_inuse = w.inuse.load(Relaxed);
        if let (Some(vnow), Some(vol)) = (save_vnow, &node.volume) {
            vol.saved_margin
                .store(vdiff(vnow, vol.vtime.load(Relaxed)), Relaxed);
        }
        let foreground = !node.background && (!inner || node.fg_children > 0);
        self.nodes[id].last_inuse = cur_inuse;
        if active == cur_active && inuse == cur_inuse {
            return;
        }
        // Whether the child counts as an active foreground node, before and after.
        let (mut fg_old, mut fg_new) = (foreground && cur_active != 0, foreground && active != 0);
        let (mut a, mut i) = (active, inuse);
        let level = self.nodes[id].level;
        for lvl in (0..level).rev() {
            let pid = self.nodes[id].ancestors[lvl];
            let cid = self.nodes[id].ancestors[lvl + 1];
            let parent = &mut self.nodes[pid];
            let p_fg_old = parent.fg_children > 0 && !parent.background;
            if fg_new != fg_old {
                parent.fg_children = if fg_new {
                    parent.fg_children + 1
                } else {
                    parent.fg_children.saturating_sub(1)
                };
            }
            let p_fg_new = parent.fg_children > 0 && !parent.background;
            let p = &self.nodes[pid].weights;
            let c = &self.nodes[cid].weights;
            let da = u64::from(a).wrapping_sub(u64::from(c.active.load(Relaxed)));
            let di = u64::from(i).wrapping_sub(u64::from(c.inuse.load(Relaxed)));
            // Signed deltas through wrapping arithmetic; the sums never go negative.
            let pas = p.child_active_sum.load(Relaxed).wrapping_add(da);
            let pis = p.child_inuse_sum.load(Relaxed).wrapping_add(di);
            p.child_active_sum.store(pas, Relaxed);
            p.child_inuse_sum.store(pis, Relaxed);
            c.active.store(a, Relaxed);
            c.inuse.store(i, Relaxed);
            let p_active_old = p.active.load(Relaxed);
            let (pa, pi) = if pas != 0 {
                let pw = p.weight.load(Relaxed);
                let pa = if p_fg_new { pw } else { background_weight(pw) };
                let pi = cdiv_wide(u128::from(pa) * u128::from(pis), u128::from(pas));
                (pa, pi.min(u64::from(pa)) as u32)
            } else {
                (0, 0)
            };
            if pa == p_active_old && pi == p.inuse.load(Relaxed) {
                break;
            }
            (a, i) = (pa, pi);
            (fg_old, fg_new) = (p_fg_old && p_active_old != 0, p_fg_new && pa != 0);
        }
        self.foreground_active
            .store(self.nodes[ROOT].fg_children > 0, Relaxed);
        self.weights_updated = true;
    }

    /// Publish pending weight changes: bump the generation so cached hweights refresh.
    pub(crate) fn commit_weights(&mut self, gen: &AtomicU32) {
        if self.weights_updated {
            gen.fetch_add(1, Release);
            self.weights_updated = false;
        }
    }
}

/// The largest weight (× W) a boosted node competes with: room for any sum of weights in
/// the u32 cells.
pub(crate) const WEIGHT_CAP: u32 = u32::MAX / 4;

/// The weight a background node competes with.
pub(crate) fn background_weight(weight: u32) -> u32 {
    (weight / BACKGROUND_DIVISOR).max(1)
}

/// `W` as u64, for readability at call sites.
pub(crate) const W: u64 = WEIGHT_ONE as u64;
