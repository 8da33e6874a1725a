//! librdkafka's mock cluster in a child process (this binary, `--serve-mock`), so that its
//! copy of the data does not count in a scenario's memory.

use std::time::Duration;

use anyhow::Context as _;
use rdkafka::mocking::MockCluster;

/// The mock cluster's process. It stops when this handle is dropped: the child exits when its
/// standard input closes, and is killed if it has not.
pub struct MockChild {
    pub bootstrap: String,
    _child: tokio::process::Child,
}

impl MockChild {
    /// Starts it with `topics` (`name`, partitions) and waits for its address.
    pub async fn start(topics: &[(&str, i32)]) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let spec: Vec<String> = topics.iter().map(|(t, p)| format!("{t}:{p}")).collect();
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["--serve-mock", &spec.join(",")])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting the mock cluster's process")?;
        let stdout = child.stdout.take().context("mock cluster stdout")?;
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(30),
            tokio::io::BufReader::new(stdout).read_line(&mut line),
        )
        .await
        .context("the mock cluster did not start within 30 s")??;
        let bootstrap = line
            .strip_prefix("BOOTSTRAP ")
            .map(|b| b.trim().to_string())
            .with_context(|| format!("unexpected line from the mock cluster: {line:?}"))?;
        Ok(Self {
            bootstrap,
            _child: child,
        })
    }
}

/// The child's side: start the mock cluster with `topics` (`name:partitions`), print
/// `BOOTSTRAP <servers>`, serve until standard input closes.
pub async fn serve(topics: &[String]) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let mock = MockCluster::new(1).context("starting the mock cluster")?;
    for spec in topics {
        let (name, partitions) = spec
            .rsplit_once(':')
            .with_context(|| format!("expected topic:partitions, got `{spec}`"))?;
        mock.create_topic(name, partitions.parse()?, 1)?;
    }
    println!("BOOTSTRAP {}", mock.bootstrap_servers());
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    Ok(())
}
