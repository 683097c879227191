//! Why a simulation could not run.

/// Why a simulation could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scenario file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The scenario is not valid TOML or has unknown keys.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The scenario is well-formed but inconsistent.
    #[error("invalid scenario: {0}")]
    Invalid(String),
}
