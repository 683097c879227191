//! Deactivating volumes that went idle (design §6.1).
//!
//! A volume stays active while it offers at least one request per period or has
//! requests in flight or waiting. Once a whole period passes without any of that, it
//! leaves the weight tree: its share goes to its active siblings at once (an idle
//! volume implicitly donates everything), and any budget it held above the target
//! margin is recorded as lost vtime so that vrate compensation can hand it out again.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

use crate::qos::device::{DeviceShared, DeviceState};
use crate::qos::tree::W;
use crate::vtime::vdiff;

use super::PeriodCtx;

/// Remove idle volumes from the active list.
pub(crate) fn deactivate_idle(dev: &DeviceShared, st: &mut DeviceState, ctx: &PeriodCtx) {
    let cur = dev.cur_period.load(Relaxed);
    let gen = dev.hweight_gen.load(Acquire);
    let mut i = 0;
    while i < st.active.len() {
        let (id, v) = &st.active[i];
        // A volume with a parked request is never idle (the caller re-offers it).
        if v.waiting.load(Relaxed) || !v.is_idle(cur) {
            i += 1;
            continue;
        }
        let (id, v) = (*id, Arc::clone(v));
        let excess = vdiff(ctx.now.vnow, v.vtime.load(Relaxed)).saturating_sub(st.margins.target);
        if excess > 0 {
            let (_, hwi) = v.hweights(gen);
            let lost = i128::from(excess) * i128::from(hwi) / i128::from(W);
            st.vtime_err = st
                .vtime_err
                .saturating_sub(lost.min(i128::from(i64::MAX)) as i64);
        }
        st.tree.propagate(id, 0, 0, None);
        v.on_active.store(false, Release);
        v.usage_ppm.store(0, Relaxed);
        st.active.swap_remove(i);
    }
    dev.set_nr_active(st.active.len(), ctx.now.now_ns);
    st.tree.commit_weights(&dev.hweight_gen);
}
