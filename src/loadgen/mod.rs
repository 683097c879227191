//! A multi-tenant load generator speaking vhost-user directly (via `blkio`), for
//! benchmarks, QoS tuning and capacity planning without VMs.

mod runner;
mod spec;

pub use runner::{format_table, run, SecondSample, TenantResult};
pub use spec::{parse_duration, Pattern, TenantSpec};
