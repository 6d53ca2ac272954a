#!/usr/bin/env bash
# bench_outbox_backlog.sh: how long billing's outbox relay takes to publish a
# backlog of events that arrives at once, as after an outage (no broker, a
# stopped relay), against one read of the same backlog by PostgreSQL.
#
#   tools/bench_outbox_backlog.sh [BUILD_DIR (build)] [EVENTS (200000)]
#
# It starts a stack of its own (deploy/local/stack.sh, free ports, one
# billing replica, --unsafe-fast) and runs VACUUM ANALYZE on the empty
# queue, so that the relay's statements, planned again after it, are
# planned on a queue PostgreSQL knows to be small: the state of a queue a
# relay keeps empty. Then EVENTS events go into billing.outbox in one
# statement (its trigger queues their ids), and the script polls the queue
# every 0.2 s until it is empty. The baseline, in the same run, before the
# backlog is published: one SELECT that reads every queued event's row
# through the queue (what the relay's claims read, in one statement).
# Prints both times, events/s and the ratio. Needs psql and bc.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
EVENTS=${2:-200000}
STACK_SH=$ROOT/deploy/local/stack.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keelson-bench-backlog.XXXXXX")
LIMIT_S=900

die() {
        echo "bench_outbox_backlog: $*" >&2
        exit 1
}

for tool in psql bc; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done
if ! [[ $EVENTS =~ ^[0-9]+$ ]] || ((EVENTS < 1000 || EVENTS > 5000000)); then
        die "EVENTS must be a whole number from 1000 to 5000000"
fi

cleanup() {
        "$STACK_SH" stop --dir "$WORK/stack" >/dev/null 2>&1 || true
        rm -rf "$WORK"
}
trap cleanup EXIT

"$STACK_SH" start --dir "$WORK/stack" --bin "$BUILD" --free-ports --unsafe-fast \
        >"$WORK/start.log" 2>&1 || {
        tail -n 20 "$WORK/start.log" >&2
        die "the stack did not start"
}
# shellcheck disable=SC1091
. "$WORK/stack/env"
sql() { psql "$KEELSON_IT_PG_DSN" -qAtX -v ON_ERROR_STOP=1 -c "$1"; }
now() { date +%s.%N; }

sql "VACUUM ANALYZE billing.outbox_queue"
sleep 2 # the relay's empty claims: planned again on the queue as ANALYZE saw it

# The topic is billing's and nothing subscribes to it; the relay publishes it as any other.
insert="INSERT INTO billing.outbox (event_id, topic, tenant_id, payload)
        SELECT gen_random_uuid(), 'billing.backlog_probe', gen_random_uuid(), '\\x0a00'::bytea
        FROM generate_series(1, $EVENTS)"
read_all="SELECT count(o.payload) FROM billing.outbox_queue q JOIN billing.outbox o ON o.id = q.id"

# The baseline first, in the transaction of the insert (rolled back): nothing is published.
base_s=$(psql "$KEELSON_IT_PG_DSN" -qAtX -v ON_ERROR_STOP=1 <<EOF | tail -n 1
BEGIN;
$insert;
SELECT extract(epoch FROM clock_timestamp()) \\gset s_
$read_all;
SELECT extract(epoch FROM clock_timestamp()) - :s_extract;
ROLLBACK;
EOF
)

sql "$insert"
t2=$(now)
while :; do
        left=$(sql "SELECT count(*) FROM billing.outbox_queue")
        [ "$left" = 0 ] && break
        (($(echo "$(now) - $t2 > $LIMIT_S" | bc))) && die "$left events still queued after ${LIMIT_S} s"
        sleep 0.2
done
t3=$(now)
drain_s=$(echo "$t3 - $t2" | bc)
printf 'backlog of %d events: published in %.2f s (%.0f events/s)\n' "$EVENTS" "$drain_s" \
        "$(echo "$EVENTS / $drain_s" | bc -l)"
printf 'baseline, one read of the backlog through the queue: %.3f s\n' "$base_s"
printf 'ratio, publishing over reading: %.1fx\n' "$(echo "$drain_s / $base_s" | bc -l)"
