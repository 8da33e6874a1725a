//! The Java peers (`bench/peers`): built with Maven when their classes are missing, each
//! scenario run as a JVM of its own, read back from its `FIGURES` line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::figures::Figures;

/// The heap every peer JVM gets (`-Xmx`), stated in the report.
pub const HEAP: &str = "512m";

/// Where the peers' Maven projects are.
pub struct Peers {
    dir: PathBuf,
}

/// One peer scenario to run.
pub struct PeerRun<'a> {
    /// `spring-kafka`, `parallel-consumer` or `share-consumer`.
    pub project: &'static str,
    pub scenario: &'a str,
    pub brokers: &'a str,
    pub topic: &'a str,
    pub group: &'a str,
    /// Records the peer's handler must be done with.
    pub expect: u64,
    /// Spring's container concurrency, Parallel Consumer's `maxConcurrency`.
    pub concurrency: usize,
}

impl Peers {
    /// The peers under `dir` (default: `bench/peers` of this checkout).
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir: dir.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")),
        }
    }

    fn class_dir(&self, project: &str) -> PathBuf {
        self.dir.join(project).join("target/classes")
    }

    /// Builds the peers (`mvn compile dependency:copy-dependencies`) unless both are built.
    pub async fn ensure_built(&self) -> anyhow::Result<()> {
        let built = ["spring-kafka", "parallel-consumer", "share-consumer"]
            .iter()
            .all(|p| self.class_dir(p).join("kafkadlq/peers").is_dir());
        if built {
            return Ok(());
        }
        eprintln!(
            "building the Java peers: mvn -q -B -f {}/pom.xml compile dependency:copy-dependencies",
            self.dir.display()
        );
        let status = tokio::process::Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(self.dir.join("pom.xml"))
            .args(["compile", "dependency:copy-dependencies"])
            .status()
            .await
            .context("running mvn (Maven and Java 17 build the peers; or pass --no-peers)")?;
        if !status.success() {
            bail!(
                "building the peers failed ({status}); build them by hand with `mvn -f {}/pom.xml \
                 compile dependency:copy-dependencies`, or pass --no-peers",
                self.dir.display()
            );
        }
        Ok(())
    }

    /// Runs one peer scenario in a JVM of its own and returns its figures.
    pub async fn run(&self, run: PeerRun<'_>) -> anyhow::Result<Figures> {
        let main = match run.project {
            "spring-kafka" => "kafkadlq.peers.SpringPeer",
            "share-consumer" => "kafkadlq.peers.SharePeer",
            _ => "kafkadlq.peers.ParallelConsumerPeer",
        };
        let project = self.dir.join(run.project);
        let classpath = format!(
            "{}:{}/*",
            project.join("target/classes").display(),
            project.join("target/libs").display()
        );
        let java = std::env::var("JAVA_HOME")
            .map(|home| PathBuf::from(home).join("bin/java"))
            .unwrap_or_else(|_| PathBuf::from("java"));
        let child = tokio::process::Command::new(java)
            .arg(format!("-Xmx{HEAP}"))
            .args(["-cp", &classpath, main])
            .args([
                "--brokers",
                run.brokers,
                "--topic",
                run.topic,
                "--group",
                run.group,
            ])
            .args(["--scenario", run.scenario])
            .args(["--expect", &run.expect.to_string()])
            .args(["--concurrency", &run.concurrency.to_string()])
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(Duration::from_secs(900), child)
            .await
            .with_context(|| format!("{} {} ran over 15 minutes", run.project, run.scenario))?
            .with_context(|| format!("starting java for {}", run.project))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        match Figures::parse(&stdout) {
            Some(figures) if output.status.success() => Ok(figures),
            _ => bail!(
                "{} {} failed ({}): {stdout}{}",
                run.project,
                run.scenario,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }
}
