//! Reservations summed over the weight tree: what each node reserves, what the device has
//! reserved in all (checked against [`super::reserve::reservable_ppm`]), and each
//! volume's share where a group splits its reservation among its active members.

use std::sync::atomic::Ordering::Relaxed;

use super::tree::{Tree, TreeNode, ROOT};
use super::tunables::BACKGROUND_FLOOR_PPM;
use crate::cost_model::CostModel;

/// A node's own reserved share, ppm: its `reserve`, or a background volume's floor.
pub(crate) fn own_ppm(node: &TreeNode, model: &dyn CostModel) -> u64 {
    match node.reserve {
        Some(r) => r.share_ppm(model),
        None if node.volume.is_some() && node.background => BACKGROUND_FLOOR_PPM,
        None => 0,
    }
}

/// What the whole device has reserved, ppm: each node reserves the larger of its own share
/// and what its children reserve together (a group's reservation covers its members').
pub(crate) fn total_ppm(tree: &Tree, model: &dyn CostModel) -> u64 {
    let mut by_depth: Vec<usize> = (0..tree.nodes.len()).collect();
    by_depth.sort_unstable_by_key(|&id| std::cmp::Reverse(tree.nodes[id].level));
    let mut below = vec![0u64; tree.nodes.len()];
    for id in by_depth {
        let node = &tree.nodes[id];
        let reserved = own_ppm(node, model).max(below[id]);
        match node.parent() {
            Some(p) => below[p] = below[p].saturating_add(reserved),
            None => return reserved,
        }
    }
    below[ROOT]
}

/// Each volume's reserved share, ppm, indexed by node id: its own, or more where a group
/// above it splits its reservation among its active volumes by weight.
pub(crate) fn volume_shares(tree: &Tree, model: &dyn CostModel) -> Vec<u64> {
    let mut shares = vec![0u64; tree.nodes.len()];
    for &v in &tree.volumes {
        shares[v] = own_ppm(&tree.nodes[v], model);
    }
    for (g, group) in tree.nodes.iter().enumerate() {
        let Some(reserve) = group
            .reserve
            .filter(|_| group.volume.is_none() && g != ROOT)
        else {
            continue;
        };
        let group_ppm = reserve.share_ppm(model);
        let active = |v: &usize| {
            let w = &tree.nodes[*v].weights;
            w.active.load(Relaxed) != 0
        };
        let members: Vec<usize> = tree.volumes_under(g).filter(active).collect();
        let weights: u64 = members
            .iter()
            .map(|&v| u64::from(tree.nodes[v].weights.configured.load(Relaxed)))
            .sum();
        for v in members {
            let w = u64::from(tree.nodes[v].weights.configured.load(Relaxed));
            shares[v] = shares[v].max(group_ppm * w / weights.max(1));
        }
    }
    shares
}
