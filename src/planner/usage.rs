//! Usage accounting (design §6.2).
//!
//! Every admitted request adds its absolute cost to its volume's usage counter. Once
//! per period the planner converts the increase into device-µs at the current base
//! vrate, keeps it for the donation decision, and adds it to the cumulative usage of
//! the volume and of every group above it.

use std::sync::atomic::Ordering::Relaxed;

use crate::qos::shared::DeviceState;

use super::books::NodeBook;

/// Flush the usage of all active volumes; `elapsed_ns` is the period's real length.
pub(crate) fn flush(st: &mut DeviceState, books: &mut [NodeBook], elapsed_ns: u64) {
    let base = st.vtime_base_rate.max(1);
    let elapsed_us = (elapsed_ns / 1000).max(1);
    let DeviceState { tree, active, .. } = st;
    for (id, v) in active.iter() {
        let id = *id;
        let book = &mut books[id];
        let abs = v.abs_vusage.load(Relaxed);
        book.usage_delta_abs = abs.wrapping_sub(book.last_abs_vusage);
        let usage_us = book.usage_delta_abs / base;
        book.last_abs_vusage = abs;
        book.usage_delta_us = usage_us;
        let ppm = (usage_us.saturating_mul(1_000_000) / elapsed_us).min(u64::from(u32::MAX));
        v.usage_ppm.store(ppm as u32, Relaxed);
        let level = tree.nodes[id].level;
        for l in 0..=level {
            let a = tree.nodes[id].ancestors[l];
            let n = &mut tree.nodes[a];
            n.usage_us = n.usage_us.saturating_add(usage_us);
        }
        v.usage_us.store(tree.nodes[id].usage_us, Relaxed);
    }
}
