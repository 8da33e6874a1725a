//! The bench's own binary run as a child process, so that a measurement's peak memory is its
//! own.

use std::time::Duration;

use anyhow::{bail, Context as _};

/// Runs the bench's own binary with `args` (standard error passed on) for at most 10 minutes;
/// returns its standard output, or an error naming `what` when it fails.
pub async fn run(args: &[&str], what: &str) -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("the bench's own path")?;
    let output = tokio::process::Command::new(exe)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("starting the bench's own binary")?
        .wait_with_output();
    let output = tokio::time::timeout(Duration::from_secs(600), output)
        .await
        .with_context(|| format!("{what} ran over 10 minutes"))??;
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    if !output.status.success() {
        bail!("{what} failed ({}): {stdout}", output.status);
    }
    Ok(stdout)
}
