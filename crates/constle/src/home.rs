//! Where Constle keeps its state on the host: `$CONSTLE_HOME`, by default
//! `~/.constle`.

use std::path::PathBuf;

use anyhow::{Context as _, bail};

/// The state directory (not created here).
pub fn constle_home() -> anyhow::Result<PathBuf> {
    if let Some(home) = std::env::var_os("CONSTLE_HOME").filter(|h| !h.is_empty()) {
        let home = PathBuf::from(home);
        if !home.is_absolute() {
            bail!(
                "CONSTLE_HOME must be an absolute path, not {}",
                home.display()
            );
        }
        return Ok(home);
    }
    let user_home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("neither CONSTLE_HOME nor HOME is set")?;
    Ok(PathBuf::from(user_home).join(".constle"))
}
