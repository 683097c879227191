//! Budget donation: turning donors' target hweights into weights (design §6.5).
//!
//! The classification step decided, for every donor leaf, the hweight_inuse it should
//! keep (`after`, a fraction of the device). Hierarchical weights cannot be set
//! directly; only `inuse` weights can. This step finds donor `inuse` values such that:
//!
//! * every donor ends at its target hweight, and
//! * the non-donors keep their mutual ratios and share the freed budget in proportion
//!   to their budgets.
//!
//! It works on the subtree spanned by the donors (Andy Newell's method, reconstructed
//! from the kernel code). Per inner node, with all values fractions of the device (×W):
//! `b` = its hweight_active, `t` = the part of `b` belonging to donors below it, `t'` =
//! the donors' targets. Every non-donating budget grows by the same factor
//! `γ = (1 − t'_root) / (1 − t_root)`, so an inner node's new budget is
//! `b' = γ·(b − t) + t'`. Top-down, that gives each inner node an adjusted child weight
//! sum `s'`; a donor's new inuse is then `s'_parent · after / b'_parent`. Non-donors are
//! never touched: their hweights rise because the sums above them shrink.

use crate::qos::shared::DeviceState;
use crate::qos::tree::{NodeId, Tree, ROOT, W};
use crate::vtime::cdiv_wide;

use super::books::NodeBook;
use super::state::PlannerState;

use std::sync::atomic::Ordering::Relaxed;

fn cw(a: u64, b: u64, c: u64) -> u64 {
    // ⌈a·b/c⌉ through u128 (c == 0 saturates; guarded by the callers' invariants).
    cdiv_wide(u128::from(a) * u128::from(b), u128::from(c))
}

/// Lower the donors' inuse weights. Donors are in `ps.scratch.surpluses`, each with
/// `hweight_donating` (its hweight_active) and `hweight_after` (its target) set.
pub(crate) fn transfer_surpluses(st: &mut DeviceState, ps: &mut PlannerState, vnow: u64) {
    let donors = std::mem::take(&mut ps.scratch.surpluses);
    let mut inner = std::mem::take(&mut ps.scratch.inner);
    inner.clear();
    ps.scratch.stamp = ps.scratch.stamp.wrapping_add(1);
    let stamp = ps.scratch.stamp;
    let tree = &mut st.tree;
    let bk = ps.books(tree.nodes.len());

    shrink_targets(&donors, bk);
    collect_inner(tree, &donors, bk, stamp, &mut inner);
    aggregate_targets(tree, &donors, &inner, bk);
    inner_budgets(tree, &inner, bk);
    adjusted_sums(tree, &inner, bk);

    // (6) The donors' new inuse weights.
    for &d in &donors {
        let Some(p) = tree.nodes[d].parent() else {
            continue;
        };
        let (p_sum, p_bp) = (bk[p].child_adjusted_sum, bk[p].b_prime);
        let inuse = cw(p_sum, u64::from(bk[d].hweight_after), p_bp).min(u64::from(u32::MAX)) as u32;
        let active = tree.nodes[d].weights.active.load(Relaxed);
        tree.propagate(d, active, inuse, Some(vnow));
    }

    ps.scratch.surpluses = donors;
    ps.scratch.inner = inner;
}

/// (0) Safety: if the targets add up to the whole device or more, shrink those that
/// exceed their own share so that something is left for the non-donors.
fn shrink_targets(donors: &[NodeId], bk: &mut [NodeBook]) {
    let after_sum: u64 = donors.iter().map(|&d| u64::from(bk[d].hweight_after)).sum();
    if after_sum < W {
        return;
    }
    let over = |n: &NodeBook| n.hweight_after > n.hweight_donating;
    let over_sum: u64 = donors
        .iter()
        .filter(|&&d| over(&bk[d]))
        .map(|&d| u64::from(bk[d].hweight_after))
        .sum();
    let over_target = over_sum.saturating_sub(after_sum - (W - 1));
    if over_target != 0 && over_sum != 0 {
        for &d in donors {
            let n = &mut bk[d];
            if over(n) {
                n.hweight_after = (u64::from(n.hweight_after) * over_target / over_sum) as u32;
            }
        }
    }
}

