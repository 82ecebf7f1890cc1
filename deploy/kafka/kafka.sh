#!/usr/bin/env bash
# A real Apache Kafka cluster (KRaft, every node broker+controller) on
# 127.0.0.1, from jars Maven fetches (deploy/kafka/pom.xml): no Docker.
#
#   deploy/kafka/kafka.sh fetch        fetch the jars into the cache (no-op when cached)
#   deploy/kafka/kafka.sh run          start the cluster in the foreground (`make kafka`);
#                                      Ctrl-C / SIGTERM stops it and removes its data
#   deploy/kafka/kafka.sh start        the same in the background (CI, tests): returns once
#                                      ready, prints only the bootstrap list on stdout
#   deploy/kafka/kafka.sh stop         stop what `start` started and remove its data
#   deploy/kafka/kafka.sh status       print the bootstrap list if `start`'s cluster runs
#   deploy/kafka/kafka.sh props NODE   print node NODE's broker properties
#   deploy/kafka/kafka.sh prepare DATADIR
#                                      write each node's properties under DATADIR and format
#                                      its storage (a formatted DATADIR is kept as it is);
#                                      prints the bootstrap list. For a caller that runs the
#                                      nodes itself, one process each (the chaos suite):
#   deploy/kafka/kafka.sh node DATADIR NODE
#                                      exec node NODE of a prepared DATADIR in the foreground
#                                      (the JVM takes this script's pid, so a signal to that
#                                      pid reaches the broker); it logs to stderr
#   deploy/kafka/kafka.sh java CLASS ARGS...
#                                      run a Kafka tool from the cache, e.g.
#                                      `java org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:9092 --list`
#
# Environment:
#   KAFKA_NODES=1                  number of nodes (node i: PLAINTEXT on KAFKA_BASE_PORT+i-1,
#                                  CONTROLLER on KAFKA_CONTROLLER_BASE_PORT+i-1)
#   KAFKA_BASE_PORT=9092           so 1 node: 9092; 3 nodes: 9092-9094
#   KAFKA_CONTROLLER_BASE_PORT=19092
#   KAFKA_DATA_DIR                 keep data (and logs) here, and keep it on stop; default a
#                                  fresh temporary directory, removed on stop
#   KAFKA_STATE_DIR                where start/stop keep pids (default
#                                  /tmp/orderpipe-kafka-$KAFKA_BASE_PORT)
#   ORDERPIPE_CACHE                jar cache root (default ~/.cache/orderpipe)
#   KAFKA_HEAP_OPTS, KAFKA_JVM_OPTS  JVM flags of each broker (defaults below)
#   KAFKA_READY_TIMEOUT=120        seconds to wait for the cluster to be ready
#
# Broker settings shared with docker-compose.yml are in server.properties
# beside this script; this script adds only what is per node or per cluster
# size. Each broker logs (WARN and up, log4j2.xml) to <data>/node-N/broker.log.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prog=deploy/kafka/kafka.sh

kafka_version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml")
[[ -n $kafka_version ]] || { echo "kafka: no <kafka.version> in $here/pom.xml" >&2; exit 1; }
cache=${ORDERPIPE_CACHE:-${HOME:-/tmp}/.cache/orderpipe}/kafka-$kafka_version
lib=$cache/lib

nodes=${KAFKA_NODES:-1}
base_port=${KAFKA_BASE_PORT:-9092}
ctrl_base_port=${KAFKA_CONTROLLER_BASE_PORT:-19092}
state_dir=${KAFKA_STATE_DIR:-/tmp/orderpipe-kafka-$base_port}
ready_timeout=${KAFKA_READY_TIMEOUT:-120}
stop_timeout=20
heap_opts=${KAFKA_HEAP_OPTS:--Xms128m -Xmx384m}
# 2 cores for up to 3 brokers plus the tests: the serial collector (no GC
# threads), C1 only (most of a broker's startup CPU is C2 compiling code it
# runs a few times), no hsperfdata files.
jvm_opts=${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:-UsePerfData -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true}

