//! Deactivating volumes that went idle (design §6.1).
//!
//! A volume stays active while it offers at least one request per period or has
//! requests in flight or waiting. Once a whole period passes without any of that, it
//! leaves the weight tree: its share goes to its active siblings at once (an idle
//! volume implicitly donates everything). Its budget is reset when it activates again
//! (design §3.3).

use crate::lock::Locked;
use std::sync::atomic::Ordering::{Relaxed, Release};
use std::sync::Arc;

use crate::qos::shared::{DeviceShared, DeviceState};

use super::state::PeriodCtx;

/// Remove idle volumes from the active list.
pub(crate) fn deactivate_idle(dev: &DeviceShared, st: &mut DeviceState, ctx: &PeriodCtx) {
    let cur = dev.cur_period.load(Relaxed);
    let mut i = 0;
    while i < st.active.len() {
        let (id, v) = &st.active[i];
        // A volume with a parked request is never idle (the caller re-offers it).
        if v.waiting.load(Relaxed) || !v.is_idle(cur) {
            i += 1;
            continue;
        }
        let (id, v) = (*id, Arc::clone(v));
        st.tree.propagate(id, 0, 0, None);
        if v.in_latency_group.load(Relaxed) {
            // Its last completions would reach its group's window only when it is
            // active again, long after: drop them.
            v.hist.locked().group.reset(ctx.now.now_ns);
        }
        v.on_active.store(false, Release);
        v.usage_ppm.store(0, Relaxed);
        st.active.swap_remove(i);
    }
    dev.set_nr_active(st.active.len(), ctx.now.now_ns);
    st.tree.commit_weights(&dev.hweight_gen);
}
