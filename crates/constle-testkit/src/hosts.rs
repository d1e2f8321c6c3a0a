//! Hosts files for tests: names mapped to addresses without DNS.

use std::io;
use std::net::IpAddr;
use std::path::Path;

/// A hosts file (`/etc/hosts` format) under construction.
///
/// One line per [`HostsFile::add`]. Squid's `hosts_file` keeps one address
/// per name: for a name on several lines, the last line wins. For a name
/// with several addresses, use [`DnsServer`](crate::DnsServer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostsFile {
    entries: Vec<(IpAddr, String)>,
}

impl HostsFile {
    /// An empty hosts file.
    pub fn new() -> HostsFile {
        HostsFile::default()
    }

    /// Maps `name` to `addr` (one more line).
    pub fn add(&mut self, addr: impl Into<IpAddr>, name: &str) -> &mut HostsFile {
        self.entries.push((addr.into(), name.to_owned()));
        self
    }

    /// [`HostsFile::add`], by value.
    #[must_use]
    pub fn with(mut self, addr: impl Into<IpAddr>, name: &str) -> HostsFile {
        self.add(addr, name);
        self
    }

    /// The file's text: one `address name` line per entry.
    pub fn contents(&self) -> String {
        let mut out = String::from("# written by constle-testkit\n");
        for (addr, name) in &self.entries {
            out.push_str(&format!("{addr} {name}\n"));
        }
        out
    }

    /// Writes the file to `path`, readable by everyone (Squid reads it as
    /// the user it runs as).
    pub fn write(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.contents())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn one_line_per_entry() {
        let hosts = HostsFile::new()
            .with(Ipv4Addr::new(203, 0, 113, 7), "api.example.test")
            .with(Ipv6Addr::LOCALHOST, "api.example.test");
        assert_eq!(
            hosts.contents(),
            "# written by constle-testkit\n203.0.113.7 api.example.test\n::1 api.example.test\n"
        );
    }
}
