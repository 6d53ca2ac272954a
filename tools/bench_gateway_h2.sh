#!/usr/bin/env bash
# bench_gateway_h2.sh: an authenticated unary call through the gateway over
# HTTP/2, as gRPC and as Connect, against the same call over Connect
# HTTP/1.1, and nginx answering the same body over HTTP/2 (the ceiling),
# in cleartext (h2c) and over TLS (h2 by ALPN), all with h2load in one run.
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
#
# Then the same over TLS, at 1, 10 and 100 streams on one connection: a
# second gateway on the stack's broker and Redis with
# KEELSON_GATEWAY_TLS_CERT (a throwaway self-signed certificate for
# 127.0.0.1, made here), and nginx's TLS server with the same certificate.
# Prints the same figures, the gateway/nginx ratio over TLS, and gRPC over
# TLS against gRPC over h2c at the same shape (what TLS costs the gateway).
# One connection per row: the handshake is paid once, the rows measure the
# record layer.
# Needs h2load (nghttp2-client), nginx, curl, openssl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
REQUESTS=${2:-20000}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keelson-bench-h2.XXXXXX")

BENCH_NAME=bench_gateway_h2
# shellcheck source=tools/bench_whoami.sh
. "$ROOT/tools/bench_whoami.sh"
need "nghttp2-client nginx-light curl openssl" h2load nginx curl openssl

# ---- the stack and a session ------------------------------------------------------

export KEELSON_GATEWAY_RATE_API=1000000:1000000/1s
export KEELSON_GATEWAY_RATE_AUTH=1000:1000/1s
export KEELSON_GATEWAY_RATE_RESOLVE=1000000:1000000/1s
whoami_session

printf '{}' >"$WORK/connect.json"
printf '\0\0\0\0\0' >"$WORK/grpc.bin" # one empty WhoAmIRequest, framed

# ---- a gateway over TLS, beside the stack's ------------------------------------------

# One certificate (EC P-256, self-signed for 127.0.0.1, a day) for the gateway and nginx alike.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
        -subj /CN=keelson-bench -addext subjectAltName=IP:127.0.0.1 \
        -keyout "$WORK/key.pem" -out "$WORK/cert.pem" >/dev/null 2>&1 ||
        die "openssl could not make a certificate"

# stack_env KEY: a value the stack wrote to its env file (KEELSON_IT_KEY=value).
stack_env() {
        sed -n "s/^KEELSON_IT_$1=//p" "$WORK/stack/env"
}

# Stops the TLS gateway (SIGTERM: it drains, nothing is in flight), before the stack goes.
stop_tls_gateway() {
        local pid
        [ -s "$WORK/gateway-tls.pid" ] || return 0
        pid=$(cat "$WORK/gateway-tls.pid")
        kill "$pid" 2>/dev/null || return 0
        for _ in $(seq 1 100); do
                kill -0 "$pid" 2>/dev/null || return 0
                sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
}
trap 'stop_tls_gateway; bench_cleanup' EXIT

# Its own ports, the stack's broker and Redis, the exported rate limits, TLS on its port.
TLS_PORT=$(free_port)
TLS_ADMIN_PORT=$(free_port)
KEELSON_GATEWAY_HOST=127.0.0.1 KEELSON_GATEWAY_PORT=$TLS_PORT \
        KEELSON_GATEWAY_ADMIN_HOST=127.0.0.1 KEELSON_GATEWAY_ADMIN_PORT=$TLS_ADMIN_PORT \
        KEELSON_BROKER_URL="$(stack_env BROKER_URLS)" KEELSON_REDIS_URL="$(stack_env REDIS_URL)" \
        KEELSON_GATEWAY_TLS_CERT="$WORK/cert.pem" KEELSON_GATEWAY_TLS_KEY="$WORK/key.pem" \
        "$BUILD/keelson-gateway" 2>"$WORK/gateway-tls.log" &
