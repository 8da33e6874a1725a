//! The test broker: one Apache Kafka node in KRaft mode (broker and controller in one JVM) on
//! free loopback ports, its data and log in a directory of its own.
//!
//! The jars come from `KAFKA_LIBS`, or from the cache directory that `scripts/test.sh` fills
//! with `mvn dependency:copy-dependencies` (`~/.cache/kafka-dlq/kafka-<version>/libs`). The
//! settings make a one-node broker quick to test on and change nothing of group or delivery
//! semantics: replication factor 1 for the internal topics (one partition each), no initial
//! rebalance delay, a small heap, and KIP-848 session and heartbeat times as short as the
//! classic protocol's (the tests' classic members use a 6 s session).

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The pinned Apache Kafka version (`tests/kafka/pom.xml`).
pub const KAFKA_VERSION: &str = "4.1.1";

/// The Apache Kafka version of the share-group tests ([`Kafka::start_share`]): share groups
/// with the broker's dead-letter queue (KIP-1191) need 4.4.
pub const SHARE_KAFKA_VERSION: &str = "4.4.0";

/// The share-group broker's settings beyond the usual ones: locks of 3 s (the default 30 s
/// would make a lock expiry take half a minute) and 5 deliveries, Kafka's default.
const SHARE_SETTINGS: &str = "group.share.min.record.lock.duration.ms=1000
group.share.record.lock.duration.ms=3000
group.share.delivery.count.limit=5
errors.deadletterqueue.auto.create.topics.enable=true
";

/// The broker and controller JVM's options: a small heap, the serial collector, and the
/// client compiler only (a quick start on a 2-core machine).
const JVM_OPTIONS: [&str; 4] = [
    "-Xms64m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
];

/// A listener beside the plaintext one: its name in the broker's settings and its protocol.
#[derive(Debug, Clone, Copy)]
pub struct Extra {
    /// `SSL`, `MTLS`, …
    pub name: &'static str,
    /// `SSL`, `SASL_SSL`, …
    pub protocol: &'static str,
}

/// Marks a broker directory kept to look at: a test of its binary failed.
const FAILED_MARK: &str = "test-failed";

/// Directory name prefix of the test brokers, under the temporary directory.
const DIR_PREFIX: &str = "kafka-dlq-broker-";

/// The directory holding Kafka's jars.
pub fn kafka_libs() -> PathBuf {
    kafka_libs_of(KAFKA_VERSION)
}

/// The directory holding the jars of Kafka `version`: `KAFKA_LIBS` for the pinned version
/// when set, else the cache.
pub fn kafka_libs_of(version: &str) -> PathBuf {
    if version == KAFKA_VERSION {
        if let Ok(dir) = std::env::var("KAFKA_LIBS") {
            return PathBuf::from(dir);
        }
    }
    let cache = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache")
        });
    cache.join(format!("kafka-dlq/kafka-{version}/libs"))
}

