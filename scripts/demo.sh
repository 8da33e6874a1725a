#!/usr/bin/env bash
# The main job: builds kafka-dlq and runs `kafka-dlq demo` on an embedded broker (librdkafka's
# mock cluster; no external services). Installs the C toolchain and zlib that the bundled
# librdkafka needs if they are missing. Extra arguments go to `kafka-dlq demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v c++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need_apt+=(zlib1g-dev)
dpkg -s ca-certificates >/dev/null 2>&1 || need_apt+=(ca-certificates)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "==> installing ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}"
fi

cargo build --release --locked --bin kafka-dlq
exec ./target/release/kafka-dlq demo "$@"
