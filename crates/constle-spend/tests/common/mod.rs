//! Helpers shared by the integration tests: both stores behind one type, so
//! every behaviour is checked against each of them with the same code.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use constle_identity::Name;
use constle_spend::{Caps, LedgerConfig, LedgerKey, Source};
use constle_testkit::{RedisServer, require_tools};
use jiff::Timestamp;
use rust_decimal::Decimal;
use tempfile::TempDir;

/// Runs each listed `async fn(Backend)` once per store.
#[allow(unused_macros)] // not every test binary uses it
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod embedded_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name(super::Backend::embedded()).await;
                }
            )*
        }
        mod redis_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    if let Some(backend) = super::Backend::redis(stringify!($name)) {
                        super::$name(backend).await;
                    }
                }
            )*
        }
    };
}

/// A store for one test, removed (or killed) when dropped.
pub enum Backend {
    Embedded(TempDir),
    Redis(RedisServer),
}

impl Backend {
    pub fn embedded() -> Backend {
        Backend::Embedded(tempfile::tempdir().unwrap())
    }

    /// A private `redis-server`, or `None` (with `skipped: …` printed) when
    /// it is not installed and `CONSTLE_E2E` does not require it.
    pub fn redis(test: &str) -> Option<Backend> {
        require_tools(test, &["redis-server"])
            .then(|| Backend::Redis(RedisServer::start().expect("redis-server starts")))
    }

    pub fn config(&self) -> LedgerConfig {
        match self {
            Backend::Embedded(dir) => LedgerConfig::Embedded {
                dir: dir.path().join("ledger"),
            },
            Backend::Redis(server) => LedgerConfig::Redis { url: server.url() },
        }
    }

    /// The embedded store's directory for `key`.
    pub fn key_dir(&self, key: &LedgerKey) -> Option<PathBuf> {
        match self {
            Backend::Embedded(dir) => Some(dir.path().join("ledger").join(key.as_str())),
            Backend::Redis(_) => None,
        }
    }

    pub fn server(&mut self) -> Option<&mut RedisServer> {
        match self {
            Backend::Embedded(_) => None,
            Backend::Redis(server) => Some(server),
        }
    }
}

/// An exact amount of USD.
pub fn usd(s: &str) -> Decimal {
    Decimal::from_str_exact(s).unwrap()
}

/// A UTC instant, e.g. `2026-04-01T10:00:00Z`.
pub fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// The ledger key of an agent without a DID.
pub fn agent(name: &str) -> LedgerKey {
    LedgerKey::for_name(&Name::new(name).unwrap())
}

pub fn run_cap(cap: &str) -> Caps {
    Caps {
        per_run: Some(usd(cap)),
        ..Caps::default()
    }
}

pub fn day_cap(cap: &str) -> Caps {
    Caps {
        per_day: Some(usd(cap)),
        ..Caps::default()
    }
}

pub fn month_cap(cap: &str) -> Caps {
    Caps {
        per_month: Some(usd(cap)),
        ..Caps::default()
    }
}

/// The source of the charges an MCP server's tool calls make.
pub fn tools() -> Source {
    Source::Mcp {
        server: "tools".to_owned(),
    }
}
