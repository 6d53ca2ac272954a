# shellcheck shell=bash
# Sourced by build.sh and smoke.sh: how podman runs a container on this
# machine. Sets PODMAN (the command and its global options) and
# PODMAN_LIMITS (options for `podman run` and `podman build`).
#
# podman's defaults work on an ordinary Debian 12 host. Two kinds of machine
# need more, both seen on CI's VMs:
#
# - cgroups in hybrid mode (v1 controllers plus an empty cgroup2 at
#   /sys/fs/cgroup/unified): Debian 12's crun (1.8) refuses to start any
#   container there ("cgroups in hybrid mode not supported"), even with
#   --cgroups=disabled; runc (Debian's package runc) runs them.
# - no CAP_SYS_RESOURCE: podman asks for nofile 1048576 and a large nproc,
#   setrlimit fails ("error setting rlimit type 7: operation not
#   permitted"). Asking for the machine's own hard limits works: nofile as
#   `ulimit -Hn`, nproc as `ulimit -Hu` but at most kernel.pid_max, which is
#   what podman's monitor (conmon) gets.
#
# podman_compat IMAGE tries the defaults with IMAGE (`true` in it), then
# runc with those limits, and fails saying what it tried. KEELSON_PODMAN
# (e.g. "podman --runtime runc") skips the probe.

PODMAN=(podman)
PODMAN_LIMITS=()

podman_compat() {
        local image=$1 nofile nproc pid_max err
        if [ -n "${KEELSON_PODMAN-}" ]; then
                read -r -a PODMAN <<<"$KEELSON_PODMAN"
                return 0
        fi
        if err=$(podman run --rm --network host "$image" true 2>&1); then
                return 0
        fi
        nofile=$(ulimit -Hn)
        nproc=$(ulimit -Hu)
        pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
        [ "$nproc" != unlimited ] && [ "$nproc" -le "$pid_max" ] || nproc=$pid_max
        [ "$nofile" != unlimited ] || nofile=1048576
        PODMAN=(podman)
        command -v runc >/dev/null && PODMAN=(podman --runtime runc)
        PODMAN_LIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
        if "${PODMAN[@]}" run --rm --network host "${PODMAN_LIMITS[@]}" "$image" true >/dev/null 2>&1; then
                printf 'podman: the defaults fail here (%s); using: %s %s\n' \
                        "$(printf '%s' "$err" | tail -n 1)" "${PODMAN[*]}" "${PODMAN_LIMITS[*]}" >&2
                return 0
        fi
        printf 'podman cannot run a container here: %s\n' "$err" >&2
        command -v runc >/dev/null ||
                printf 'podman: with cgroups in hybrid mode, apt-get install runc\n' >&2
        return 1
}
