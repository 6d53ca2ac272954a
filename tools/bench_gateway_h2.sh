#!/usr/bin/env bash
# bench_gateway_h2.sh: an authenticated unary call through the gateway over
# HTTP/2, as gRPC and as Connect, against the same call over Connect
# HTTP/1.1, and nginx answering the same body over HTTP/2 (the ceiling),
# all with h2load in one run.
#
#   tools/bench_gateway_h2.sh [BUILD_DIR (build)] [REQUESTS per row (20000)]
#
# It starts a stack of its own (deploy/local/stack.sh, free ports, two auth
# replicas, rate limits far above the load), signs a user up and logs in;
# WhoAmI then costs the gateway a cached context, a Redis rate-limit
# decision and one round trip to auth through the broker. Each row is one
# connection (-c 1) with 1, 10 and 100 streams at once (-m), then 10
# connections with 10 streams each. nginx (nginx-light, its own config in a
# temporary folder) serves the WhoAmI body over cleartext HTTP/2. Prints
# requests/s, mean and max latency per row, and the gateway/nginx ratio.
# Needs h2load (nghttp2-client), nginx, curl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
REQUESTS=${2:-20000}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keelson-bench-h2.XXXXXX")

BENCH_NAME=bench_gateway_h2
# shellcheck source=tools/bench_whoami.sh
. "$ROOT/tools/bench_whoami.sh"
need "nghttp2-client nginx-light curl" h2load nginx curl

# ---- the stack and a session ------------------------------------------------------

export KEELSON_GATEWAY_RATE_API=1000000:1000000/1s
export KEELSON_GATEWAY_RATE_AUTH=1000:1000/1s
export KEELSON_GATEWAY_RATE_RESOLVE=1000000:1000000/1s
whoami_session

printf '{}' >"$WORK/connect.json"
printf '\0\0\0\0\0' >"$WORK/grpc.bin" # one empty WhoAmIRequest, framed

# ---- nginx over h2c, same body ---------------------------------------------------------

NGINX_PORT=$(free_port)
cat >"$WORK/nginx.conf" <<EOF
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    default_type application/json;
    server {
        listen 127.0.0.1:$NGINX_PORT http2;
        http2_max_concurrent_streams 128;
        location / { return 200 '$BODY'; }
    }
}
EOF
nginx -p "$WORK" -c "$WORK/nginx.conf"
for _ in $(seq 1 50); do
        curl -s -o /dev/null --http2-prior-knowledge "http://127.0.0.1:$NGINX_PORT/" && break
        sleep 0.1
done

# ---- h2load ---------------------------------------------------------------------------

WHOAMI="$GW/keelson.auth.v1.AuthService/WhoAmI"
AUTH="authorization: Bearer $TOKEN"

# run CONNS STREAMS KIND: "req/s mean_ms max_ms failed" for KIND grpc, connect,
# connect-h1 or nginx.
run() {
        local c=$1 m=$2 kind=$3 out args=()
        case "$kind" in
        grpc) args=(-H "$AUTH" -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/grpc.bin" "$WHOAMI") ;;
        connect) args=(-H "$AUTH" -H 'content-type: application/json' -d "$WORK/connect.json" "$WHOAMI") ;;
        connect-h1) args=(--h1 -H "$AUTH" -H 'content-type: application/json' -d "$WORK/connect.json" "$WHOAMI") ;;
        nginx) args=("http://127.0.0.1:$NGINX_PORT/") ;;
        esac
        out=$(h2load -n "$REQUESTS" -c "$c" -m "$m" "${args[@]}" 2>&1)
        awk '
                /^finished in/ { gsub(",", ""); for (i = 1; i <= NF; i++) if ($(i + 1) == "req/s") rps = $i }
                /^requests:/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "failed,") failed = $i }
                /^status codes:/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "2xx,") ok = $i }
                /^time for request:/ { # min max mean sd +/-sd
                        max = $5; mean = $6
                        max = (max ~ /us$/) ? max / 1000 : (max ~ /ms$/) ? max + 0 : max * 1000
                        mean = (mean ~ /us$/) ? mean / 1000 : (mean ~ /ms$/) ? mean + 0 : mean * 1000
                }
                END { printf "%s %.2f %.2f %s\n", rps, mean, max, failed + 0 }' <<<"$out"
}

run 1 10 grpc >/dev/null # warm-up: the context cached, connections made

echo "WhoAmI through the gateway (cached context, rate limit in Redis, auth x2 behind the broker),"
echo "h2load -n $REQUESTS per row, $(nproc) cores; nginx (2 workers) returns the same ${#BODY}-byte body over h2c"
printf '%-12s | %-22s | %-22s | %-22s | %-22s | %s\n' "conns x streams" "gRPC h2c r/s mean max" \
        "Connect h2c" "Connect HTTP/1.1" "nginx h2c" "gRPC/nginx"
for shape in "1 1" "1 10" "1 100" "10 10"; do
        read -r c m <<<"$shape"
        read -r g_rps g_mean g_max g_fail <<<"$(run "$c" "$m" grpc)"
        read -r c_rps c_mean c_max _ <<<"$(run "$c" "$m" connect)"
        # HTTP/1.1 has one request in flight per connection: as many connections as streams.
        read -r h_rps h_mean h_max _ <<<"$(run $((c * m)) 1 connect-h1)"
        read -r n_rps n_mean n_max _ <<<"$(run "$c" "$m" nginx)"
        ratio=$(awk -v a="$g_rps" -v b="$n_rps" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
        printf '%-15s | %8s %6s %6s | %8s %6s %6s | %8s %6s %6s | %8s %6s %6s | %s%s\n' \
                "$c x $m" "$g_rps" "$g_mean" "$g_max" "$c_rps" "$c_mean" "$c_max" "$h_rps" "$h_mean" \
                "$h_max" "$n_rps" "$n_mean" "$n_max" "$ratio" \
                "$([ "${g_fail:-0}" = 0 ] || echo " ($g_fail gRPC failed)")"
done
echo "(latencies in ms; Connect HTTP/1.1 rows use conns x streams connections, one request each at a time)"
