#!/usr/bin/env bash
# Builds keelson's image with podman (deploy/container/Containerfile), tags it
# keelson:<tag> with the tag of k8s/base/kustomization.yaml (the one place it
# is set), then checks it: the image's size, its user, and `ldd` on every
# binary inside it (any "not found" fails the build).
#
#   build.sh [--local-base]
#
# --local-base: build on localhost/debian:bookworm, made from Debian's mirror
# by local-base.sh when it is not there yet (a machine with no registry). It
# is used without the flag whenever it exists. Otherwise the base is
# docker.io/library/debian:bookworm-slim.
#
# Environment: JOBS (ninja's -j, default 2), PODMAN_BUILD_ARGS (more podman
# build options, split on spaces).
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
LOCAL_BASE=localhost/debian:bookworm

die() {
        printf 'build: %s\n' "$*" >&2
        exit 1
}
log() { printf 'build: %s\n' "$*" >&2; }

local_base=0
case "${1-}" in
--local-base) local_base=1 ;;
"") ;;
*) die "usage: build.sh [--local-base]" ;;
esac

command -v podman >/dev/null || die "podman is missing: apt-get install podman"
IMAGE=$("$SCRIPT_DIR/image-ref.sh")
TAG=${IMAGE##*:}

# shellcheck source=podman-compat.sh
. "$SCRIPT_DIR/podman-compat.sh"

base=docker.io/library/debian:bookworm-slim
if [ $local_base = 1 ]; then
        "$SCRIPT_DIR/local-base.sh"
fi
if podman image exists "$LOCAL_BASE"; then
        base=$LOCAL_BASE
fi
log "base: $base"
podman_compat "$base" || die "podman cannot run containers on this machine"

revision=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then
        revision="$revision-dirty"
fi

# --network host: the build's apt reaches the mirror as this machine does.
# shellcheck disable=SC2086 # PODMAN_BUILD_ARGS is split on purpose
"${PODMAN[@]}" build --network host "${PODMAN_LIMITS[@]+"${PODMAN_LIMITS[@]}"}" \
        -f "$SCRIPT_DIR/Containerfile" --ignorefile "$SCRIPT_DIR/.containerignore" \
        --build-arg "BASE_IMAGE=$base" \
        --build-arg "JOBS=${JOBS:-2}" --build-arg "VERSION=$TAG" \
        --build-arg "REVISION=$revision" \
        --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
        ${PODMAN_BUILD_ARGS-} -t "$IMAGE" "$ROOT"

# ---- checks -------------------------------------------------------------------

size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
log "image $IMAGE: $(awk -v b="$size" 'BEGIN { printf "%.1f MB (%d bytes)", b / 1e6, b }'), user $user"
[ "$user" = 10001:10001 ] || die "the image runs as '$user', not 10001:10001"

# As Kubernetes runs it: uid 10001, read-only root, no capabilities.
run=("${PODMAN[@]}" run --rm --network host "${PODMAN_LIMITS[@]+"${PODMAN_LIMITS[@]}"}")
log "runtime packages: $("${run[@]}" "$IMAGE" \
        cat /usr/local/share/keelson/runtime-packages.txt | tr '\n' ' ')"
# shellcheck disable=SC2016 # expanded by the sh inside the image
out=$("${run[@]}" --read-only --cap-drop all --security-opt no-new-privileges \
        --user 10001:10001 "$IMAGE" /bin/sh -c '
        set -e
        n=0
        for b in /usr/local/bin/keelson-*; do
                echo "== $b"
                ldd "$b"
                n=$((n + 1))
        done
        [ "$n" -eq 8 ] || { echo "expected 8 binaries, found $n"; exit 1; }
        test -s /etc/ssl/certs/ca-certificates.crt || { echo "no CA bundle"; exit 1; }
        [ "$(id -u):$(id -g)" = 10001:10001 ] || { echo "runs as $(id -u):$(id -g)"; exit 1; }
') || {
        printf '%s\n' "$out" >&2
        die "the check inside the image failed"
}
if printf '%s\n' "$out" | grep -q 'not found'; then
        printf '%s\n' "$out" | grep -E '^==|not found' >&2
        die "a binary misses a shared library"
fi
log "ldd: every shared library of the 8 binaries is there; CA bundle present"
printf '%s\n' "$out" | awk '$2 == "=>" { print $1 }' | sort -u | tr '\n' ' ' | sed 's/^/build: libraries: /;s/ $/\n/' >&2
log "built $IMAGE"
