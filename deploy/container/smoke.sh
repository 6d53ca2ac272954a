#!/usr/bin/env bash
# Runs keelson from its image, as Kubernetes would run it, against a local
# stack's PostgreSQL and Redis, and makes one account through the gateway
# (.ci/run's step "container"; docs/operations.md, "The container image").
#
#   smoke.sh [--keep]     --keep leaves DIR (logs, env) for a look afterwards
#
# deploy/local/stack.sh starts the stack as it always does, PostgreSQL and
# Redis from this machine's packages, but its --bin is a folder of wrappers:
# each keelson-<name> there runs /usr/local/bin/keelson-<name> from the
# image (podman run --network host, uid 10001, read-only root filesystem, no
# capabilities, no /tmp). So the broker, auth, the gateway and the other
# services all run from the image, and the stack's own checks (every
# /readyz answers 200) hold for them. Then SignUp, Login and WhoAmI through
# the gateway, then the stack stops, and any container left is removed.
#
# Needs: the image (build.sh), podman, and packages.txt's PostgreSQL, Redis
# and curl. Root, as podman runs rootful here.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
STACK=$ROOT/deploy/local/stack.sh
SERVICES="broker gateway auth billing ledger summary webhook"
CURL_TIMEOUT_S=15

die() {
        printf 'smoke: %s\n' "$*" >&2
        exit 1
}
log() { printf 'smoke: %s\n' "$*" >&2; }

keep=0
case "${1-}" in
--keep) keep=1 ;;
"") ;;
*) die "usage: smoke.sh [--keep]" ;;
esac

command -v podman >/dev/null || die "podman is missing: apt-get install podman"
IMAGE=$("$SCRIPT_DIR/image-ref.sh")
podman image exists "$IMAGE" || die "no image $IMAGE: run deploy/container/build.sh first"
# shellcheck source=podman-compat.sh
. "$SCRIPT_DIR/podman-compat.sh"
podman_compat "$IMAGE" || die "podman cannot run containers on this machine"

DIR=$(mktemp -d /tmp/keelson-smoke.XXXXXX)
RUN_ID=$(basename "$DIR")
STARTED=0

# The containers of this run only, by the label every wrapper sets.
remove_containers() {
        local ids
        ids=$(podman ps -a -q --filter "label=keelson.smoke=$RUN_ID")
        [ -z "$ids" ] || {
                log "removing containers left over: $(echo "$ids" | tr '\n' ' ')"
                # shellcheck disable=SC2086 # one id per word
                podman rm -f -t 0 $ids >/dev/null
        }
}

cleanup() {
        local rc=$? f
        if [ $rc != 0 ]; then
                for f in "$DIR"/stack/logs/*.log; do
                        [ -f "$f" ] || continue
                        echo "-- last lines of $f" >&2
                        tail -n 20 "$f" >&2 || true
                done
        fi
        [ $STARTED = 0 ] || "$STACK" stop --dir "$DIR/stack" || rc=1
        remove_containers || rc=1
        if [ $keep = 1 ] || [ $rc != 0 ]; then
                log "left $DIR"
        else
                rm -rf "$DIR"
        fi
        if [ $rc = 0 ]; then log "ok"; else log "FAILED"; fi
        exit $rc
}
trap cleanup EXIT

# One wrapper per binary. exec keeps the stack's pid: its SIGTERM reaches
# podman, which passes it to the service (--sig-proxy, the default), and the
# service's exit ends podman. --env 'KEELSON_*' passes the stack's settings.
mkdir -p "$DIR/bin"
podman_run=$(printf '%q ' "${PODMAN[@]}" run "${PODMAN_LIMITS[@]+"${PODMAN_LIMITS[@]}"}")
for s in $SERVICES; do
        cat >"$DIR/bin/keelson-$s" <<EOF
#!/bin/sh
exec $podman_run--rm --pull never --name "keelson-smoke-$s-\$\$" \\
        --label keelson.smoke=$RUN_ID --network host \\
        --user 10001:10001 --read-only --cap-drop all --security-opt no-new-privileges \\
        --env 'KEELSON_*' $IMAGE /usr/local/bin/keelson-$s "\$@"
EOF
        chmod +x "$DIR/bin/keelson-$s"
done

log "stack from $IMAGE in $DIR/stack"
STARTED=1
# --tcp: the containers share the host's network, not its files (the
# cluster's and the brokers' sockets).
"$STACK" start --dir "$DIR/stack" --bin "$DIR/bin" --free-ports --tcp
log "every service of the image answers /readyz 200"

gw=$(sed -n 's/^KEELSON_IT_GATEWAY_URL=//p' "$DIR/stack/env")
[ -n "$gw" ] || die "no gateway URL in $DIR/stack/env"

# POSTs JSON $2 to method $1 of AuthService (token $3, if any); prints the
# body, fails unless the status is 200.
call() {
        local method=$1 body=$2 token=${3-} out code
        local args=(-sS -m "$CURL_TIMEOUT_S" -o "$DIR/reply" -w '%{http_code}'
                -H 'Content-Type: application/json' -d "$body")
        [ -z "$token" ] || args+=(-H "Authorization: Bearer $token")
        code=$(curl "${args[@]}" "$gw/keelson.auth.v1.AuthService/$method") || code=none
        out=$(cat "$DIR/reply" 2>/dev/null || true)
        [ "$code" = 200 ] || die "$method: HTTP $code: $out"
        printf '%s\n' "$out"
}

email="smoke-$(date +%s)-$RANDOM@example.com"
password="correct horse battery"
reply=$(call SignUp "{\"email\":\"$email\",\"password\":\"$password\",\"tenantName\":\"Smoke\",\"displayName\":\"Smoke\"}")
tenant=$(printf '%s' "$reply" | sed -n 's/.*"tenantId": *"\([^"]*\)".*/\1/p')
[ -n "$tenant" ] || die "SignUp: no tenantId in $reply"
log "SignUp through the gateway: tenant $tenant"

reply=$(call Login "{\"email\":\"$email\",\"password\":\"$password\"}")
token=$(printf '%s' "$reply" | sed -n 's/.*"sessionToken": *"\([^"]*\)".*/\1/p')
[ -n "$token" ] || die "Login: no sessionToken in its reply"
reply=$(call WhoAmI '{}' "$token")
case "$reply" in
*"$tenant"*) log "Login and WhoAmI: the same tenant" ;;
*) die "WhoAmI: tenant $tenant not in $reply" ;;
esac

# The services ran as uid 10001, from the image.
for s in $SERVICES; do
        n=$(podman ps -q --filter "label=keelson.smoke=$RUN_ID" --filter "name=keelson-smoke-$s-" | wc -l)
        [ "$n" -ge 1 ] || die "no container of keelson-$s is running"
done
podman ps --filter "label=keelson.smoke=$RUN_ID" --format '{{.Names}} {{.Image}} {{.Status}}' >&2
