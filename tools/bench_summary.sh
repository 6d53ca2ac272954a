#!/usr/bin/env bash
# bench_summary.sh: GetSummary through the gateway, cached against the cache
# turned off, in the same run.
#
#   tools/bench_summary.sh [BUILD_DIR (build)] [SECONDS per run (10)]
#
# It starts a stack of its own (deploy/local/stack.sh, free ports, one
# summary replica) and seeds 50 tenants with 100,000 users in all straight
# into PostgreSQL (one tenant with 10,000 members; users locked, invitations
# and API keys sprinkled in). The tenant of 10,000 is the one measured: its
# owner signs up through the API and logs in. wrk drives GetSummary at 1 and
# 10 connections, first with the cache (KEELSON_SUMMARY_CACHE=true), then the
# stack restarts on the same data with KEELSON_SUMMARY_CACHE=false so that
# every request runs the counting queries. Prints requests/s, p50, p95, p99
# and the cached/uncached ratios. Needs wrk, curl, psql.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
DURATION=${2:-10}
STACK_SH=$ROOT/deploy/local/stack.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keelson-bench-summary.XXXXXX")
CONNECTIONS=(1 10)
PASSWORD="correct horse battery staple"

die() {
        echo "bench_summary: $*" >&2
        exit 1
}

for tool in wrk curl psql; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed"
done

cleanup() {
        rm -f "$WORK/stack/pg.keep" # the cluster goes with this run (both starts keep it)
        "$STACK_SH" stop --dir "$WORK/stack" >/dev/null 2>&1 || true
        rm -rf "$WORK"
}
trap cleanup EXIT

# The gateway's rate limits would be what is measured: far above the load.
export KEELSON_GATEWAY_RATE_API=1000000:1000000/1s
export KEELSON_GATEWAY_RATE_AUTH=1000000:1000000/1s

start_stack() {
        "$STACK_SH" start --dir "$WORK/stack" --bin "$BUILD" --free-ports "$@" >"$WORK/stack.log" 2>&1 ||
                { tail -n 30 "$WORK/stack.log" >&2; die "the stack did not start"; }
        # shellcheck disable=SC1091
        . "$WORK/stack/env"
        GW=$KEELSON_IT_GATEWAY_URL
}

post() { curl -sf -X POST "$GW/$1" -H 'Content-Type: application/json' "${@:3}" -d "$2"; }
json_field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p"; }

seed() {
        local email="bench-owner-$RANDOM$RANDOM@bench.test" tenant
        tenant=$(post keelson.auth.v1.AuthService/SignUp \
                "{\"email\":\"$email\",\"password\":\"$PASSWORD\",\"tenantName\":\"bench big\"}" |
                json_field tenantId)
        [ -n "$tenant" ] || die "sign-up failed"
        TOKEN=$(post keelson.auth.v1.AuthService/Login "{\"email\":\"$email\",\"password\":\"$PASSWORD\"}" |
                json_field sessionToken)
        [ -n "$TOKEN" ] || die "login failed"
        # 9,999 more members for the big tenant, 90,000 over 49 others.
        psql -q -v ON_ERROR_STOP=1 "$KEELSON_IT_PG_DSN" <<SQL
CREATE TEMP TABLE t AS
    SELECT '$tenant'::uuid AS id, 9999 AS n
    UNION ALL SELECT gen_random_uuid(), CASE WHEN g = 49 THEN 90000 - 48 * 1837 ELSE 1837 END
      FROM generate_series(1, 49) g;
INSERT INTO auth.tenants (id, name) SELECT id, 'bench ' || id FROM t WHERE id <> '$tenant';
CREATE TEMP TABLE s AS
    SELECT t.id AS tenant_id, gen_random_uuid() AS user_id, i FROM t, generate_series(1, t.n) i;
INSERT INTO auth.users (id, email, password_hash, locked_until)
    SELECT user_id, user_id || '@bench.test', 'x',
           CASE WHEN i % 97 = 0 THEN now() + interval '1 day' END FROM s;
INSERT INTO auth.memberships (tenant_id, user_id, role)
    SELECT tenant_id, user_id, CASE WHEN i % 50 = 0 THEN 'admin' WHEN i % 5 = 0 THEN 'viewer'
                                    ELSE 'member' END FROM s;
INSERT INTO auth.invitations (tenant_id, email, role, token_sha256, expires_at)
    SELECT tenant_id, 'inv-' || user_id || '@bench.test', 'member',
           sha256(convert_to(user_id::text, 'UTF8')), now() + interval '7 days'
      FROM s WHERE i % 40 = 0;
INSERT INTO auth.api_keys (tenant_id, name, role, token_sha256, prefix)
    SELECT tenant_id, 'bench', 'member', sha256(convert_to('k' || user_id::text, 'UTF8')), 'kb'
      FROM s WHERE i % 100 = 0;
ANALYZE auth.users; ANALYZE auth.memberships; ANALYZE auth.invitations; ANALYZE auth.api_keys;
SQL
        echo "seeded: $(psql -tA "$KEELSON_IT_PG_DSN" -c 'SELECT count(*) FROM auth.tenants') tenants," \
                "$(psql -tA "$KEELSON_IT_PG_DSN" -c 'SELECT count(*) FROM auth.users') users," \
                "$(psql -tA "$KEELSON_IT_PG_DSN" -c "SELECT count(*) FROM auth.memberships WHERE tenant_id = '$tenant'") in the measured tenant"
}

