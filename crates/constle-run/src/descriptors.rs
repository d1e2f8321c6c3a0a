//! The descriptors a run may hold, and how they are shared out. What the
//! agent can make `constle run` hold open (connections to its doors,
//! captured connections) is bounded by them, so that the agent can never
//! take the descriptors the run's own work needs, its audit log above
//! all: past its share, its connections wait in the kernel's queues.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The soft limit a run raises itself to, where the hard limit allows:
/// enough for every share at its most, and no more (Squid and the sandbox
/// inherit it).
const WANTED: u64 = 8192;

/// Descriptors kept for the run's own work: the audit log, Squid's pipes,
/// the gates' connections to their servers, the name service's sockets.
const RESERVED: u64 = 256;

/// What a connection to a door may cost: the door's end, the proxy
/// bridge's connection to Squid and the ends of two pipes while it
/// splices, with room to spare.
const PER_DOOR_CONNECTION: u64 = 8;

/// What a captured connection costs: the agent's and the proxy's end,
/// with room to spare.
const PER_CAPTURED_CONNECTION: u64 = 4;

/// The shares' bounds: below the least, a run could not work at all; the
/// most is what a sandbox has use for.
const DOOR_CONNECTIONS: (usize, usize) = (16, 512);
const CAPTURED_CONNECTIONS: (usize, usize) = (16, 1024);

/// Raises the soft limit on open descriptors towards [`WANTED`], as far
/// as the hard limit allows; never lowers it. Best effort: a limit that
/// cannot be raised leaves smaller shares.
pub(crate) fn raise() {
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let wanted = WANTED.min(hard);
        if soft < wanted {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, wanted, hard);
        }
    }
}

/// How many connections the agent may hold open at once to its doors, and
/// how many captured ones, for the current soft limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shares {
    pub(crate) door_connections: usize,
    pub(crate) captured_connections: usize,
}

/// The shares for this process's soft limit.
pub(crate) fn shares() -> Shares {
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft);
    shares_within(soft)
}

/// Half of what `limit` leaves past [`RESERVED`] to each kind.
fn shares_within(limit: u64) -> Shares {
    let half = limit.saturating_sub(RESERVED) / 2;
    let share = |per: u64, (least, most): (usize, usize)| {
        usize::try_from(half / per).map_or(most, |n| n.clamp(least, most))
    };
    Shares {
        door_connections: share(PER_DOOR_CONNECTION, DOOR_CONNECTIONS),
        captured_connections: share(PER_CAPTURED_CONNECTION, CAPTURED_CONNECTIONS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_fit_the_limit() {
        let at = |limit| {
            let s = shares_within(limit);
            (s.door_connections, s.captured_connections)
        };
        assert_eq!(at(1024), (48, 96));
        assert_eq!(at(WANTED), (496, 992));
        assert_eq!(at(1 << 20), (512, 1024));
        assert_eq!(at(100), (16, 16));
        for limit in [1024, 4096, WANTED] {
            let (doors, captured) = at(limit);
            let worst =
                doors as u64 * PER_DOOR_CONNECTION + captured as u64 * PER_CAPTURED_CONNECTION;
            assert!(worst + RESERVED <= limit, "{limit}");
        }
    }
}