/// (1) The inner nodes: all ancestors of donors, root included, parents first, their
/// sums reset.
fn collect_inner(
    tree: &Tree,
    donors: &[NodeId],
    bk: &mut [NodeBook],
    stamp: u64,
    inner: &mut Vec<NodeId>,
) {
    for &d in donors {
        let level = tree.nodes[d].level;
        for l in 0..level {
            let a = tree.nodes[d].ancestors[l];
            let n = &mut bk[a];
            if n.stamp != stamp {
                n.stamp = stamp;
                n.t = 0;
                n.t_prime = 0;
                n.child_adjusted_sum = 0;
                inner.push(a);
            }
        }
    }
    inner.sort_by_key(|&n| tree.nodes[n].level);
}

/// (2) Aggregate t and t' bottom-up.
fn aggregate_targets(tree: &Tree, donors: &[NodeId], inner: &[NodeId], bk: &mut [NodeBook]) {
    for &d in donors {
        let (t, tp) = (
            u64::from(bk[d].hweight_donating),
            u64::from(bk[d].hweight_after),
        );
        if let Some(p) = tree.nodes[d].parent() {
            bk[p].t += t;
            bk[p].t_prime += tp;
        }
    }
    for &n in inner.iter().rev() {
        if let Some(p) = tree.nodes[n].parent() {
            let (t, tp) = (bk[n].t, bk[n].t_prime);
            bk[p].t += t;
            bk[p].t_prime += tp;
        }
    }
}

/// (3) Inner budgets b, with rounding guards on t and t'.
fn inner_budgets(tree: &Tree, inner: &[NodeId], bk: &mut [NodeBook]) {
    for &n in inner {
        let b = match tree.nodes[n].parent() {
            None => W,
            Some(p) => {
                let pb = bk[p].b;
                let psum = tree.nodes[p].weights.child_active_sum.load(Relaxed);
                cw(
                    pb,
                    u64::from(tree.nodes[n].weights.active.load(Relaxed)),
                    psum,
                )
            }
        };
        let node = &mut bk[n];
        node.b = b;
        node.t = node.t.min(b);
        node.t_prime = node.t_prime.min(node.t.saturating_sub(1));
    }
}

/// (4) The global donation rate γ = (1 − t'_r) / (1 − t_r), then (5) the adjusted
/// budgets b' and child-weight sums s', top-down.
fn adjusted_sums(tree: &Tree, inner: &[NodeId], bk: &mut [NodeBook]) {
    let (rt, rtp) = (bk[ROOT].t, bk[ROOT].t_prime);
    let gamma = cw(W - rtp.min(W), W, W - rt.min(W - 1));
    for &n in inner {
        let weights = &tree.nodes[n].weights;
        let s = weights.child_active_sum.load(Relaxed);
        let Some(p) = tree.nodes[n].parent() else {
            // Root: non-donor children keep their weights, so shrink the sum instead:
            // s' = s · (1 − t) / (1 − t').
            let node = &mut bk[n];
            node.child_adjusted_sum = cw(s, W - node.t.min(W), (W - node.t_prime.min(W)).max(1));
            node.b_prime = W;
            continue;
        };
        let active = u64::from(weights.active.load(Relaxed));
        let (p_sum, p_bp) = (bk[p].child_adjusted_sum, bk[p].b_prime);
        let node = &mut bk[n];
        let (b, t, tp) = (node.b, node.t, node.t_prime);
        let b_prime = cw(gamma, b - t, W) + tp;
        let w_prime = cw(p_sum, b_prime, p_bp);
        let s_t = cw(s, t, b);
        let s_f = s.saturating_sub(s_t);
        let w_t = cw(active, t, b);
        let w_t_prime = cw(w_prime, tp, b_prime);
        node.b_prime = b_prime;
        node.child_adjusted_sum = s_f
            + if w_t != 0 {
                cw(s_t, w_t_prime, w_t)
            } else {
                s_t
            };
    }
}
