//! Nodes of a device's weight tree are named by their index in the tree's arena.

/// Index of a node in the tree's arena. The root is 0.
pub(crate) type NodeId = usize;

/// Root node id.
pub(crate) const ROOT: NodeId = 0;