/// A Kafka node process. It is killed when this value is dropped, and in any case when the
/// test binary exits (the JVM gets SIGKILL when its parent thread ends).
pub struct Kafka {
    /// The broker's port.
    pub port: u16,
    controller_port: u16,
    dir: PathBuf,
    /// Its jars.
    libs: PathBuf,
    /// JVM options beyond [`JVM_OPTIONS`].
    jvm: Vec<String>,
    /// The listeners beside the plaintext one ([`Kafka::start_with`]): name, protocol, port.
    extra: Vec<(String, String, u16)>,
    pid: u32,
    /// Says when the JVM has exited (behind a lock: a broker is shared between threads).
    exited: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Kafka {
    /// Formats a fresh node on free loopback ports and starts it; returns once it serves
    /// metadata.
    pub fn start() -> Result<Kafka, String> {
        Self::start_version(KAFKA_VERSION, &[], "", Vec::new(), &[], None)
    }

    /// Like [`Kafka::start`], with a listener `PROXIED` whose clients are told to connect to
    /// `127.0.0.1:<advertised>` (a proxy of the test's in front of it, forwarding to
    /// [`Kafka::listener`]`("PROXIED")`), and `settings` added. The broker's own traffic stays
    /// on its plaintext listener.
    pub fn start_behind(advertised: u16, settings: &str) -> Result<Kafka, String> {
        let proxied = Extra {
            name: "PROXIED",
            protocol: "PLAINTEXT",
        };
        Self::start_version(
            KAFKA_VERSION,
            &[],
            settings,
            Vec::new(),
            &[proxied],
            Some(advertised),
        )
    }

    /// Like [`Kafka::start`] (of Kafka `version`, [`SHARE_KAFKA_VERSION`] formatted for
    /// share groups), with `listeners` beside the plaintext one, `settings` for them,
    /// `jvm` options and `format` arguments of the storage tool (SCRAM users); see
    /// `security::start_secured`.
    pub fn start_with(
        share: bool,
        listeners: &[Extra],
        settings: &str,
        jvm: Vec<String>,
        format: &[String],
    ) -> Result<Kafka, String> {
        // `jvm` may name classes of the test's own (`-cp` beside Kafka's jars): see `java`.
        let (version, features, base) = if share {
            (
                SHARE_KAFKA_VERSION,
                &["--feature", "share.version=2"][..],
                SHARE_SETTINGS,
            )
        } else {
            (KAFKA_VERSION, &[][..], "")
        };
        let mut args: Vec<String> = features.iter().map(|f| f.to_string()).collect();
        args.extend(format.iter().cloned());
        Self::start_version(
            version,
            &args,
            &format!("{base}{settings}"),
            jvm,
            listeners,
            None,
        )
    }

    /// The bootstrap address of the listener `name` (of a broker from [`Kafka::start_with`]).
    pub fn listener(&self, name: &str) -> String {
        let port = self
            .extra
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, port)| *port)
            .unwrap_or_else(|| panic!("no listener {name}"));
        format!("127.0.0.1:{port}")
    }

    /// The directory of the partition's log segments (`<topic>-<partition>`).
    pub fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.dir.join("data").join(format!("{topic}-{partition}"))
    }

    /// Like [`Kafka::start`], a node of Kafka [`SHARE_KAFKA_VERSION`] formatted with
    /// `share.version=2` (share groups with the broker's dead-letter queue), with 3 s locks.
    pub fn start_share() -> Result<Kafka, String> {
        Self::start_with(true, &[], "", Vec::new(), &[])
    }

    fn start_version(
        version: &str,
        format: &[String],
        settings: &str,
        jvm: Vec<String>,
        listeners: &[Extra],
        advertised: Option<u16>,
    ) -> Result<Kafka, String> {
        let libs = kafka_libs_of(version);
        if !libs.join(format!("kafka_2.13-{version}.jar")).exists() {
            return Err(format!(
                "Apache Kafka {version} is not in {}: run ./scripts/test.sh (it fetches \
                 it from Maven Central) or set KAFKA_LIBS",
                libs.display()
            ));
        }
        let mut ports = free_ports(2 + listeners.len()).into_iter();
        let (port, controller_port) = (ports.next().unwrap(), ports.next().unwrap());
        remove_dirs_of_ended_runs();
        let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let extra: Vec<(String, String, u16)> = listeners
            .iter()
            .zip(ports)
            .map(|(l, port)| (l.name.to_string(), l.protocol.to_string(), port))
            .collect();
        write_config(&dir, port, controller_port, &extra, settings, advertised)?;
        let cluster_id = cluster_id();
        let format = java(&dir, &libs, &jvm)
            .args([
                "kafka.tools.StorageTool",
                "format",
                "--ignore-formatted",
                "-t",
            ])
            .arg(&cluster_id)
            .args(format)
            .arg("-c")
            .arg(dir.join("server.properties"))
            .output()
            .map_err(|e| format!("could not run java ({e}); is Java 17 installed?"))?;
        if !format.status.success() {
            return Err(format!(
                "formatting the Kafka storage failed: {}{}",
                String::from_utf8_lossy(&format.stdout),
                String::from_utf8_lossy(&format.stderr)
            ));
        }
        Self::spawn(port, controller_port, dir, libs, jvm, extra)
    }

    fn spawn(
        port: u16,
        controller_port: u16,
        dir: PathBuf,
        libs: PathBuf,
        jvm: Vec<String>,
        extra: Vec<(String, String, u16)>,
    ) -> Result<Kafka, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("broker.log"))
            .map_err(|e| e.to_string())?;
        let mut command = java(&dir, &libs, &jvm);
        command
            .arg("kafka.Kafka")
            .arg(dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        // The JVM gets SIGKILL when the thread that started it ends; that thread waits for
        // the JVM, so it lives as long as the broker or the test binary.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let (exited_tx, exited_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || match command.spawn() {
            Ok(mut child) => {
                started_tx.send(Ok(child.id())).unwrap();
                let _ = child.wait();
                let _ = exited_tx.send(());
            }
            Err(e) => started_tx.send(Err(e)).unwrap(),
        });
        let pid = started_rx
            .recv()
            .unwrap()
            .map_err(|e| format!("could not start Kafka with java ({e})"))?;
        let kafka = Kafka {
            port,
            controller_port,
            dir,
            libs,
            jvm,
            extra,
            pid,
            exited: std::sync::Mutex::new(exited_rx),
        };
        if let Err(e) = kafka.wait_until_serving(Duration::from_secs(90)) {
            // The error names the log: kept to look at.
            Kafka::keep_for_failure(&kafka.dir);
            return Err(e);
        }
        Ok(kafka)
    }

    /// Waits until the broker answers a metadata request.
    fn wait_until_serving(&self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let failed = |why: &str| {
            Err(format!(
                "Kafka on port {} {why}; its log: {}",
                self.port,
                self.log_path().display()
            ))
        };
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if self.exited.lock().unwrap().try_recv().is_ok() {
                return failed("exited while starting");
            }
            if Instant::now() > deadline {
                return failed("did not listen in time");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let client: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .set("log_level", "0")
            .create()
            .map_err(|e| e.to_string())?;
        loop {
            if let Ok(metadata) = client.fetch_metadata(None, Duration::from_secs(5)) {
                if !metadata.brokers().is_empty() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return failed("did not serve metadata in time");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The bootstrap address.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's log file (kept when a test of the binary fails).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    /// Kills the broker (SIGKILL) and waits for it to be gone.
    pub fn kill(&self) {
        unsafe {
            libc::kill(self.pid as i32, libc::SIGKILL);
        }
        let _ = self
            .exited
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(20));
    }

    /// Stops the broker's process (SIGSTOP): it answers nothing, its connections stay open.
    pub fn freeze(&self) {
        unsafe {
            libc::kill(self.pid as i32, libc::SIGSTOP);
        }
    }

    /// Lets a [`Kafka::freeze`]d broker go on (SIGCONT).
    pub fn thaw(&self) {
        unsafe {
            libc::kill(self.pid as i32, libc::SIGCONT);
        }
    }

    /// The port the broker itself listens on for plaintext clients (behind a proxy, the one
    /// the proxy connects to).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the broker and starts it again on the same ports and storage.
    pub fn restart(self) -> Kafka {
        self.kill();
        let (port, controller_port) = (self.port, self.controller_port);
        let (dir, libs) = (self.dir.clone(), self.libs.clone());
        let (jvm, extra) = (self.jvm.clone(), self.extra.clone());
        std::mem::forget(self);
        Self::spawn(port, controller_port, dir, libs, jvm, extra).expect("Kafka restarts")
    }

    /// Marks the directory as a failed test's, so that later runs keep it, and says where
    /// the log is.
    fn keep_for_failure(dir: &Path) {
        if !dir.join(FAILED_MARK).exists() {
            let _ = std::fs::write(dir.join(FAILED_MARK), "");
            eprintln!(
                "a test failed; the Kafka broker's log is kept at {}",
                dir.join("broker.log").display()
            );
        }
    }

    /// Keeps this broker's log if any test of the binary panics from now on, except the
    /// deliberate panics of the test handlers (messages starting with `scripted panic`).
    pub fn keep_log_on_panic(&self) {
        let dir = self.dir.clone();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !message.starts_with("scripted panic") {
                Kafka::keep_for_failure(&dir);
            }
            previous(info);
        }));
    }
}

