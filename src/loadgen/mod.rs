//! A multi-tenant load generator speaking vhost-user directly (via `blkio`), for
//! benchmarks, QoS tuning and capacity planning without VMs: job files, a progress line,
//! JSON, pictures, and an fio baseline on a plain file.

mod cli;
pub(crate) mod fio;
pub(crate) mod job;
pub(crate) mod plot;
mod progress;
mod runner;
mod spec;
mod verify;

pub use cli::{run as cli, BenchArgs};
pub use job::{build_tenants, JobFile};
pub use progress::ProgressMode;
pub use runner::{format_table, run, run_with, SecondSample, TenantResult};
pub use spec::{Duty, Pattern, TenantSpec, TENANT_KEYS};
