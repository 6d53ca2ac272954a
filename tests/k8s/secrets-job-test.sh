#!/usr/bin/env bash
# The test of k8s/overlays/dev/secrets-job.sh, the script of the Job that
# makes the dev overlay's Secrets (run by tests/k8s/check.sh). No cluster
# here: a folder per Secret stands for the kubelet's optional Secret volume
# (one file per key, plus the kubelet's own ..data entries, even when the
# Secret does not exist), and "applying" a manifest means writing its keys
# back into that folder, which is what the server-side apply leaves in the
# cluster. It checks what a user relies on:
#
#   - nothing there: four Secrets, every key the pods read, random passwords
#     that agree between the DSNs/URL and the datastores' own Secrets;
#   - everything there: the same values written back, so the apply changes
#     nothing (PostgreSQL's passwords never rotate);
#   - only some there (passwords chosen by hand, or one Secret deleted): the
#     missing ones agree with those that exist, which are left as they are;
#   - a password that a URL would need escaped, or a key missing from an
#     existing Secret: the script fails and writes nothing to apply;
#   - no password in its output, and manifests not readable by others.
#
#   secrets-job-test.sh SCRIPT WORK_DIR
set -euo pipefail

SCRIPT=$1
WORK=$2
SECRETS="keelson-postgres keelson-redis keelson-dev-postgres-server keelson-dev-redis-server"
ROLES="auth billing ledger webhook summary"
HOST=keelson-postgres:5432/keelson
failed=0

fail() {
        echo "secrets-job test: FAIL: $*"
        failed=1
}

# A fresh set of volumes: every Secret missing.
reset() {
        rm -rf "$WORK"
        for s in $SECRETS; do
                mkdir -p "$WORK/in/$s/..2024_01_01_00_00_00.000000000"
                ln -s ..2024_01_01_00_00_00.000000000 "$WORK/in/$s/..data"
        done
}

# Runs the script as the Job does; its output goes to $WORK/log.
run() {
        rm -rf "$WORK/out"
        mkdir -p "$WORK/out"
        IN=$WORK/in OUT=$WORK/out sh "$SCRIPT" >"$WORK/log" 2>&1
}

# The data of the manifest the script wrote for SECRET: "key base64" lines.
data() { awk '/^data:$/ { on = 1; next } on && /^  [^ ]/ { sub(/^  /, ""); sub(/: /, " "); print }' "$WORK/out/$1.yaml"; }

# value SECRET KEY
value() {
        local k v
        while read -r k v; do
                if [ "$k" = "$2" ]; then
                        printf '%s' "$v" | base64 -d
                        return 0
                fi
        done < <(data "$1")
        return 1
}

# The keys of a manifest, sorted.
keys() { data "$1" | cut -d' ' -f1 | sort | tr '\n' ' '; }

# apply SECRET: what the cluster holds afterwards, as its volume shows it.
apply() {
        local k
        for k in $(keys "$1"); do
                value "$1" "$k" >"$WORK/in/$1/$k"
        done
}

# A dump of every value written, to compare two runs.
dump() {
        local s k
        for s in $SECRETS; do
                for k in $(keys "$s"); do
                        printf '%s/%s=%s\n' "$s" "$k" "$(value "$s" "$k")"
                done
        done
}

# The invariants of a complete set: keys, agreement, no password in the log.
consistent() {
        local what=$1 s r
        for s in $SECRETS; do
                [ -f "$WORK/out/$s.yaml" ] || fail "$what: no manifest for $s"
                if ! grep -q "^kind: Secret$" "$WORK/out/$s.yaml" || ! grep -q "^  name: $s$" "$WORK/out/$s.yaml"; then
                        fail "$what: $s.yaml is not the Secret $s"
                fi
                [ "$(stat -c %a "$WORK/out/$s.yaml")" = 640 ] || fail "$what: $s.yaml is readable by others"
        done
        [ "$(keys keelson-postgres)" = "auth-login-dsn billing-login-dsn ledger-login-dsn owner-dsn summary-login-dsn webhook-login-dsn " ] ||
                fail "$what: keelson-postgres has the keys $(keys keelson-postgres)"
        [ "$(keys keelson-dev-postgres-server)" = "auth-login-password billing-login-password ledger-login-password owner-password summary-login-password superuser-password webhook-login-password " ] ||
                fail "$what: keelson-dev-postgres-server has the keys $(keys keelson-dev-postgres-server)"
        [ "$(keys keelson-redis)" = "url " ] || fail "$what: keelson-redis has the keys $(keys keelson-redis)"
        [ "$(keys keelson-dev-redis-server)" = "password redis.conf " ] || fail "$what: keelson-dev-redis-server has the keys $(keys keelson-dev-redis-server)"
        [ "$(value keelson-postgres owner-dsn)" = "postgresql://keelson:$(value keelson-dev-postgres-server owner-password)@$HOST" ] ||
                fail "$what: owner-dsn does not carry owner-password"
        for r in $ROLES; do
                [ "$(value keelson-postgres "$r-login-dsn")" = "postgresql://keelson_${r}_login:$(value keelson-dev-postgres-server "$r-login-password")@$HOST" ] ||
                        fail "$what: $r-login-dsn does not carry $r-login-password"
        done
        local redis
        redis=$(value keelson-dev-redis-server password)
        [ "$(value keelson-redis url)" = "redis://:$redis@keelson-redis:6379" ] || fail "$what: the Redis URL does not carry its password"
        [ "$(value keelson-dev-redis-server redis.conf)" = "requirepass $redis" ] || fail "$what: redis.conf does not carry the password"
        local p
        for p in $(dump | sed -n 's/^[^=]*-server\/[^=]*password=//p'); do
                ! grep -q -- "$p" "$WORK/log" || fail "$what: a password is in the script's output"
        done
}

