#!/usr/bin/env bash
# The main job: builds kafka-dlq and runs `kafka-dlq demo` on an embedded broker (librdkafka's
# mock cluster; no external services). Installs the C toolchain, zlib, OpenSSL and libcurl that
# the bundled librdkafka needs if they are missing. Extra arguments go to `kafka-dlq demo`.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib.sh
ensure_packages gcc g++ make pkg-config zlib1g-dev libssl-dev libcurl4-openssl-dev ca-certificates

cargo build --release --locked --features cli --bin kafka-dlq
exec ./target/release/kafka-dlq demo "$@"
