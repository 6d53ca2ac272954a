#!/bin/sh
# The dev overlay's four Secrets, as manifests for `kubectl apply
# --server-side`: run by the Job keelson-dev-secrets (secrets-job.yaml), whose
# init container mounts this file. Nothing here talks to the API server: the
# pod mounts each Secret as an optional volume under $IN/<name>/ (empty when
# the Secret does not exist), and this script writes $OUT/<name>.yaml for
# each of the four:
#
#   - a Secret that exists is written back exactly as it is, key for key, so
#     that the apply changes nothing (a password PostgreSQL already set is
#     never replaced, and one you chose stays yours);
#   - a Secret that is missing gets passwords that agree with its partner
#     when that exists (the DSNs of keelson-postgres with the role passwords
#     of keelson-dev-postgres-server, the URL of keelson-redis with the
#     password of keelson-dev-redis-server), fresh random ones otherwise.
#
# Every Secret is written, existing or not, so that the apply always has four
# objects, and so that the Job's field manager keeps owning, with the same
# values, whatever it created on an earlier run (a server-side apply that
# left a field out would delete it).
#
#   IN=dir OUT=dir secrets-job.sh      (defaults: /in and /out)
#
# It needs a POSIX shell, od, tr, sed and base64 (coreutils), nothing else.
# It prints what it does with each Secret, never a value.
set -eu

IN=${IN:-/in}
OUT=${OUT:-/out}
HOST=keelson-postgres:5432/keelson
REDIS_HOST=keelson-redis:6379
ROLES="auth billing ledger webhook summary"

die() {
        echo "secrets-job: $*" >&2
        exit 1
}

# 32 hex digits (128 bits): nothing to escape in a URL, a DSN or SQL.
pw() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }

# A Secret exists when its volume holds at least one key. (The kubelet also
# puts its own ..data links there, even for a Secret that does not exist: the
# glob does not list them.)
exists() {
        for f in "$IN/$1"/*; do
                [ -e "$f" ] && return 0
        done
        return 1
}

# One key of an existing Secret; a missing key is an error, not a new password.
key() {
        [ -f "$IN/$1/$2" ] || die "Secret $1 exists but has no key $2: add it, or delete the Secret to have it made anew"
        cat "$IN/$1/$2"
}

# A password that goes into a DSN or URL (or comes out of one) must need no
# escaping there: letters, digits and - . _ ~ only.
checked() {
        case $2 in
        "") die "$1: no password found in it" ;;
        *[!A-Za-z0-9._~-]*) die "$1: a password with a character a URL would need escaped; choose one of letters, digits and - . _ ~" ;;
        esac
        printf '%s' "$2"
}

# The password in postgresql://user:<password>@host... or redis://:<password>@host...
password_of() { sed -n 's|^[a-z]*://[^:/@]*:\([^@]*\)@.*$|\1|p'; }

header() {
        printf 'apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n' "$1"
        printf '  labels:\n    app.kubernetes.io/part-of: keelson\ndata:\n'
}

# keep NAME: writes the existing Secret back, every key as it is. (A key whose
# name starts with a dot is not listed by the glob: the Job never wrote one,
# so its apply leaves such a key alone.)
keep() {
        {
                header "$1"
                for f in "$IN/$1"/*; do
                        printf '  %s: %s\n' "${f##*/}" "$(base64 -w0 <"$f")"
                done
        } >"$OUT/$1.yaml"
        echo "secrets-job: Secret $1 exists: kept as it is"
}

# make NAME KEY=VALUE...: a new Secret.
make() {
        name=$1 keys=""
        shift
        {
                header "$name"
                for kv in "$@"; do
                        printf '  %s: %s\n' "${kv%%=*}" "$(printf '%s' "${kv#*=}" | base64 -w0)"
                        keys="$keys ${kv%%=*}"
                done
        } >"$OUT/$name.yaml"
        echo "secrets-job: Secret $name is missing: made, keys$keys"
}

# The password of one PostgreSQL role: from keelson-dev-postgres-server
# ($1, e.g. auth-login-password), else from the DSN in keelson-postgres ($2,
# e.g. auth-login-dsn), else new.
pg_password() {
        if exists keelson-dev-postgres-server; then
                checked "keelson-dev-postgres-server $1" "$(key keelson-dev-postgres-server "$1")"
        elif exists keelson-postgres; then
                checked "keelson-postgres $2" "$(key keelson-postgres "$2" | password_of)"
        else
                pw
        fi
}

redis_password() {
        if exists keelson-dev-redis-server; then
                checked "keelson-dev-redis-server password" "$(key keelson-dev-redis-server password)"
        elif exists keelson-redis; then
                checked "keelson-redis url" "$(key keelson-redis url | password_of)"
        else
                pw
        fi
}

[ -d "$OUT" ] || die "$OUT: no such folder"
umask 027

# ---- PostgreSQL ------------------------------------------------------------------

if exists keelson-postgres && exists keelson-dev-postgres-server; then
        keep keelson-postgres
        keep keelson-dev-postgres-server
else
        owner=$(pg_password owner-password owner-dsn)
        dsns="owner-dsn=postgresql://keelson:$owner@$HOST"
        server="owner-password=$owner"
        for r in $ROLES; do
                p=$(pg_password "$r-login-password" "$r-login-dsn")
                dsns="$dsns $r-login-dsn=postgresql://keelson_${r}_login:$p@$HOST"
                server="$server $r-login-password=$p"
        done
        if exists keelson-postgres; then
                keep keelson-postgres
        else
                # shellcheck disable=SC2086 # one word per key, none has a space
                make keelson-postgres $dsns
        fi
        if exists keelson-dev-postgres-server; then
                keep keelson-dev-postgres-server
        else
                # The superuser is in no DSN: new whenever this Secret is. A
                # PostgreSQL whose volume is initialised ignores it.
                # shellcheck disable=SC2086
                make keelson-dev-postgres-server superuser-password="$(pw)" $server
        fi
fi

# ---- Redis ---------------------------------------------------------------------------

if exists keelson-redis && exists keelson-dev-redis-server; then
        keep keelson-redis
        keep keelson-dev-redis-server
        exit 0
fi
redis=$(redis_password)
if exists keelson-redis; then
        keep keelson-redis
else
        make keelson-redis "url=redis://:$redis@$REDIS_HOST"
fi
if exists keelson-dev-redis-server; then
        keep keelson-dev-redis-server
else
        # redis.conf is mounted as Redis's configuration file, so that the
        # password never appears on its command line.
        make keelson-dev-redis-server "password=$redis" "redis.conf=requirepass $redis"
fi
