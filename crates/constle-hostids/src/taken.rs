//! Which ids this machine already uses: its users and groups (through the
//! name service) and the subordinate id ranges in `/etc/subuid` and
//! `/etc/subgid`, which rootless containers map their users to.

/// What this machine already uses.
pub(crate) struct Taken {
    user: fn(u32) -> bool,
    group: fn(u32) -> bool,
    subuid: Vec<(u64, u64)>,
    subgid: Vec<(u64, u64)>,
}

#[cfg(test)]
impl Default for Taken {
    /// Nothing taken (for tests).
    fn default() -> Self {
        Taken::from_parts(|_| false, |_| false, "", "")
    }
}

impl Taken {
    pub(crate) fn of_this_machine() -> Taken {
        let read = |path| std::fs::read_to_string(path).unwrap_or_default();
        Taken::from_parts(
            |id| matches!(nix::unistd::User::from_uid(id.into()), Ok(Some(_))),
            |id| matches!(nix::unistd::Group::from_gid(id.into()), Ok(Some(_))),
            &read("/etc/subuid"),
            &read("/etc/subgid"),
        )
    }

    pub(crate) fn from_parts(
        user: fn(u32) -> bool,
        group: fn(u32) -> bool,
        subuid: &str,
        subgid: &str,
    ) -> Taken {
        Taken {
            user,
            group,
            subuid: ranges(subuid),
            subgid: ranges(subgid),
        }
    }

    /// Whether `id` is used as a uid or a gid.
    pub(crate) fn holds(&self, id: u32) -> bool {
        let within = |ranges: &[(u64, u64)]| {
            ranges
                .iter()
                .any(|&(start, count)| (start..start.saturating_add(count)).contains(&id.into()))
        };
        (self.user)(id) || (self.group)(id) || within(&self.subuid) || within(&self.subgid)
    }
}

/// The `start` and `count` of each `name:start:count` line; other lines
/// are skipped (a comment, a blank line).
fn ranges(text: &str) -> Vec<(u64, u64)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim().rsplitn(3, ':');
            let count = fields.next()?.parse().ok()?;
            let start = fields.next()?.parse().ok()?;
            fields.next()?;
            Some((start, count))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subordinate_ranges() {
        assert_eq!(
            ranges("alice:100000:65536\n# x\n\nbob:165536:65536\nbad\n1000:60600:10\n"),
            [(100000, 65536), (165536, 65536), (60600, 10)]
        );
        let taken = Taken::from_parts(|_| false, |_| false, "", "x:60600:10\n");
        assert!(taken.holds(60600) && taken.holds(60609) && !taken.holds(60610));
    }
}
