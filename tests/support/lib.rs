//! The harness shared by the integration suite (`tests/integration`) and the comparisons
//! that run alone (`tests/comparisons`): [`daemon`] runs the real binary on a config in a
//! private directory; [`devices`] holds the emulated devices and tenants the QoS tests
//! measure with.

pub mod daemon;
pub mod devices;

use std::path::PathBuf;

/// The `vhost-iocost` binary of the build under test: Cargo builds a package's binaries
/// before its integration tests, in the directory above their `deps/`.
/// `VHOST_IOCOST_BIN` names another (an installed one, say).
pub fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("VHOST_IOCOST_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test binary lives in target/<profile>/deps");
    profile_dir.join("vhost-iocost")
}