echo $! >"$WORK/gateway-tls.pid"
GW_TLS="https://127.0.0.1:$TLS_PORT"
for _ in $(seq 1 100); do
        curl -sf -o /dev/null "http://127.0.0.1:$TLS_ADMIN_PORT/readyz" && break
        sleep 0.1
done
REPLY=$(curl -sS --cacert "$WORK/cert.pem" --http2 "$GW_TLS/keelson.auth.v1.AuthService/WhoAmI" \
        -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" -d '{}') ||
        die "the TLS gateway does not answer (see its log: $(tail -n 3 "$WORK/gateway-tls.log"))"
[ "$REPLY" = "$BODY" ] || die "WhoAmI over TLS answered otherwise: $REPLY"

# ---- nginx over h2c and over TLS, same body ------------------------------------------

NGINX_PORT=$(free_port)
NGINX_TLS_PORT=$(free_port)
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
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3; # 1.22 leaves 1.3 out by default; the gateway offers both
        http2_max_concurrent_streams 128;
        location / { return 200 '$BODY'; }
    }
}
EOF
nginx -p "$WORK" -c "$WORK/nginx.conf"
for _ in $(seq 1 50); do
        curl -s -o /dev/null --http2-prior-knowledge "http://127.0.0.1:$NGINX_PORT/" &&
                curl -s -o /dev/null --cacert "$WORK/cert.pem" --http2 "https://127.0.0.1:$NGINX_TLS_PORT/" &&
                break
        sleep 0.1
done

# ---- h2load ---------------------------------------------------------------------------

WHOAMI_PATH=/keelson.auth.v1.AuthService/WhoAmI
WHOAMI="$GW$WHOAMI_PATH"
AUTH="authorization: Bearer $TOKEN"
GRPC=(-H "$AUTH" -H 'content-type: application/grpc' -H 'te: trailers' -d "$WORK/grpc.bin")
CONNECT=(-H "$AUTH" -H 'content-type: application/json' -d "$WORK/connect.json")
# TLS 1.3 with the suite the gateway picks (its preference, OpenSSL's order) for nginx too,
# which would take h2load's first (AES-128): one cipher on both sides of the ratio.
TLS=(--tls13-ciphers=TLS_AES_256_GCM_SHA384)

# run CONNS STREAMS KIND: "req/s mean_ms max_ms failed protocol" for KIND grpc,
# connect, connect-h1, nginx, grpc-tls, connect-tls or nginx-tls (protocol: what
# h2load says it spoke, h2 by ALPN over TLS). h2load's whole output is left in
# $WORK/h2load.out.
run() {
        local c=$1 m=$2 kind=$3 out args=()
        case "$kind" in
        grpc) args=("${GRPC[@]}" "$WHOAMI") ;;
        connect) args=("${CONNECT[@]}" "$WHOAMI") ;;
        connect-h1) args=(--h1 "${CONNECT[@]}" "$WHOAMI") ;;
        nginx) args=("http://127.0.0.1:$NGINX_PORT/") ;;
        grpc-tls) args=("${TLS[@]}" "${GRPC[@]}" "$GW_TLS$WHOAMI_PATH") ;;
        connect-tls) args=("${TLS[@]}" "${CONNECT[@]}" "$GW_TLS$WHOAMI_PATH") ;;
        nginx-tls) args=("${TLS[@]}" "https://127.0.0.1:$NGINX_TLS_PORT/") ;;
        esac
        out=$(h2load -n "$REQUESTS" -c "$c" -m "$m" "${args[@]}" 2>&1)
        printf '%s\n' "$out" >"$WORK/h2load.out"
        awk '
                /^Application protocol:/ { proto = $3 }
                /^finished in/ { gsub(",", ""); for (i = 1; i <= NF; i++) if ($(i + 1) == "req/s") rps = $i }
                /^requests:/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "failed,") failed = $i }
                /^status codes:/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "2xx,") ok = $i }
                /^time for request:/ { # min max mean sd +/-sd
                        max = $5; mean = $6
                        max = (max ~ /us$/) ? max / 1000 : (max ~ /ms$/) ? max + 0 : max * 1000
                        mean = (mean ~ /us$/) ? mean / 1000 : (mean ~ /ms$/) ? mean + 0 : mean * 1000
                }
                END { printf "%s %.2f %.2f %s %s\n", rps, mean, max, failed + 0, proto }' <<<"$out"
}