# ---- nothing there ------------------------------------------------------------------

reset
run || fail "first run: exit $? ($(cat "$WORK/log"))"
consistent "first run"
pws=$(dump | sed -n 's/^keelson-dev-[a-z-]*\/[a-z-]*password=//p')
[ "$(printf '%s\n' "$pws" | grep -c -E '^[0-9a-f]{32}$')" = 8 ] ||
        fail "first run: not eight passwords of 32 hex digits: $(printf '%s\n' "$pws" | wc -l)"
[ "$(printf '%s\n' "$pws" | sort -u | wc -l)" = 8 ] || fail "first run: two roles got the same password"
for s in $SECRETS; do apply "$s"; done
first=$(dump)

# ---- everything there: a re-run changes nothing -------------------------------------

run || fail "second run: exit $? ($(cat "$WORK/log"))"
[ "$(dump)" = "$first" ] || fail "second run: the values changed (a re-apply would rotate passwords)"
[ "$(grep -c 'kept as it is' "$WORK/log")" = 4 ] || fail "second run: does not say it kept all four"

# ---- only the datastores' Secrets there (passwords chosen by hand) ------------------

reset
mkdir -p "$WORK/in/keelson-dev-postgres-server" "$WORK/in/keelson-dev-redis-server"
printf '%s' chosen-super >"$WORK/in/keelson-dev-postgres-server/superuser-password"
printf '%s' chosen_owner.1 >"$WORK/in/keelson-dev-postgres-server/owner-password"
for r in $ROLES; do printf '%s' "chosen-$r~" >"$WORK/in/keelson-dev-postgres-server/$r-login-password"; done
printf '%s' chosenredis >"$WORK/in/keelson-dev-redis-server/password"
printf '%s' "requirepass chosenredis" >"$WORK/in/keelson-dev-redis-server/redis.conf"
run || fail "chosen passwords: exit $? ($(cat "$WORK/log"))"
consistent "chosen passwords"
[ "$(value keelson-dev-postgres-server superuser-password)" = chosen-super ] || fail "chosen passwords: the superuser's was replaced"
[ "$(value keelson-postgres auth-login-dsn)" = "postgresql://keelson_auth_login:chosen-auth~@$HOST" ] ||
        fail "chosen passwords: auth-login-dsn is $(value keelson-postgres auth-login-dsn)"

# ---- only the services' Secrets there (the datastores' deleted) ------------------------

reset
for s in keelson-postgres keelson-redis; do
        mkdir -p "$WORK/in/$s"
        printf '%s\n' "$first" | sed -n "s|^$s/\([^=]*\)=\(.*\)|\1 \2|p" | while read -r k v; do
                printf '%s' "$v" >"$WORK/in/$s/$k"
        done
done
run || fail "datastore Secrets deleted: exit $? ($(cat "$WORK/log"))"
consistent "datastore Secrets deleted"
[ "$(dump | grep -v superuser-password)" = "$(printf '%s\n' "$first" | grep -v superuser-password)" ] ||
        fail "datastore Secrets deleted: the role passwords made anew differ from those in the DSNs"

# ---- an existing Secret is written back as it is, extra keys included ---------------

reset
mkdir -p "$WORK/in/keelson-redis"
printf '%s' "redis://:abc@keelson-redis:6379" >"$WORK/in/keelson-redis/url"
printf 'two\nlines' >"$WORK/in/keelson-redis/note"
run || fail "extra key: exit $? ($(cat "$WORK/log"))"
[ "$(value keelson-redis note)" = "$(printf 'two\nlines')" ] || fail "extra key: not written back as it was"
[ "$(value keelson-dev-redis-server password)" = abc ] || fail "extra key: Redis's password does not come from the URL"

# ---- refusals: nothing to apply ---------------------------------------------------------

reset
mkdir -p "$WORK/in/keelson-dev-redis-server"
printf '%s' 'p%40ss' >"$WORK/in/keelson-dev-redis-server/password"
printf '%s' 'requirepass p%40ss' >"$WORK/in/keelson-dev-redis-server/redis.conf"
if run; then fail "a password a URL would need escaped: accepted"; fi
[ ! -f "$WORK/out/keelson-redis.yaml" ] || fail "a password a URL would need escaped: a URL was written"

reset
mkdir -p "$WORK/in/keelson-postgres"
printf '%s' "postgresql://keelson:x@$HOST" >"$WORK/in/keelson-postgres/owner-dsn"
if run; then fail "a Secret without a key the others need: accepted"; fi
[ -z "$(ls "$WORK/out")" ] || fail "a Secret without a key the others need: manifests written ($(ls "$WORK/out"))"

if [ $failed = 0 ]; then
        echo "secrets-job test: ok (none, all, some of the Secrets there; refusals)"
fi
exit $failed
