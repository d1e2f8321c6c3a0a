//! Child processes that die with the test that started them.

use std::ffi::OsStr;
use std::process::Command;

use crate::find_tool;

/// A command running `program` under `setpriv --pdeathsig KILL` when
/// `setpriv` is installed, so that it dies with the test even on `kill -9`
/// (without `setpriv`, only its owner's `Drop` ends it). That signal
/// follows the *thread* that spawns the command: spawn it on the thread
/// that keeps the process (a test's own thread, a benchmark's main
/// thread).
pub(crate) fn dying_with_test(program: impl AsRef<OsStr>) -> Command {
    match find_tool("setpriv") {
        Some(setpriv) => {
            let mut command = Command::new(setpriv);
            command.args(["--pdeathsig", "KILL", "--"]).arg(program);
            command
        }
        None => Command::new(program),
    }
}
