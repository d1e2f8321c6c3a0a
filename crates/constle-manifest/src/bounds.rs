//! The bounds of `sandbox.limits` and `sandbox.tmpfs` values, shared by
//! the model that documents them and the readers that enforce them.

/// Most `mcp.servers` an Agentfile declares: each is a door of the
/// sandbox, and they travel to the host, with the others, in one message.
pub const MAX_MCP_SERVERS: usize = 48;

/// Smallest `sandbox.tmpfs` size: 1 MiB.
pub const MIN_TMPFS_BYTES: u64 = 1 << 20;

/// Smallest `sandbox.limits.memory`: 6 MiB, Docker's minimum.
pub const MIN_MEMORY_BYTES: u64 = 6 << 20;

/// Smallest `sandbox.limits.cpus`, in thousandths: 0.01 CPU, Docker's
/// minimum and the kernel's (1 ms of every 100 ms).
pub const MIN_CPU_MILLIS: u32 = 10;

/// Largest `sandbox.limits.cpus`, in thousandths: 1024 CPUs.
pub const MAX_CPU_MILLIS: u32 = 1_024_000;
