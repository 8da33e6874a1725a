#!/usr/bin/env bash
# A local Apache Kafka (one KRaft node: broker and controller) from the jars that
# scripts/test.sh fetches, for the benchmark or trying kafka-dlq by hand.
#   scripts/kafka.sh start [PORT]   formats a fresh node in /tmp/kafka-dlq-local-PORT, starts it in
#                                   the background on 127.0.0.1:PORT (default 19092), waits for it
#   scripts/kafka.sh stop [PORT]    stops it and removes its data (and its log, see below)
# The JVM gets a 1 GB heap and the full JIT (the test brokers use less, to start faster).
# The log is kept in memory (/dev/shm, when there is one): on this project's 2-core build machine
# a log on disk made about half of the benchmark's dead-letter runs stall for up to 1.6 s while
# the broker answered produce requests in 150-275 ms (librdkafka's rtt), which measured the
# disk rather than the consumer (docs/benchmark.md). The benchmark deletes what it made.
# KAFKA_VERSION=4.4.0 starts Apache Kafka 4.4 formatted with share.version=2 (share groups and
# their broker dead-letter queue), for the share-group benchmark; KAFKA_FEATURES overrides the
# features it is formatted with. KAFKA_TLS_PORT=19094 adds a TLS listener on that port, its
# certificate signed by a CA made here ($dir/tls/ca.pem), for the benchmark's TLS rows.
set -euo pipefail
cd "$(dirname "$0")/.."
KAFKA_VERSION="${KAFKA_VERSION:-4.1.1}"
case "$KAFKA_VERSION" in
  4.4.*) KAFKA_FEATURES="${KAFKA_FEATURES:---feature share.version=2}" ;;
  *) KAFKA_FEATURES="${KAFKA_FEATURES:-}" ;;
esac
KAFKA_LIBS="${KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/kafka-dlq/kafka-$KAFKA_VERSION/libs}"
action="${1:-}"
port="${2:-19092}"
dir="/tmp/kafka-dlq-local-$port"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  data="/dev/shm/kafka-dlq-local-$port"
else
  data="$dir/data"
fi

case "$action" in
  start)
    if [ ! -f "$KAFKA_LIBS/kafka_2.13-$KAFKA_VERSION.jar" ]; then
      echo "==> fetching Apache Kafka $KAFKA_VERSION from Maven Central into $KAFKA_LIBS"
      (cd tests/kafka && mvn -q -B dependency:copy-dependencies -DincludeScope=runtime \
        -Dkafka.version="$KAFKA_VERSION" -DoutputDirectory="$KAFKA_LIBS")
    fi
    rm -rf "$dir" "$data" && mkdir -p "$dir" "$data"
    controller=$((port + 1))
    listeners="PLAINTEXT://127.0.0.1:$port"
    protocols="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    tls=""
    if [ -n "${KAFKA_TLS_PORT:-}" ]; then
      mkdir -p "$dir/tls"
      (
        cd "$dir/tls"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 \
          -subj "/CN=kafka-dlq local CA" 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
          -subj "/CN=localhost" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
          -out server.crt -days 30 -extfile server.ext 2>/dev/null
        cat server.key server.crt ca.pem > server.pem
      )
      listeners="$listeners,SSL://127.0.0.1:$KAFKA_TLS_PORT"
      protocols="$protocols,SSL:SSL"
      tls="ssl.keystore.type=PEM
ssl.keystore.location=$dir/tls/server.pem"
    fi
    cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=$listeners,CONTROLLER://127.0.0.1:$controller
advertised.listeners=$listeners
controller.listener.names=CONTROLLER
listener.security.protocol.map=$protocols
$tls
inter.broker.listener.name=PLAINTEXT
log.dirs=$data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
    printf 'status = error\nappender.out.type = Console\nappender.out.name = out\nappender.out.layout.type = PatternLayout\nappender.out.layout.pattern = [%%d] %%p %%m (%%c)%%n\nrootLogger.level = warn\nrootLogger.appenderRef.out.ref = out\n' > "$dir/log4j2.properties"
    java=(java -Xms1g -Xmx1g -cp "$KAFKA_LIBS/*" "-Dlog4j2.configurationFile=$dir/log4j2.properties")
    # A random cluster id, never starting with "-" (the storage tool would read it as an option).
    id=$(python3 -c 'import base64,os
while True:
    i = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not i.startswith("-"):
        print(i); break')
    # shellcheck disable=SC2086 # KAFKA_FEATURES is a list of arguments
    "${java[@]}" kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" $KAFKA_FEATURES > "$dir/format.log"
    nohup "${java[@]}" kafka.Kafka "$dir/server.properties" > "$dir/broker.log" 2>&1 &
    echo $! > "$dir/pid"
    for _ in $(seq 1 300); do
      if (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "Apache Kafka $KAFKA_VERSION on 127.0.0.1:$port (log: $dir/broker.log)"
        if [ -n "${KAFKA_TLS_PORT:-}" ]; then
          echo "TLS listener on 127.0.0.1:$KAFKA_TLS_PORT, its CA: $dir/tls/ca.pem"
        fi
        exit 0
      fi
      sleep 0.2
    done
    echo "Kafka did not start; see $dir/broker.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/pid" ]; then
      kill "$(cat "$dir/pid")" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$(cat "$dir/pid")" 2>/dev/null || break; sleep 0.2; done
    fi
    rm -rf "$dir" "$data"
    ;;
  *)
    echo "usage: scripts/kafka.sh start|stop [PORT]" >&2
    exit 2
    ;;
esac
