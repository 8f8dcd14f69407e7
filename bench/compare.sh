#!/usr/bin/env bash
# Drover beside its peers, on the same PostgreSQL, in the same run (BENCHMARKS.md).
#
# Builds drover-bench in release, runs it, then runs the peers' benchmark scripts, which live
# outside this repository in PEER_SRC (pgbench reference scripts, graphile-worker and pg-boss from npm, awa and
# River for Rust from crates.io) with the same job count, then Drover's PostgreSQL workloads
# once more, and prints Drover's figures (medians over both of its runs) as ratios to the best
# peer's. See BENCHMARKS.md.
#
#   bash bench/compare.sh            # full: N=50000 jobs, REPS=3 (about 40 min on 2 cores)
#   bash bench/compare.sh quick      # smoke: N=2000, REPS=1 (a few minutes once peers are built)
#   N=20000 bash bench/compare.sh    # other job count (Drover and peers use the same N; 20,000
#                                    # is the peers' own default)
#   PEERS_JSONL=bench/results/<run>/peers.jsonl bash bench/compare.sh   # reuse a peers run
#
# Env: PGHOST PGPORT PGUSER PGPASSWORD (default 127.0.0.1 5432 postgres postgres);
#      N (50000: the reference configuration's 50,000 no-op jobs), REPS (3), PEERS (run-all.sh's list, default all: "floor gw pgboss awa river");
#      PGB_C (8: pgbench clients, as many as Drover's producers), PGB_T (pgbench seconds);
#      PEER_SRC (the peers' scripts; default: see below), PEERS_DIR (bench/.peers: the peers' copy,
#      kept between runs so npm packages and Rust builds are reused);
#      PEERS_JSONL (a peers results file to reuse instead of running the peers);
#      SKIP_PEERS=1 (Drover only); AFTER=0 (no second Drover run after the peers);
#      DELETE=0 (no run of the processing workload with --delete-succeeded);
#      DROVER_ARGS (extra drover-bench options);
#      LAT_RATE (50: jobs/s of drover-bench's latency workload and of the commit-latency probe).
# Results: bench/results/<UTC time>/ (gitignored): drover.json, drover-delete.json (processing
#          with succeeded jobs deleted, scenarios process_*_delete), drover-after.json (the run
#          after the peers), drover.jsonl (every run's lines), peers.jsonl,
#          floor-latency.ms (the commit-latency probe, ms per transaction), comparison.txt, and
#          the logs.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"

export PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres} PGPASSWORD=${PGPASSWORD:-postgres}
MODE=${1:-full}
FAILED=""
N=${N:-50000}; REPS=${REPS:-3}; PGB_C=${PGB_C:-8}
LAT_JOBS=${LAT_JOBS:-1000}; LAT_RATE=${LAT_RATE:-50}
PEER_SRC=${PEER_SRC:-$REPO/../shared/bench}
PEERS_DIR=${PEERS_DIR:-$REPO/bench/.peers}
RUN_ALL_ARGS=()
if [[ $MODE == quick ]]; then
  N=2000; REPS=1; LAT_JOBS=100; RUN_ALL_ARGS=(quick)   # run-all.sh quick: N=2000, REPS=1
elif [[ $MODE != full ]]; then
  echo "usage: bash bench/compare.sh [full|quick]" >&2; exit 2
fi

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
OUT=$REPO/bench/results/$STAMP
mkdir -p "$OUT"
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

read -r LOAD1 _ < /proc/loadavg
if awk -v l="$LOAD1" 'BEGIN { exit !(l >= 1.0) }'; then
  log "WARNING: load average $LOAD1 >= 1: other work is using the CPU; figures will be noisy"
fi
{
  echo "# $(date -Is) $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# drover $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo ' (modified tree)') mode=$MODE N=$N REPS=$REPS PGB_C=$PGB_C LAT_JOBS=$LAT_JOBS"
} | tee "$OUT/env.txt" >&2

