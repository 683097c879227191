//! Throughput comparisons on the emulated device and this machine's disk, in a test binary of their own. Cargo
//! runs test binaries one after another, so these have the machine to themselves (the
//! integration suite keeps both cores busy with guests and daemons), and they run one at
//! a time within this binary too.

mod disk;
mod duty_cycle;
mod emulated;
mod host_noise;
mod learning;
mod weights;

// The harness shared with tests/integration, under the paths the tests name it by.
use support::{daemon, devices};
