#!/usr/bin/env bash
# Builds the base image localhost/debian:bookworm from Debian's mirror, for
# machines that reach a Debian mirror but no container registry (build.sh
# --local-base calls it). debootstrap's minbase variant: the Priority:
# required packages and apt, as in debian:bookworm-slim, with the same dpkg
# excludes (no documentation, manual pages or translations). Root only.
#
#   local-base.sh [--force]    --force rebuilds an image already there
#
# The mirror is the first one this machine's apt uses for bookworm
# (/etc/apt/sources.list and sources.list.d/*.sources); DEBIAN_MIRROR
# overrides it.
set -euo pipefail

IMAGE=localhost/debian:bookworm
SUITE=bookworm

die() {
        printf 'local-base: %s\n' "$*" >&2
        exit 1
}
log() { printf 'local-base: %s\n' "$*" >&2; }

# The first bookworm URI of apt's sources, in either format.
apt_mirror() {
        local f
        for f in /etc/apt/sources.list.d/*.sources; do
                [ -f "$f" ] || continue
                awk -v suite="$SUITE" '
                        /^[[:space:]]*$/ { if (uri != "" && ok) { print uri; exit } uri = ""; ok = 0; next }
                        $1 == "URIs:" { uri = $2 }
                        $1 == "Suites:" { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
                        END { if (uri != "" && ok) print uri }' "$f" | head -n 1
        done
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
                [ -f "$f" ] || continue
                awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }' "$f"
        done
}

force=0
case "${1-}" in
--force) force=1 ;;
"") ;;
*) die "usage: local-base.sh [--force]" ;;
esac

[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
command -v podman >/dev/null || die "podman is missing: apt-get install podman"
if [ $force = 0 ] && podman image exists "$IMAGE"; then
        log "$IMAGE is there (--force rebuilds it)"
        exit 0
fi

mirror=${DEBIAN_MIRROR:-$(apt_mirror | head -n 1)}
mirror=${mirror:-http://deb.debian.org/debian}
security=${mirror%/debian}/debian-security

root=$(mktemp -d /tmp/keelson-base.XXXXXX)
trap 'rm -rf "$root"' EXIT

log "debootstrap --variant=minbase $SUITE from $mirror"
debootstrap --variant=minbase "$SUITE" "$root/rootfs" "$mirror" >"$root/debootstrap.log" 2>&1 ||
        { tail -n 30 "$root/debootstrap.log" >&2; die "debootstrap failed"; }

r=$root/rootfs
# As the official image: updates and security updates, no documentation, no
# recommends, and none of this machine's files (resolv.conf, hostname).
rm -f "$r/etc/apt/sources.list"
cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
echo 'APT::Install-Recommends "false";' >"$r/etc/apt/apt.conf.d/docker-no-recommends"
find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$r/usr/share/man" "$r/usr/share/info" "$r/usr/share/locale" -mindepth 1 -delete
rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
        "$r"/var/log/* "$r"/debootstrap
: >"$r/etc/resolv.conf"
: >"$r/etc/hostname"

podman image rm -f "$IMAGE" >/dev/null 2>&1 || true
tar -C "$r" --numeric-owner -c . |
        podman import --quiet --change 'CMD ["bash"]' \
                --message "debootstrap --variant=minbase $SUITE $mirror" - "$IMAGE" >/dev/null
log "$IMAGE: $(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')"