impl Drop for Kafka {
    /// Kills the broker; removes its storage and log unless the test failed (then they are
    /// kept to look at, and their path printed).
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            Kafka::keep_for_failure(&self.dir);
        } else if !self.dir.join(FAILED_MARK).exists() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A random KRaft cluster id: 16 bytes in URL-safe base64, never starting with `-` (the
/// storage tool would read it as an option; Kafka's own `Uuid` avoids that the same way).
fn cluster_id() -> String {
    use base64::Engine;
    loop {
        let id = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(fastrand::u128(..).to_be_bytes());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// `n` distinct free loopback ports. Every listener stays bound until all are chosen: asked
/// one at a time, the system may hand the same just-released port out twice, and the broker
/// then refuses two listeners on one port.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("a bound loopback port").port())
        .collect()
}

/// `java` with the broker's JVM options (and `extra`, where `-cp DIR` adds a directory of
/// classes beside Kafka's jars), Kafka's jars and the log configuration, in `dir`.
fn java(dir: &Path, libs: &Path, extra: &[String]) -> Command {
    let java = std::env::var("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin/java"))
        .unwrap_or_else(|_| PathBuf::from("java"));
    let mut classpath = format!("{}/*", libs.display());
    let mut options = Vec::new();
    let mut extra = extra.iter();
    while let Some(option) = extra.next() {
        match (option.as_str(), extra.clone().next()) {
            ("-cp", Some(more)) => {
                classpath = format!("{classpath}:{more}");
                extra.next();
            }
            _ => options.push(option.clone()),
        }
    }
    let mut command = Command::new(java);
    command
        .args(JVM_OPTIONS)
        .args(options)
        .arg("-cp")
        .arg(classpath)
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ))
        .current_dir(dir);
    command
}