# ---------- Drover ----------
log "cargo build --release -p drover-bench"
cargo build --release --quiet -p drover-bench
# Flush what the build wrote (hundreds of MB under target/) before measuring: its writeback
# would otherwise compete with PostgreSQL's fsyncs during the first workloads.
sync
DB_URL="postgres://$PGUSER:$PGPASSWORD@$PGHOST:$PGPORT/drover_bench"
# drover_bench NAME NOTE [options]: one drover-bench run with this run's N, repetitions,
# latency and producer settings, writing $OUT/NAME.json and $OUT/NAME.txt (its output).
drover_bench() {
  local name=$1 note=$2; shift 2
  # shellcheck disable=SC2086  # DROVER_ARGS is a list of options
  DROVER_BENCH_DATABASE_URL=$DB_URL target/release/drover-bench "$@" \
    --jobs "$N" --reps "$REPS" --latency-jobs "$LAT_JOBS" --latency-rate "$LAT_RATE" --producers "$PGB_C" \
    --out "$OUT/$name.json" --note "$(sed -n 2p "$OUT/env.txt" | sed 's/^# //')$note" ${DROVER_ARGS:-} \
    | tee "$OUT/$name.txt"
}
log "drover-bench: N=$N REPS=$REPS"
drover_bench drover "" || { FAILED="drover-bench"; log "drover-bench reported a failure (see above)"; }
grep '^{' "$OUT/drover.txt" > "$OUT/drover.jsonl" || true
[[ -f $OUT/drover.json ]] || { echo "drover-bench wrote no results file" >&2; exit 1; }
# Drover keeps every succeeded job until retention prunes it (a finish writes a new row version
# and its index entries); graphile-worker deletes each completed job. The opt-in
# --delete-succeeded (StoreConfig::succeeded_jobs = Delete) does the same, so it is measured
# too, in rows of its own (config "..., succeeded jobs deleted"): the default rows stay the
# headline.
DELETE_FILES=()
if [[ ${DELETE:-1} != 0 ]]; then
  log "drover-bench, processing with --delete-succeeded: N=$N REPS=$REPS"
  if drover_bench drover-delete " (--delete-succeeded)" --store postgres --workload process --delete-succeeded; then
    grep '^{' "$OUT/drover-delete.txt" >> "$OUT/drover.jsonl" || true
    DELETE_FILES=("$OUT/drover-delete.json")
  else
    FAILED="${FAILED:+$FAILED, }drover-bench --delete-succeeded"; log "drover-bench --delete-succeeded reported a failure (see above)"
  fi
fi

# ---------- commit-latency floor ----------
# Drover's enqueue-to-start path holds two durable commits (the enqueue's, then the claim's),
# and no queue that starts a job only once its claim is durable can start it sooner than its
# enqueue commits. So the latency table is read beside what one commit costs on this disk: a
# one-row INSERT per transaction, 1 client, at the latency workload's rate and count (pgbench
# -R, per-transaction log). Its p50/p99 are printed under the table as the machine's floor.
# A reference only: if it fails, the run goes on without it.
floor_latency() {
  local db=bench_floor_latency
  PGOPTIONS="-c client_min_messages=warning" psql -q -d postgres \
    -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" > /dev/null || return 1
  psql -q -d "$db" -c "CREATE TABLE probe (id bigserial PRIMARY KEY, v int)" > /dev/null || return 1
  echo "INSERT INTO probe (v) VALUES (1);" > "$OUT/floor-latency.sql"
  (cd "$OUT" && pgbench -n -f floor-latency.sql -c 1 -R "$LAT_RATE" -t "$LAT_JOBS" \
     -l --log-prefix=floor-latency "$db" > floor-latency.txt 2>&1) || return 1
  # Log lines: client transaction latency_us script epoch_s epoch_us schedule_lag_us; under -R
  # the latency counts from the scheduled start, so the lag is taken off (Drover's latency
  # counts from the enqueue call). One latency in ms per line; compare.py takes percentiles.
  local logs=("$OUT"/floor-latency.[0-9]*)
  [[ -f ${logs[0]} ]] || return 1
  awk '{print ($3 - $7) / 1000}' "${logs[@]}" > "$OUT/floor-latency.ms" || return 1
  [[ -s $OUT/floor-latency.ms ]] || return 1
  rm -f "${logs[@]}"
  psql -q -d postgres -c "DROP DATABASE IF EXISTS $db" > /dev/null || true
}
if command -v pgbench > /dev/null; then
  log "commit-latency floor: pgbench 1-row INSERT, c=1, $LAT_JOBS transactions at $LAT_RATE/s"
  floor_latency || { rm -f "$OUT/floor-latency.ms"
    log "the commit-latency probe failed (see $OUT/floor-latency.txt); going on without it"; }
else
  log "pgbench not found: no commit-latency floor in this run"
fi

# ---------- peers ----------
if [[ -n ${PEERS_JSONL:-} ]]; then
  log "reusing peers results $PEERS_JSONL (not re-running the peers)"
  cp "$PEERS_JSONL" "$OUT/peers.jsonl"
