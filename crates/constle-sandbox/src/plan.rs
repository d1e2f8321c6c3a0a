//! How a [`SandboxSpec`] reaches the launcher (`constle sandbox-exec`): as
//! JSON in one environment variable of that process.
//!
//! An environment variable, not arguments: a process's command line can be
//! read by every user of the host, its environment only by its own user.
//! Paths travel as their bytes, so a path that is not UTF-8 arrives intact.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::SandboxSpec;

/// The launcher's environment variable holding its [`Plan`].
pub(crate) const PLAN_ENV: &str = "CONSTLE_SANDBOX_PLAN";

/// Everything the launcher needs, decided by its caller.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Plan {
    pub spec: SandboxSpec,
    /// The `bwrap` to run, found by the caller.
    #[serde(with = "path")]
    pub bwrap: PathBuf,
}

impl Plan {
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// The plan in this process's environment, which it is removed from.
    pub fn from_env() -> Result<Plan, String> {
        let json = std::env::var(PLAN_ENV)
            .map_err(|_| format!("{PLAN_ENV} is not set; `constle run` starts this subcommand"))?;
        serde_json::from_str(&json).map_err(|e| format!("{PLAN_ENV} is not a plan: {e}"))
    }
}

/// Serde for a path as its bytes.
pub(crate) mod path {
    use super::*;

    pub fn serialize<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(path.as_os_str().as_bytes())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<PathBuf, D::Error> {
        Vec::<u8>::deserialize(d).map(|bytes| PathBuf::from(OsString::from_vec(bytes)))
    }
}

/// Serde for a list of paths as their bytes.
pub(crate) mod paths {
    use super::*;

    pub fn serialize<S: serde::Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        let bytes: Vec<&[u8]> = paths.iter().map(|p| p.as_os_str().as_bytes()).collect();
        bytes.serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Vec::<Vec<u8>>::deserialize(d).map(|all| {
            all.into_iter()
                .map(|b| PathBuf::from(OsString::from_vec(b)))
                .collect()
        })
    }
}

/// Serde for an optional path as its bytes.
pub(crate) mod opt_path {
    use super::*;

    pub fn serialize<S: serde::Serializer>(
        path: &Option<PathBuf>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        path.as_ref().map(|p| p.as_os_str().as_bytes()).serialize(s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<PathBuf>, D::Error> {
        Option::<Vec<u8>>::deserialize(d)
            .map(|bytes| bytes.map(|b| PathBuf::from(OsString::from_vec(b))))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{CommandIo, Door, NameService, Network, Private, TmpfsSizes};

    #[test]
    fn round_trip_keeps_every_byte() {
        let odd = PathBuf::from(OsString::from_vec(b"/srv/w\xff,x".to_vec()));
        let plan = Plan {
            spec: SandboxSpec {
                command: vec!["sh".into(), "-c".into(), "echo \"hi\"".into()],
                workdir: odd.clone(),
                env: BTreeMap::from([("A".into(), "b=c".into())]),
                rootfs: Some(odd.clone()),
                stdio: CommandIo::Socket(odd.join("io.sock")),
                constle_exe: "/usr/bin/constle".into(),
                private: vec![Private {
                    what: "CONSTLE_HOME".into(),
                    path: odd.clone(),
                }],
                stage: odd.clone(),
                cgroup_procs: vec![odd.join("cgroup.procs")],
                host_id: None,
                tmpfs: TmpfsSizes::DEFAULT,
                workdir_inode: None,
                etc_files: BTreeMap::new(),
                home: None,
                home_inode: None,
                network: Some(Network {
                    channel: odd.join("s.sock"),
                    doors: vec![Door {
                        name: "proxy".into(),
                        listen: "127.0.0.1:3128".parse().unwrap(),
                    }],
                    name_service: Some(NameService {
                        local_routes: vec![("198.18.0.0".parse().unwrap(), 15)],
                    }),
                }),
            },
            bwrap: "/usr/bin/bwrap".into(),
        };
        let back: Plan = serde_json::from_str(&plan.to_json().unwrap()).unwrap();
        assert_eq!(back.spec, plan.spec);
        assert_eq!(back.bwrap, plan.bwrap);
    }
}
