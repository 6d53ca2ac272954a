#!/bin/sh
# Writes the dev overlay's Secrets, as env files under secrets/ (git ignores
# them), with a fresh random password for PostgreSQL's superuser, the schema
# owner keelson, each service's login role, and Redis. kustomize's
# secretGenerator turns them into the Secrets keelson-postgres, keelson-redis,
# keelson-dev-postgres-server and keelson-dev-redis-server.
#
#   make-secrets.sh [--force]
#
# Run it once, before the first `kubectl apply -k`. PostgreSQL sets its
# passwords at its first start only (an empty volume), so the files must then
# stay as they are: an existing file is never overwritten without --force, and
# with --force the cluster's PostgreSQL volume must be started afresh
# (kubectl -n keelson delete statefulset,pvc -l app.kubernetes.io/name=keelson-postgres).
set -eu

dir=$(cd "$(dirname "$0")" && pwd)/secrets
force=0
case "${1:-}" in
--force) force=1 ;;
"") ;;
*) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

mkdir -p "$dir"
files="postgres.env postgres-server.env redis.env redis-server.env"
have=0
for f in $files; do
        [ ! -e "$dir/$f" ] || have=$((have + 1))
done
if [ $force = 0 ] && [ $have = 4 ]; then
        echo "$dir: every file is there already, kept (--force writes new passwords)" >&2
        exit 0
fi
if [ $force = 0 ] && [ $have != 0 ]; then
        echo "$dir: only some of the files are there ($files): restore them, or --force" >&2
        exit 1
fi

# 32 hex digits (128 bits): nothing to escape in a URL, a DSN or SQL.
pw() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }

superuser=$(pw) owner=$(pw) redis=$(pw)
auth=$(pw) billing=$(pw) ledger=$(pw) webhook=$(pw) summary=$(pw)
host=keelson-postgres:5432/keelson

umask 077
cat >"$dir/postgres.env" <<END
owner-dsn=postgresql://keelson:$owner@$host
auth-login-dsn=postgresql://keelson_auth_login:$auth@$host
billing-login-dsn=postgresql://keelson_billing_login:$billing@$host
ledger-login-dsn=postgresql://keelson_ledger_login:$ledger@$host
webhook-login-dsn=postgresql://keelson_webhook_login:$webhook@$host
summary-login-dsn=postgresql://keelson_summary_login:$summary@$host
END
cat >"$dir/postgres-server.env" <<END
superuser-password=$superuser
owner-password=$owner
auth-login-password=$auth
billing-login-password=$billing
ledger-login-password=$ledger
webhook-login-password=$webhook
summary-login-password=$summary
END
cat >"$dir/redis.env" <<END
url=redis://:$redis@keelson-redis:6379
END
# redis.conf is mounted as Redis's configuration file, so that the password
# never appears on its command line.
cat >"$dir/redis-server.env" <<END
password=$redis
redis.conf=requirepass $redis
END
echo "wrote $dir/{postgres,postgres-server,redis,redis-server}.env"
