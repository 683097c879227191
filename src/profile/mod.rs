//! Device profiling: measure a disk and derive the six coefficients of the linear cost
//! model, plus suggested latency targets and vrate bounds.
//!
//! The procedure follows Linux's `tools/cgroup/iocost_coef_gen.py`: saturate the device
//! with one workload at a time and read the result straight off as a model parameter —
//!
//! | parameter | workload |
//! |---|---|
//! | `rbps` / `wbps` | sequential reads / writes of large blocks |
//! | `rseqiops` / `wseqiops` | sequential 4 KiB reads / writes at a high queue depth |
//! | `rrandiops` / `wrandiops` | random 4 KiB reads / writes at a high queue depth |
//!
//! Latency is measured with random 4 KiB reads (and writes) paced at 90 % of the measured
//! random IOPS; [`suggest`] turns it into the `[device.qos]` the daemon's calibrated
//! defaults also use.
//!
//! The workloads run against a [`Target`]: a real file or block device through io_uring and
//! O_DIRECT ([`uring::UringTarget`]), or the simulator's disk model in virtual time
//! ([`simulated::SimTarget`]), which lets a test check that profiling recovers known
//! coefficients.

pub mod allocation;
pub(crate) mod plan;
pub mod simulated;
pub mod suggest;
pub(crate) mod uring;

pub use plan::{profile, Job, JobResult, Pattern, Plan, Profile, Target};
pub use suggest::suggest_qos;

/// Something the profiler can run workloads on.
pub mod cli;
