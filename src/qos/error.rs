//! Errors of the control-plane calls (tree construction and weight changes).

/// Why a tree or weight operation was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QosError {
    /// The name is already used by a group or volume of this device.
    #[error("name {0:?} is already used on this device")]
    DuplicateName(String),
    /// Names must be non-empty.
    #[error("names must not be empty")]
    EmptyName,
    /// No group or volume with that name.
    #[error("no group or volume named {0:?}")]
    UnknownName(String),
    /// The named parent is a volume; only groups can have children.
    #[error("{0:?} is a volume, not a group")]
    NotAGroup(String),
    /// The named node is a group where a volume is required.
    #[error("{0:?} is a group, not a volume")]
    NotAVolume(String),
    /// A group cannot move inside itself.
    #[error("group {name:?} cannot move under {parent:?}, which is inside it")]
    Cycle { name: String, parent: String },
    /// A group that still has members cannot be removed.
    #[error("group {name:?} is not empty: it holds {members}")]
    NotEmpty { name: String, members: String },
    /// A QoS or cost-model configuration failed validation (the message names the key).
    #[error("{0}")]
    InvalidConfig(String),
    /// The reservations would take more of the device than may be reserved.
    #[error(
        "reserve of {name:?} ({share_pct:.1} % of the device) would bring the reserved total to \
         {total_pct:.1} %, over the {reservable_pct:.1} % that may be reserved (90 % of \
         80 % or of `min`, whichever is higher)"
    )]
    Overcommitted {
        name: String,
        share_pct: f64,
        total_pct: f64,
        reservable_pct: f64,
    },
    /// A weight out of range.
    #[error("weight of {name:?} {reason}")]
    InvalidWeight {
        /// Node name.
        name: String,
        /// What is wrong with it.
        reason: crate::qos::weights::WeightOutOfRange,
    },
}