write_lua() {
        cat >"$WORK/summary.lua" <<LUA
wrk.method = "POST"
wrk.body = "{}"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $TOKEN"
function done(summary, latency, requests)
        local s = summary.duration / 1e6
        io.write(string.format("RESULT %.0f %.2f %.2f %.2f %d %d\n", summary.requests / s,
                latency:percentile(50) / 1000, latency:percentile(95) / 1000,
                latency:percentile(99) / 1000, summary.errors.status, summary.errors.timeout))
end
LUA
}

# Prints "rps p50 p95 p99" (ms) for one run.
run() {
        local label=$1 conns=$2 line
        post keelson.summary.v1.AdminSummaryService/GetSummary '{}' \
                -H "Authorization: Bearer $TOKEN" >/dev/null || die "GetSummary failed ($label)"
        wrk -t "$conns" -c "$conns" -d "${DURATION}s" -s "$WORK/summary.lua" "$GW/keelson.summary.v1.AdminSummaryService/GetSummary" \
                >"$WORK/wrk.out" 2>&1 || die "wrk failed"
        line=$(grep '^RESULT' "$WORK/wrk.out") || die "no wrk result"
        set -- $line
        [ "$6" = 0 ] && [ "$7" = 0 ] || die "$label: $6 non-2xx answers, $7 timeouts"
        echo "$2 $3 $4 $5"
}

declare -A R
start_stack --keep-data
seed
write_lua
for c in "${CONNECTIONS[@]}"; do R[cached,$c]=$(run cached "$c"); done
"$STACK_SH" stop --dir "$WORK/stack" >/dev/null 2>&1
export KEELSON_SUMMARY_CACHE=false
start_stack --keep-data
for c in "${CONNECTIONS[@]}"; do R[uncached,$c]=$(run uncached "$c"); done

printf '\n%-10s %5s %10s %9s %9s %9s\n' mode conns 'req/s' 'p50 ms' 'p95 ms' 'p99 ms'
for c in "${CONNECTIONS[@]}"; do
        for mode in cached uncached; do
                read -r rps p50 p95 p99 <<<"${R[$mode,$c]}"
                printf '%-10s %5d %10s %9s %9s %9s\n' "$mode" "$c" "$rps" "$p50" "$p95" "$p99"
        done
done
echo
for c in "${CONNECTIONS[@]}"; do
        read -r a _ _ ap99 <<<"${R[cached,$c]}"
        read -r b _ _ bp99 <<<"${R[uncached,$c]}"
        awk -v c="$c" -v a="$a" -v b="$b" -v ap="$ap99" -v bp="$bp99" 'BEGIN {
                printf "%d connections: cached/uncached throughput %.1fx, p99 uncached/cached %.1fx\n",
                       c, a / b, bp / ap }'
done
