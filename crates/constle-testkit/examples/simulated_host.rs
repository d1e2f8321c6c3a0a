//! A simulated outside host for demonstrations: a network namespace holding
//! a documentation address with a listener on port 443 (see [`TestHost`]).
//!
//! Prints the host's IPv4 address on a line of its own, then keeps the host
//! up until its standard input closes, and tears it down. Needs root.

use std::io::Read as _;

use constle_testkit::TestHost;

fn main() -> std::io::Result<()> {
    let host = TestHost::start()?;
    println!("{}", host.ipv4());
    // Held until the caller closes our stdin (or exits).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(host);
    Ok(())
}
