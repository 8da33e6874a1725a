//! Which tests this `cargo test` run selected. Without the features, the tests that need them
//! are not built; the tests here then show as *ignored*, with the command that runs them, so
//! that no run leaves them out silently. With the features, they check that what those tests
//! need is there, and say what is missing before forty tests fail on it.
//!
//! - `cli`: the binary and the application's tests that need nothing but Rust (`cargo test
//!   --features cli`).
//! - `broker-tests`: every test, on Apache Kafka: `./scripts/test.sh` installs Java 17, Maven,
//!   Kafka and the rest, and turns it on.

#[test]
#[cfg_attr(
    not(feature = "cli"),
    ignore = "the application's tests (the binary, the sidecar, the monitor) need `--features cli`; `./scripts/test.sh` runs everything"
)]
fn the_application_s_tests_run_the_binary_they_were_built_with() {
    #[cfg(feature = "cli")]
    {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_kafka-dlq"));
        let out = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
        assert!(out.status.success(), "{out:?}");
        let version = String::from_utf8_lossy(&out.stdout);
        assert!(
            version.contains(env!("CARGO_PKG_VERSION")),
            "`kafka-dlq --version` printed {version:?}"
        );
    }
}

#[cfg(feature = "broker-tests")]
mod common;

#[test]
#[cfg_attr(
    not(feature = "broker-tests"),
    ignore = "the tests on Apache Kafka need Java 17 and Kafka: run `./scripts/test.sh` (it installs them and passes `--features broker-tests`)"
)]
fn the_tests_on_apache_kafka_start_a_broker() {
    #[cfg(feature = "broker-tests")]
    {
        if std::env::var_os("KAFKA_DLQ_TEST_BROKERS").is_some() {
            return; // they run on the cluster it names
        }
        // What every broker test does first: a KRaft node on loopback, up once it serves
        // metadata; its error says what is missing (Kafka's jars, Java).
        let kafka = common::broker::Kafka::start().unwrap_or_else(|e| panic!("{e}"));
        assert!(kafka.port > 0);
        // The secured brokers' CA and certificates are made with openssl, their MSK IAM
        // check compiled with javac.
        // The console's browser test drives Debian's Chromium through its chromedriver.
        for tool in [
            ["openssl", "version"],
            ["javac", "-version"],
            ["chromedriver", "--version"],
        ] {
            let ran = std::process::Command::new(tool[0]).arg(tool[1]).output();
            assert!(
                ran.is_ok_and(|o| o.status.success()),
                "`{}` is missing: ./scripts/test.sh installs it",
                tool[0]
            );
        }
        // The chart's tests run Helm and the manifest validator that the script builds, the
        // tracing tests Jaeger.
        for var in ["HELM_BIN", "KUBE_VALIDATE_BIN", "JAEGER_BIN"] {
            let path = std::env::var(var).unwrap_or_default();
            assert!(
                std::path::Path::new(&path).is_file(),
                "{var} names no program ({path:?}): ./scripts/test.sh installs it and sets it"
            );
        }
    }
}
