//! `sandbox.home`: a host directory mounted as the agent's home and kept
//! across runs, under the rules of a work directory and apart from the work
//! directory and the rootfs.

use std::path::{Path, PathBuf};

use super::context::{Apart, V};
use crate::de::Located;

const HELP: &str = "give the home a directory of its own beside the Agentfile, outside the work directory and the rootfs, e.g. home: ./agent-home";

impl V<'_, '_> {
    /// The home written at `value`, checked against the sandbox's
    /// `workdir` and `rootfs` where those are valid.
    pub(super) fn home(
        &mut self,
        value: &Located<String>,
        workdir: Option<&Path>,
        rootfs: Option<&Path>,
    ) -> Option<PathBuf> {
        let field = "sandbox.home";
        let home = self.sandbox_dir(value, field)?;
        let others: Vec<Apart<'_>> = [("the work directory", workdir), ("the rootfs", rootfs)]
            .into_iter()
            .filter_map(|(what, dir)| {
                dir.map(|dir| Apart {
                    what,
                    dir,
                    help: HELP,
                })
            })
            .collect();
        let apart = self.apart(
            value,
            (field, &home),
            &others,
            "home_overlaps",
            "the same files would be mounted twice, so what the agent writes through one would escape the rules of the other",
        );
        apart.then_some(home)
    }
}
