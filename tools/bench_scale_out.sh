#!/usr/bin/env bash
# Scale-out benchmark: the mixed load of tests/integration/test_scale_out.c
# (WhoAmI, GetSummary, ListWebhookSubscriptions, CreateTransfers batches of
# 32, CreateCustomer + CreateSubscription, Login; 4 client threads through
# 2 gateways and 2 brokers) against stacks of 1, 2 and 3 replicas of every
# service. For each shape: requests per second and CPU per process group
# over the warm phase (no kills), then the error window of each kill -9
# (a broker, one replica of each service, a gateway; stack.sh restart).
# Figures only, no thresholds: docs/performance.md, "Scale-out".
#
#   tools/bench_scale_out.sh [--bin BUILD_DIR] [--work DIR] [--replicas "1 2 3"] [--warm-s S]
#
# Each shape gets a stack of its own in WORK/stack (started, then stopped);
# the test program's whole output goes to WORK/replicas-N.log.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$ROOT/build
WORK=${TMPDIR:-/tmp}/keelson-bench-scale
REPLICAS="1 2 3"
WARM_S=12 # the load the figures are read over; the kills take some 40 s more
RUN_TIMEOUT_S=300

while [ $# -gt 0 ]; do
        case "$1" in
        --bin) BIN=$(cd "${2:?}" && pwd); shift 2 ;;
        --work) WORK=${2:?}; shift 2 ;;
        --replicas) REPLICAS=${2:?}; shift 2 ;;
        --warm-s) WARM_S=${2:?}; shift 2 ;;
        -h | --help) sed -n '2,/^set -euo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option: $1" >&2; exit 2 ;;
        esac
done
TEST=$BIN/tests/it_test_scale_out
STACK_SH=$ROOT/deploy/local/stack.sh
[ -x "$TEST" ] || { echo "$TEST is missing: ninja -C $BIN it_test_scale_out" >&2; exit 1; }
mkdir -p "$WORK"
STACK=$WORK/stack

cleanup() { "$STACK_SH" stop --dir "$STACK" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The gateways' rate limits far above the load, as the test suite's stack has them.
export KEELSON_GATEWAY_RATE_AUTH=100000:100000/1s KEELSON_GATEWAY_RATE_API=100000:100000/1s \
        KEELSON_GATEWAY_RATE_RESOLVE=100000:100000/1s

run_shape() {
        local n=$1 log=$WORK/replicas-$1.log
        "$STACK_SH" start --dir "$STACK" --bin "$BIN" --free-ports --unsafe-fast \
                --broker-replicas 2 --gateway-replicas 2 --auth-replicas "$n" \
                --billing-replicas "$n" --ledger-replicas "$n" --summary-replicas "$n" \
                --webhook-replicas "$n" >"$log" 2>&1
        local rc=0
        KEELSON_IT_STACK=$STACK KEELSON_SCALE_STACK=$STACK KEELSON_SCALE_WARM_S=$WARM_S \
                timeout "$RUN_TIMEOUT_S" "$TEST" >>"$log" 2>&1 || rc=$?
        "$STACK_SH" stop --dir "$STACK" >>"$log" 2>&1 || true
        [ $rc = 0 ] || echo "replicas $n: the run failed (exit $rc), see $log" >&2
}

# One row of the table from a run's "scale_out:" lines.
row() {
        local n=$1 log=$WORK/replicas-$1.log
        awk -v n="$n" '
                /scale_out: warm/ { rps = $7; tps = $9 }
                /scale_out: cpu/ { cpu[$3] = $4 }
                /scale_out: window/ { win = win sprintf(" %s=%.1f", $3, $4 / 1000) }
                END {
                        printf "%8s %8s %9s %6.0f %6.0f %6.0f %6.0f %6.0f %6.0f %6.0f  %s\n", n, rps, tps,
                                cpu["auth"], cpu["billing"], cpu["ledger"], cpu["summary"],
                                cpu["webhook"], cpu["broker"], cpu["gateway"], win
                }' "$log"
}

echo "keelson scale-out: $(nproc) CPUs, warm phase ${WARM_S} s, 4 client threads, 2 gateways, 2 brokers, PostgreSQL --unsafe-fast"
for n in $REPLICAS; do
        run_shape "$n"
done
echo
echo "CPU: ms used by each process group over the warm phase; windows: kill -9 to the last failed attempt, s"
printf '%8s %8s %9s %6s %6s %6s %6s %6s %6s %6s  %s\n' replicas "req/s" "xfers/s" auth billing \
        ledger summary webhook broker gateway "error windows (s)"
for n in $REPLICAS; do
        row "$n"
done