# The TLS version and cipher of h2load's last run.
suite() {
        sed -n 's/^TLS Protocol: //p; s/^Cipher: //p' "$WORK/h2load.out" | paste -sd ' '
}

run 1 10 grpc >/dev/null # warm-up: the context cached, connections made
read -r _ _ _ _ proto <<<"$(run 1 10 grpc-tls)" # the TLS gateway's own cache and connections
[ "$proto" = h2 ] || die "the gateway over TLS spoke ${proto:-nothing}, not h2"
GW_SUITE=$(suite)
read -r _ _ _ _ proto <<<"$(run 1 1 nginx-tls)"
[ "$proto" = h2 ] || die "nginx over TLS spoke ${proto:-nothing}, not h2"
NGINX_SUITE=$(suite)
declare -A H2C_GRPC # "conns streams" -> gRPC h2c req/s, for the TLS rows' ratio

echo "WhoAmI through the gateway (cached context, rate limit in Redis, auth x2 behind the broker),"
echo "h2load -n $REQUESTS per row, $(nproc) cores; nginx (2 workers) returns the same ${#BODY}-byte body over h2c"
printf '%-12s | %-22s | %-22s | %-22s | %-22s | %s\n' "conns x streams" "gRPC h2c r/s mean max" \
        "Connect h2c" "Connect HTTP/1.1" "nginx h2c" "gRPC/nginx"
for shape in "1 1" "1 10" "1 100" "10 10"; do
        read -r c m <<<"$shape"
        read -r g_rps g_mean g_max g_fail _ <<<"$(run "$c" "$m" grpc)"
        H2C_GRPC["$c $m"]=$g_rps
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

echo
echo "The same over TLS, h2 by ALPN: a second gateway on the stack ($GW_SUITE), nginx's TLS"
echo "server ($NGINX_SUITE), one self-signed certificate (EC P-256) for both"
printf '%-12s | %-22s | %-22s | %-22s | %-10s | %s\n' "conns x streams" "gRPC TLS r/s mean max" \
        "Connect TLS" "nginx TLS" "gRPC/nginx" "gRPC TLS/h2c"
for shape in "1 1" "1 10" "1 100"; do
        read -r c m <<<"$shape"
        read -r g_rps g_mean g_max g_fail g_proto <<<"$(run "$c" "$m" grpc-tls)"
        read -r c_rps c_mean c_max _ c_proto <<<"$(run "$c" "$m" connect-tls)"
        read -r n_rps n_mean n_max _ n_proto <<<"$(run "$c" "$m" nginx-tls)"
        for proto in "$g_proto" "$c_proto" "$n_proto"; do
                [ "$proto" = h2 ] || die "a TLS row spoke ${proto:-nothing}, not h2"
        done
        ratio=$(awk -v a="$g_rps" -v b="$n_rps" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
        cost=$(awk -v a="$g_rps" -v b="${H2C_GRPC[$shape]}" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
        printf '%-15s | %8s %6s %6s | %8s %6s %6s | %8s %6s %6s | %-10s | %s%s\n' \
                "$c x $m" "$g_rps" "$g_mean" "$g_max" "$c_rps" "$c_mean" "$c_max" "$n_rps" "$n_mean" \
                "$n_max" "$ratio" "$cost" "$([ "${g_fail:-0}" = 0 ] || echo " ($g_fail gRPC failed)")"
done
echo "(latencies in ms; gRPC TLS/h2c: gRPC over TLS against gRPC over h2c at the same shape above)"