for v in nodes base_port ctrl_base_port ready_timeout; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "kafka: $v=${!v} is not a number" >&2; exit 2; }
done
((nodes >= 1)) || { echo "kafka: KAFKA_NODES must be at least 1" >&2; exit 2; }

java=${JAVA_HOME:+$JAVA_HOME/bin/}java

log() { echo "kafka: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- fetch ----

# The stamp holds a hash of the pom: a changed pom fetches again.
pom_sum() { sha256sum "$here/pom.xml" | cut -d' ' -f1; }

fetch() {
  local stamp=$cache/complete want
  want=$(pom_sum)
  [[ -f $stamp && $(cat "$stamp") == "$want" && -d $lib ]] && return 0
  mkdir -p "$cache"
  # One fetch at a time (parallel test packages, CI); the second waits and
  # then finds the cache complete.
  exec 9>"$cache/.lock"
  flock 9
  if [[ -f $stamp && $(cat "$stamp") == "$want" && -d $lib ]]; then
    exec 9>&-
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found: install Maven (Debian: apt-get install maven)"
  log "fetching Apache Kafka $kafka_version jars with Maven into $lib"
  local t0=$SECONDS tmp=$cache/lib.tmp
  rm -rf "$tmp" "$stamp"
  local out
  # (Debian's Maven 3.8 prints colour resets even with -B: strip them.)
  if ! out=$(mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DoutputDirectory="$tmp" 2>&1); then
    # shellcheck disable=SC2001 # a regex
    sed 's/\x1b\[[0-9;]*m//g' <<<"$out" >&2
    die "mvn failed to fetch the Kafka jars"
  fi
  [[ -n $(compgen -G "$tmp/kafka_2.13-$kafka_version.jar") ]] || die "mvn fetched no kafka_2.13-$kafka_version.jar"
  rm -rf "$lib"
  mv "$tmp" "$lib"
  echo "$want" >"$stamp"
  log "fetched $(find "$lib" -name '*.jar' | wc -l) jars in $((SECONDS - t0))s"
  exec 9>&-
}

# ------------------------------------------------------------ properties ----

port_of() { echo $((base_port + $1 - 1)); }
ctrl_port_of() { echo $((ctrl_base_port + $1 - 1)); }

bootstrap() {
  local i list=
  for ((i = 1; i <= nodes; i++)); do list+=${list:+,}127.0.0.1:$(port_of "$i"); done
  echo "$list"
}

# props NODE DATADIR: the base file, then what depends on the cluster's size,
# then what is per node (later keys win).
props() {
  local i=$1 data=$2 voters='' j rf isr
  for ((j = 1; j <= nodes; j++)); do voters+=${voters:+,}$j@127.0.0.1:$(ctrl_port_of "$j"); done
  rf=$((nodes < 3 ? nodes : 3))
  isr=$((nodes >= 3 ? 2 : 1))
  cat "$here/server.properties"
  cat <<EOF

# ---- added by $prog: a cluster of $nodes node(s) ----
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr

# ---- added by $prog: node $i ----
node.id=$i
listeners=PLAINTEXT://127.0.0.1:$(port_of "$i"),CONTROLLER://127.0.0.1:$(ctrl_port_of "$i")
advertised.listeners=PLAINTEXT://127.0.0.1:$(port_of "$i")
controller.quorum.voters=$voters
log.dirs=$data/node-$i/data
EOF
}

# ------------------------------------------------------------- probing ----

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# metadata_brokers PORT: the node ids of the live (unfenced) brokers that the
# broker on PORT reports in a Metadata response, space-separated. A KRaft
# broker processes requests only once it has caught up with the metadata log
# and been unfenced, so an answer listing all N ids means the cluster is
# ready. Metadata v4 (no topics) over bash's /dev/tcp: no JVM to start.
metadata_brokers() {
  local port=$1 out
  # shellcheck disable=SC2016 # expanded by the inner bash
  out=$(timeout 3 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    # size 20 | api_key 3 (Metadata) | version 4 | correlation id 1 |
    # client id "probe" | topics: empty array | allow_auto_topic_creation false
    printf "\x00\x00\x00\x14\x00\x03\x00\x04\x00\x00\x00\x01\x00\x05probe\x00\x00\x00\x00\x00" >&3
    size=$(head -c 4 <&3 | od -An -tu4 --endian=big | tr -d " ")
    [[ $size =~ ^[0-9]+$ ]] && ((size > 0 && size < 1048576)) || exit 1
    head -c "$size" <&3 | od -An -v -tu1
  ' _ "$port" 2>/dev/null) || return 1
  # shellcheck disable=SC2206 # od's decimal bytes, split on whitespace
  local -a b=($out)
  # correlation id (4) | throttle (4) | brokers: count (4), then per broker
  # node_id (4) host (2+n) port (4) rack (2+n, -1 = null)
  ((${#b[@]} >= 12)) || return 1
  ((b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 1)) || return 1
  local p=8 n k ids='' hl rl
  n=$(((b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3]))
  p=$((p + 4))
  ((n >= 0 && n < 1000)) || return 1
  for ((k = 0; k < n; k++)); do
    ((p + 6 <= ${#b[@]})) || return 1
    ids+="${ids:+ }$(((b[p] << 24) | (b[p + 1] << 16) | (b[p + 2] << 8) | b[p + 3]))"
    hl=$(((b[p + 4] << 8) | b[p + 5]))
    p=$((p + 6 + hl + 4))
    ((p + 2 <= ${#b[@]})) || return 1
    rl=$(((b[p] << 8) | b[p + 1]))
    ((rl == 65535)) && rl=0
    p=$((p + 2 + rl))
  done
  echo "$ids"
}

# cluster_ready: every node answers Metadata and sees all nodes.
cluster_ready() {
  local i got
  for ((i = 1; i <= nodes; i++)); do
    got=$(metadata_brokers "$(port_of "$i")") || return 1
    [[ $(wc -w <<<"$got") -eq $nodes ]] || return 1
  done
}

# ------------------------------------------------------------- brokers ----

# prepare DATADIR: per-node properties, storage formatted with one cluster id
# (in parallel: a JVM start each). A KAFKA_DATA_DIR used before is reused as
# it is, if it holds a cluster of the same size.
fmt_pids=()
prepare() {
  local data=$1 i cid rc=0 formatted=0
  for ((i = 1; i <= nodes; i++)); do
    [[ -f $data/node-$i/data/meta.properties ]] && formatted=$((formatted + 1))
  done
  if ((formatted > 0 && formatted < nodes)) || [[ -d $data/node-$((nodes + 1))/data ]]; then
    log "$data holds a cluster of another size than KAFKA_NODES=$nodes: remove it or use another KAFKA_DATA_DIR"
    return 1
  fi
  # A cluster id is 16 random bytes in URL-safe base64, but not one starting
  # with "-": the formatter would take it for an option and fail (1 format
  # in 64 did). Kafka's own Uuid.randomUuid skips those too.
  cid=-
  while [[ $cid == -* ]]; do
    cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
  done
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p "$data/node-$i/data"
    props "$i" "$data" >"$data/node-$i/server.properties"
    [[ -f $data/node-$i/data/meta.properties ]] && continue
    # The formatter needs no big heap or optimizing compiler either.
    "$java" -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData \
      "-Dlog4j2.configurationFile=$here/log4j2.xml" -cp "$lib/*" \
      kafka.tools.StorageTool format --cluster-id "$cid" \
      --config "$data/node-$i/server.properties" </dev/null >"$data/node-$i/format.log" 2>&1 8>&- 9>&- &
    fmt_pids+=($!)
  done
  for i in "${!fmt_pids[@]}"; do
    if ! wait "${fmt_pids[$i]}"; then
      rc=1
    fi
  done
  fmt_pids=()
  if ((rc != 0)); then
    for ((i = 1; i <= nodes; i++)); do
      [[ -s $data/node-$i/format.log ]] && { log "node $i storage format:"; tail -n 20 "$data/node-$i/format.log" >&2; }
    done
    return 1
  fi
}

# check_ports: none of the cluster's ports is taken already.
check_ports() {
  local i p
  for ((i = 1; i <= nodes; i++)); do
    for p in "$(port_of "$i")" "$(ctrl_port_of "$i")"; do
      if port_open "$p"; then
        die "127.0.0.1:$p is already in use (another Kafka? \`$prog stop\`, or set KAFKA_BASE_PORT / KAFKA_CONTROLLER_BASE_PORT)"
      fi
    done
  done
}

# broker_cmd: sets cmd to a broker's JVM command line, less its properties file.
broker_cmd() {
  # shellcheck disable=SC2206 # the option strings are word lists
  cmd=("$java" $heap_opts $jvm_opts "-Dlog4j2.configurationFile=$here/log4j2.xml" -cp "$lib/*" kafka.Kafka)
}

# launch DATADIR DETACH: start every node; sets the pids array.
pids=()
launch() {
  local data=$1 detach=$2 i
  local -a cmd
  broker_cmd
  for ((i = 1; i <= nodes; i++)); do
    local f=$data/node-$i/broker.log
    # stdin/stdout/stderr away from the caller's (a test reading `start`'s
    # stdout must see EOF), and not the lock fds 8, 9.
    if [[ $detach == yes ]]; then
      # Its own session: no Ctrl-C or hangup meant for the caller reaches it.
      setsid "${cmd[@]}" "$data/node-$i/server.properties" </dev/null >>"$f" 2>&1 8>&- 9>&- &
    else
      "${cmd[@]}" "$data/node-$i/server.properties" </dev/null >>"$f" 2>&1 8>&- 9>&- &
    fi
    pids+=($!)
    log "node $i: 127.0.0.1:$(port_of "$i") (controller :$(ctrl_port_of "$i")), pid $!, log $f"
  done
}

# dead_node: the number of the first node whose process is gone, if any.
dead_node() {
  local i
  for i in "${!pids[@]}"; do
    kill -0 "${pids[$i]}" 2>/dev/null || { echo $((i + 1)); return 0; }
  done
  return 1
}

report_dead() {
  local data=$1 i=$2 pid=${pids[$(($2 - 1))]} st=0
  wait "$pid" 2>/dev/null || st=$?
  log "node $i (pid $pid) died (exit status $st); the end of $data/node-$i/broker.log:"
  tail -n 30 "$data/node-$i/broker.log" >&2 || true
}

# wait_ready DATADIR: until every node answers, a node dies, or the timeout.
wait_ready() {
  local data=$1 t0=$SECONDS i
  while ! cluster_ready; do
    if i=$(dead_node); then
      report_dead "$data" "$i"
      return 1
    fi
    if ((SECONDS - t0 >= ready_timeout)); then
      log "not ready after ${ready_timeout}s (KAFKA_READY_TIMEOUT); the end of each log:"
      for ((i = 1; i <= nodes; i++)); do
        log "--- node $i: $data/node-$i/broker.log"
        tail -n 15 "$data/node-$i/broker.log" >&2 || true
      done
      return 1
    fi
    sleep 0.3
  done
}

# kill_all PID...: SIGTERM (a controlled shutdown), then SIGKILL what is left
# after stop_timeout seconds. Works for processes that are not our children.
kill_all() {
  local p left deadline=$((SECONDS + stop_timeout))
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  while :; do
    left=()
    for p in "$@"; do kill -0 "$p" 2>/dev/null && left+=("$p"); done
    ((${#left[@]} == 0)) && return 0
    if ((SECONDS >= deadline)); then
      log "still running after ${stop_timeout}s, killing: ${left[*]}"
      for p in "${left[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
      sleep 0.2
      return 0
    fi
    sleep 0.2
  done
}

new_data_dir() {
  if [[ -n ${KAFKA_DATA_DIR:-} ]]; then
    mkdir -p "$KAFKA_DATA_DIR"
    (cd "$KAFKA_DATA_DIR" && pwd)
  else
    mktemp -d "${TMPDIR:-/tmp}/orderpipe-kafka.XXXXXX"
  fi
}

# ----------------------------------------------------------------- run ----

cmd_run() {
  fetch
  check_ports
  data=$(new_data_dir)
  local stopping=
  cleanup() {
    # No second signal interrupts the stop; and with a Ctrl-C the reader of
    # our stderr (`make kafka | tee`) may be gone: a failed write must not
    # end the script before its brokers.
    trap '' INT TERM HUP PIPE
    set +e
    [[ -n $stopping ]] && return
    stopping=1
    ((${#fmt_pids[@]})) && kill_all "${fmt_pids[@]}"
    if ((${#pids[@]})); then
      log "stopping ${#pids[@]} node(s)"
      kill_all "${pids[@]}"
    fi
    wait 2>/dev/null
    if [[ -z ${KAFKA_DATA_DIR:-} ]]; then
      rm -rf "$data"
    else
      log "data kept in $data"
    fi
  }
  # A stop asked for (Ctrl-C, SIGTERM) that went well exits 0, as `make run` does.
  trap 'cleanup; exit 0' INT TERM HUP
  trap cleanup EXIT

  local t0=$SECONDS
  log "$nodes node(s), data in $data"
  prepare "$data" || exit 1
  launch "$data" no
  wait_ready "$data" || exit 1
  log "ready in $((SECONDS - t0))s; Ctrl-C stops"
  echo "kafka: ready on $(bootstrap)"

  # In the foreground until a signal or a node's death.
  local i
  while :; do
    wait -n "${pids[@]}" || true
    if i=$(dead_node); then
      report_dead "$data" "$i"
      exit 1
    fi
  done
}

# ----------------------------------------------------------- start/stop ----

state_lock() {
  mkdir -p "$state_dir"
  exec 8>"$state_dir/lock"
  flock 8
}

# running: start's cluster is up; its pids are alive.
running() {
  [[ -f $state_dir/pids ]] || return 1
  local p
  while read -r p; do
    [[ -n $p ]] || continue
    kill -0 "$p" 2>/dev/null || return 1
    grep -qa kafka.Kafka "/proc/$p/cmdline" 2>/dev/null || return 1
  done <"$state_dir/pids"
}

stop_recorded() {
  [[ -f $state_dir/pids ]] || return 0
  local -a ps=()
  local p
  while read -r p; do
    [[ -n $p ]] || continue
    # Only our brokers (a stale pid may have been reused).
    grep -qa kafka.Kafka "/proc/$p/cmdline" 2>/dev/null && ps+=("$p")
  done <"$state_dir/pids"
  if ((${#ps[@]})); then
    log "stopping ${#ps[@]} node(s): ${ps[*]}"
    kill_all "${ps[@]}"
  fi
  local d
  d=$(cat "$state_dir/data_dir" 2>/dev/null || true)
  if [[ -n $d && $(cat "$state_dir/remove_data" 2>/dev/null) == yes ]]; then
    rm -rf "$d"
  elif [[ -n $d ]]; then
    log "data kept in $d"
  fi
  rm -f "$state_dir/pids" "$state_dir/data_dir" "$state_dir/remove_data" "$state_dir/bootstrap" "$state_dir/nodes"
}

cmd_start() {
  fetch
  state_lock
  if running; then
    if [[ $(cat "$state_dir/bootstrap") == "$(bootstrap)" ]] && cluster_ready; then
      log "already running (state in $state_dir)"
      bootstrap
      return 0
    fi
    die "another cluster runs with state in $state_dir ($(cat "$state_dir/bootstrap")); \`$prog stop\` it first"
  fi
  stop_recorded # a crashed one's leftovers
  check_ports
  local t0=$SECONDS remove=no
  data=$(new_data_dir)
  [[ -z ${KAFKA_DATA_DIR:-} ]] && remove=yes
  log "$nodes node(s), data in $data"
  fail() {
    trap '' INT TERM HUP
    ((${#fmt_pids[@]})) && kill_all "${fmt_pids[@]}"
    ((${#pids[@]})) && kill_all "${pids[@]}"
    [[ $remove == yes ]] && rm -rf "$data"
    rm -rf "$state_dir"
    exit 1
  }
  trap fail INT TERM HUP
  prepare "$data" || fail
  launch "$data" yes
  printf '%s\n' "${pids[@]}" >"$state_dir/pids"
  echo "$data" >"$state_dir/data_dir"
  echo "$remove" >"$state_dir/remove_data"
  echo "$nodes" >"$state_dir/nodes"
  bootstrap >"$state_dir/bootstrap"
  wait_ready "$data" || fail
  trap - INT TERM HUP
  log "ready in $((SECONDS - t0))s; stop with: $prog stop (state in $state_dir)"
  bootstrap
}

cmd_stop() {
  [[ -d $state_dir ]] || { log "nothing recorded in $state_dir"; return 0; }
  state_lock
  stop_recorded
  exec 8>&-
  rm -rf "$state_dir"
}

# ------------------------------------------------------- prepare/node ----

cmd_prepare() {
  if (($# != 1)) || [[ -z $1 ]]; then
    die "usage: $prog prepare DATADIR"
  fi
  fetch
  mkdir -p "$1"
  local data
  data=$(cd "$1" && pwd)
  prepare "$data" || exit 1
  log "$nodes node(s) prepared in $data; start each with: $prog node $data N"
  bootstrap
}

cmd_node() {
  if (($# != 2)) || [[ -z $1 || ! $2 =~ ^[0-9]+$ ]]; then
    die "usage: $prog node DATADIR NODE"
  fi
  local data=$1 i=$2 f
  f=$data/node-$i/server.properties
  if [[ ! -f $f || ! -f $data/node-$i/data/meta.properties ]]; then
    die "$data/node-$i is not prepared: run \`$prog prepare $data\` first"
  fi
  [[ -d $lib ]] || die "no Kafka jars in $lib: run \`$prog fetch\` first"
  local -a cmd
  broker_cmd
  exec "${cmd[@]}" "$f" </dev/null
}

cmd_status() {
  [[ -f $state_dir/nodes ]] && nodes=$(cat "$state_dir/nodes")
  if running && cluster_ready; then
    cat "$state_dir/bootstrap"
  else
    log "not running (state dir $state_dir)"
    return 1
  fi
}

case ${1:-} in
fetch) fetch ;;
run) cmd_run ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
prepare)
  shift
  cmd_prepare "$@"
  ;;
node)
  shift
  cmd_node "$@"
  ;;
props)
  if ! [[ ${2:-} =~ ^[0-9]+$ ]] || (($2 < 1 || $2 > nodes)); then
    die "usage: $prog props NODE (1..KAFKA_NODES=$nodes)"
  fi
  props "$2" "${KAFKA_DATA_DIR:-<data>}"
  ;;
java)
  shift
  (($#)) || die "usage: $prog java CLASS [ARGS...]"
  fetch
  exec "$java" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData \
    "-Dlog4j2.configurationFile=$here/log4j2.xml" -cp "$lib/*" "$@"
  ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