elif [[ -z ${SKIP_PEERS:-} ]]; then
  if [[ ! -f $PEER_SRC/run-all.sh ]]; then
    echo "peer scripts not found at $PEER_SRC (set PEER_SRC)" >&2; exit 1
  fi
  # Refresh the copy file by file (only what changed), keeping node_modules and Rust builds.
  # Each Rust peer gets an empty [workspace] table so cargo does not take it for a member of
  # the Drover workspace it sits in.
  mkdir -p "$PEERS_DIR"
  STAGE=$(mktemp -d); trap 'rm -rf "$STAGE"' EXIT
  cp -R "$PEER_SRC/." "$STAGE/"; chmod -R u+w "$STAGE"
  for manifest in "$STAGE"/rust/Cargo.toml "$STAGE"/rust-river/Cargo.toml; do
    [[ -f $manifest ]] && printf '\n# Added by bench/compare.sh: keep this peer out of the Drover workspace.\n[workspace]\n' >> "$manifest"
  done
  (cd "$STAGE" && find . -type f) | while read -r f; do
    if ! cmp -s "$STAGE/$f" "$PEERS_DIR/$f"; then mkdir -p "$(dirname "$PEERS_DIR/$f")"; cp "$STAGE/$f" "$PEERS_DIR/$f"; fi
  done
  mkdir -p "$PEERS_DIR/results"
  before=$(ls "$PEERS_DIR"/results/*.jsonl 2>/dev/null || true)
  log "peers: run-all.sh ${RUN_ALL_ARGS[*]:-} (N=$N REPS=$REPS PGB_C=$PGB_C; first use installs npm packages and builds the Rust peers)"
  (cd "$PEERS_DIR" && N=$N REPS=$REPS PGB_C=$PGB_C bash run-all.sh "${RUN_ALL_ARGS[@]}") 2>&1 | tee "$OUT/peers.txt" \
    || { FAILED="${FAILED:+$FAILED, }peers"; log "the peers' run-all.sh failed (see above); comparing what it wrote"; }
  after=$(ls -t "$PEERS_DIR"/results/*.jsonl 2>/dev/null | head -1 || true)
  if [[ -z $after ]] || grep -qxF "$after" <<<"$before"; then
    echo "the peers' run wrote no results file" >&2; exit 1
  fi
  cp "$after" "$OUT/peers.jsonl"; cp "$after.env" "$OUT/peers.env" 2>/dev/null || true
  PEERS_RAN=1
fi

# ---------- Drover again, after the peers ----------
# The peers take about half an hour, and this machine's speed drifts by a third within that
# (BENCHMARKS.md, the 21:05 run: Drover measured in a slow quarter of an hour, the peers in a
# fast one). So when the peers were run here, Drover's PostgreSQL workloads run once more after
# them, and compare.py takes Drover's medians over both runs' repetitions: Drover is then
# sampled at both ends of the peers' window rather than only before it. AFTER=0 skips this.
DROVER_FILES=("$OUT/drover.json" "${DELETE_FILES[@]}")
if [[ -n ${PEERS_RAN:-} && ${AFTER:-1} != 0 ]]; then
  log "drover-bench again after the peers (PostgreSQL workloads): N=$N REPS=$REPS"
  if drover_bench drover-after " (after the peers)" --store postgres; then
    grep '^{' "$OUT/drover-after.txt" >> "$OUT/drover.jsonl" || true
    DROVER_FILES+=("$OUT/drover-after.json")
  else
    FAILED="${FAILED:+$FAILED, }drover-bench after the peers"; log "drover-bench after the peers reported a failure (see above)"
  fi
fi

# ---------- comparison ----------
echo
PEERS_FILE=""; [[ -f $OUT/peers.jsonl ]] && PEERS_FILE=$OUT/peers.jsonl
FLOOR_ARGS=(); [[ -s $OUT/floor-latency.ms ]] && FLOOR_ARGS=(--floor-latency "$OUT/floor-latency.ms")
python3 bench/compare.py --clients "$PGB_C" "${FLOOR_ARGS[@]}" "$PEERS_FILE" "${DROVER_FILES[@]}" | tee "$OUT/comparison.txt"
if [[ -f $OUT/peers.jsonl && -f $PEERS_DIR/summarize.py ]]; then
  # Everything in one list too, with the peers' own summarizer (Drover lines carry peer/config).
  cat "$OUT/peers.jsonl" "$OUT/drover.jsonl" > "$OUT/combined.jsonl"
  echo; python3 "$PEERS_DIR/summarize.py" "$OUT/combined.jsonl" | tee "$OUT/combined.txt"
fi
echo
echo "results: $OUT"
if [[ -n ${FAILED:-} ]]; then echo "FAILED: $FAILED (partial results)" >&2; exit 1; fi
