# bench_whoami.sh: what the WhoAmI benchmarks share, sourced by
# bench_gateway_read.sh and bench_gateway_h2.sh (not run by itself).
#
# The sourcing script sets BENCH_NAME (for messages), ROOT, BUILD and WORK (a
# temporary folder this removes on exit), and exports its rate limits before
# calling whoami_session. nginx, when started with its pid in $WORK/nginx.pid,
# is stopped on exit too. STACK_ARGS adds options to stack.sh start
# (STACK_ARGS=--tcp: the services reach PostgreSQL and the broker over TCP).

STACK_SH=$ROOT/deploy/local/stack.sh
PASSWORD="correct horse battery staple"

die() {
        echo "$BENCH_NAME: $*" >&2
        exit 1
}

# need TOOL... (and the packages that bring them): dies when one is missing.
need() {
        local packages=$1 tool
        shift
        for tool in "$@"; do
                command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (apt-get install $packages)"
        done
}

bench_cleanup() {
        if [ -s "$WORK/nginx.pid" ]; then
                kill "$(cat "$WORK/nginx.pid")" 2>/dev/null || true
        fi
        "$STACK_SH" stop --dir "$WORK/stack" >/dev/null 2>&1 || true
        rm -rf "$WORK"
}
trap bench_cleanup EXIT

free_port() {
        local p
        for _ in $(seq 1 100); do
                p=$((20000 + RANDOM % 10000))
                if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then
                        echo "$p"
                        return
                fi
        done
        die "no free port"
}

# A stack of its own (free ports, two auth replicas), a user signed up and
# logged in: sets GW (the gateway's URL), TOKEN (the session) and BODY
# (WhoAmI's JSON reply, the body nginx is given to return).
whoami_session() {
        local email args
        read -ra args <<<"${STACK_ARGS-}"
        "$STACK_SH" start --dir "$WORK/stack" --bin "$BUILD" --free-ports --auth-replicas 2 \
                "${args[@]+"${args[@]}"}" >/dev/null
        GW=$(sed -n 's/^KEELSON_IT_GATEWAY_URL=//p' "$WORK/stack/env")
        email="bench-$RANDOM$RANDOM@example.test"
        curl -sS -o /dev/null "$GW/keelson.auth.v1.AuthService/SignUp" -H 'Content-Type: application/json' \
                -d "{\"email\":\"$email\",\"password\":\"$PASSWORD\",\"tenantName\":\"Bench\",\"displayName\":\"Bench\"}"
        TOKEN=$(curl -sS "$GW/keelson.auth.v1.AuthService/Login" -H 'Content-Type: application/json' \
                -d "{\"email\":\"$email\",\"password\":\"$PASSWORD\"}" |
                sed -n 's/.*"sessionToken": *"\([^"]*\)".*/\1/p')
        [ -n "$TOKEN" ] || die "login failed"
        BODY=$(curl -sS "$GW/keelson.auth.v1.AuthService/WhoAmI" -H 'Content-Type: application/json' \
                -H "Authorization: Bearer $TOKEN" -d '{}')
        case "$BODY" in *'"userId"'*) ;; *) die "WhoAmI failed: $BODY" ;; esac
}
