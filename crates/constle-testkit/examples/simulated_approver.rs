//! A stand-in for the person behind a decision endpoint, for
//! demonstrations: a webhook server on loopback that approves every gated
//! call, signing with the approver key in the PEM file named by its one
//! argument (see [`SimulatedApprover`]).
//!
//! Prints the URL to put in the `url_secret_ref` variable on a line of its
//! own, then serves until its standard input closes.

use std::io::Read as _;

use constle_identity::SigningIdentity;
use constle_testkit::{Answer, SimulatedApprover};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(key) = std::env::args_os().nth(1) else {
        return Err("usage: simulated_approver APPROVER_KEY.pem".into());
    };
    let signer = SigningIdentity::from_pkcs8_pem(&std::fs::read_to_string(key)?)?;
    let approver = SimulatedApprover::start(signer, [], Answer::Approve)?;
    println!("{}", approver.url());
    // Held until the caller closes our stdin (or exits).
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    Ok(())
}