fn write_config(
    dir: &Path,
    port: u16,
    controller_port: u16,
    extra: &[(String, String, u16)],
    settings: &str,
    advertised: Option<u16>,
) -> Result<(), String> {
    let data = dir.join("data");
    let listeners: String = extra
        .iter()
        .map(|(name, _, p)| format!(",{name}://127.0.0.1:{p}"))
        .collect();
    let protocols: String = extra
        .iter()
        .map(|(name, protocol, _)| format!(",{name}:{protocol}"))
        .collect();
    // The `PROXIED` listener is advertised where the test's proxy listens.
    let advertised_listeners: String = extra
        .iter()
        .map(|(name, _, p)| match (name.as_str(), advertised) {
            ("PROXIED", Some(a)) => format!(",{name}://127.0.0.1:{a}"),
            _ => format!(",{name}://127.0.0.1:{p}"),
        })
        .collect();
    let server = format!(
        "process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}{listeners}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}{advertised_listeners}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}
inter.broker.listener.name=PLAINTEXT
log.dirs={data}
num.partitions=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
transaction.abort.timed.out.transaction.cleanup.interval.ms=2000
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
group.initial.rebalance.delay.ms=0
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=6000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
{settings}",
        data = data.display()
    );
    let log4j = "status = error
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = warn
";
    std::fs::write(dir.join("server.properties"), server).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("log4j2.properties"), log4j).map_err(|e| e.to_string())
}

/// Removes the broker directories of test binaries that have ended (the broker a binary
/// shares between its tests is never dropped, so its directory outlives it), except those of
/// a failed test from the last day.
fn remove_dirs_of_ended_runs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next() else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let failed_recently = std::fs::metadata(entry.path().join(FAILED_MARK))
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().unwrap_or_default() < Duration::from_secs(86_400));
        if !failed_recently {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Runs one of Kafka's own command-line tools (a class of kafka-tools, e.g.
/// `org.apache.kafka.tools.consumer.group.ConsumerGroupCommand`) and returns its standard
/// output; panics with its output when it fails.
pub fn kafka_tool(class: &str, args: &[&str]) -> String {
    let dir = std::env::temp_dir();
    let output = Command::new(
        std::env::var("JAVA_HOME")
            .map(|home| PathBuf::from(home).join("bin/java"))
            .unwrap_or_else(|_| PathBuf::from("java")),
    )
    .args(["-Xmx256m", "-XX:TieredStopAtLevel=1", "-cp"])
    .arg(format!("{}/*", kafka_libs().display()))
    .arg("-Dlog4j2.level=warn")
    .arg(class)
    .args(args)
    .current_dir(dir)
    .output()
    .expect("run java");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{class} {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The lag of each partition of `group` as Kafka's own consumer-group tool
/// (`kafka-consumer-groups --describe`) reports it: `(topic, partition, lag)`; a partition
/// with no committed offset has lag `None`.
pub fn group_lag(brokers: &str, group: &str) -> Vec<(String, i32, Option<i64>)> {
    let out = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        &[
            "--bootstrap-server",
            brokers,
            "--describe",
            "--group",
            group,
        ],
    );
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = loop {
        match lines.next() {
            Some(l) if l.split_whitespace().next() == Some("GROUP") => {
                break l.split_whitespace().collect()
            }
            Some(_) => continue,
            None => return vec![],
        }
    };
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (topic, partition, lag) = (col("TOPIC"), col("PARTITION"), col("LAG"));
    lines
        .filter_map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            Some((
                cells.get(topic)?.to_string(),
                cells.get(partition)?.parse().ok()?,
                cells.get(lag)?.parse().ok(),
            ))
        })
        .collect()
}
