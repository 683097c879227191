//! A multi-tenant load generator speaking vhost-user directly (via `blkio`), for
//! benchmarks, QoS tuning and capacity planning without VMs: job files, a progress line,
//! JSON, pictures, and an fio baseline on a plain file.

mod cli;
pub(crate) mod fio;
pub(crate) mod job;
mod lane;
pub(crate) mod plot;
mod progress;
mod result;
mod runner;
mod spec;
mod verify;

pub use cli::{run as cli, BenchArgs};
pub use job::{build_tenants, JobFile};
pub use progress::ProgressMode;
pub use result::{format_table, SecondSample, TenantResult};
pub use runner::{run, run_with};
pub use spec::{Duty, Pattern, TenantSpec, TENANT_KEYS};
