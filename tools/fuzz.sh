#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and fuzzes each one.
#
#   tools/fuzz.sh [seconds] [target...]
#
# seconds   how long each target fuzzes (default 60; 0 = only replay)
# target    fuzz_json fuzz_base64 fuzz_password_parse fuzz_connect_headers
#           fuzz_redis_url fuzz_http1 fuzz_decode fuzz_webhook_signature
#           fuzz_grpc_frame fuzz_h2 fuzz_sp (default: all)
#
# Environment: FUZZ_BUILD (build tree, default build-fuzz), FUZZ_JOBS
# (targets fuzzing at once, default 2), FUZZ_RSS_MB (memory limit per target,
# default 2048).
#
# First every committed input is replayed: the seeds in
# tests/fuzz/corpus/<target>/ and the reproducers of bugs found before in
# tests/fuzz/regressions/<target>/. Then each target fuzzes from its seeds
# plus the corpus it grew in earlier runs (kept in the build tree). A crash,
# sanitizer report, leak, timeout or out-of-memory leaves its input in
# $FUZZ_BUILD/fuzz-artifacts/<target>/ and makes the script exit 1. To add a
# reproducer: minimise it (<binary> -minimize_crash=1 -runs=10000 <file>) and
# copy it into tests/fuzz/regressions/<target>/.
set -euo pipefail

cd "$(dirname "$0")/.."

ALL_TARGETS=(fuzz_json fuzz_base64 fuzz_password_parse fuzz_connect_headers fuzz_redis_url fuzz_http1 fuzz_decode
        fuzz_webhook_signature fuzz_grpc_frame fuzz_h2 fuzz_sp)
SECONDS_EACH=${1:-60}
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=("${ALL_TARGETS[@]}")
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-2}
RSS_MB=${FUZZ_RSS_MB:-2048}

if ! [[ $SECONDS_EACH =~ ^[0-9]+$ ]]; then
        echo "usage: tools/fuzz.sh [seconds] [target...]" >&2
        exit 2
fi

max_len() {
        case $1 in
        fuzz_json) echo 4096 ;;            # request bodies: small, deeply nested ones
        fuzz_base64) echo 1024 ;;
        fuzz_password_parse) echo 512 ;;   # longest valid hash is ~ 260 bytes
        fuzz_connect_headers) echo 1024 ;; # bearer tokens are refused past 512
        fuzz_redis_url) echo 1100 ;;       # a little past KS_REDIS_URL_MAX (1024)
        fuzz_http1) echo 4096 ;;           # twice the head limit the target sets
        fuzz_decode) echo 8192 ;;          # room for nesting and element-count cases
        fuzz_webhook_signature) echo 10000 ;; # past WH_HEADER_BYTES_MAX (8192), plus a body
        fuzz_grpc_frame) echo 12288 ;;     # a few messages around the target's 4 KiB bound
        fuzz_h2) echo 24576 ;;             # a connection: header blocks past the largest head_max (16 KiB)
        fuzz_sp) echo 12288 ;;             # a connection: messages around the target's 4 KiB receive bound
        *) echo "unknown target $1" >&2; exit 2 ;;
        esac
}

build() {
        if [[ ! -f $BUILD/build.ninja ]]; then
                CC=clang cmake -S . -B "$BUILD" -G Ninja -DKEELSON_FUZZ=ON -DKEELSON_TESTS=OFF \
                        >"$BUILD.configure.log" 2>&1 || {
                        cat "$BUILD.configure.log" >&2
                        exit 1
                }
                rm -f "$BUILD.configure.log"
        fi
        # Quiet unless it fails (a re-run of cmake prints to both streams).
        ninja -C "$BUILD" "${TARGETS[@]}" >"$BUILD/fuzz-build.log" 2>&1 || {
                cat "$BUILD/fuzz-build.log" >&2
                exit 1
        }
}

# Every committed input once: seeds must not crash, and fixed bugs stay fixed.
replay() {
        local t=$1 bin=$2 log=$3 files=()
        shopt -s nullglob
        files=(tests/fuzz/corpus/"$t"/* tests/fuzz/regressions/"$t"/*)
        shopt -u nullglob
        [[ ${#files[@]} -gt 0 ]] || return 0
        "$bin" -rss_limit_mb="$RSS_MB" -timeout=10 "${files[@]}" >"$log" 2>&1
}

# Fuzzes one target for SECONDS_EACH seconds; its log tells the figures.
fuzz_one() {
        local t=$1 bin=$BUILD/tests/fuzz/$1 out=$BUILD/fuzz-out/$1
        local corpus=$BUILD/fuzz-corpus/$t artifacts=$BUILD/fuzz-artifacts/$t/ dict=()
        mkdir -p "$corpus" "$artifacts" "$out"
        [[ -f tests/fuzz/$t.dict ]] && dict=(-dict="tests/fuzz/$t.dict")
        if ! replay "$t" "$bin" "$out/replay.log"; then
                echo replay >"$out/status"
                return 0
        fi
        if [[ $SECONDS_EACH -eq 0 ]]; then
                echo ok >"$out/status"
                return 0
        fi
        # The first corpus directory receives new inputs; the seeds stay untouched.
        if "$bin" "$corpus" "tests/fuzz/corpus/$t" "${dict[@]}" -max_len="$(max_len "$t")" \
                -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb="$RSS_MB" \
                -artifact_prefix="$artifacts" -print_final_stats=1 >"$out/fuzz.log" 2>&1; then
                echo ok >"$out/status"
        else
                echo crash >"$out/status"
        fi
}

report() {
        local t=$1 out=$BUILD/fuzz-out/$1 status execs
        status=$(cat "$out/status" 2>/dev/null || echo missing)
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz.log" 2>/dev/null |
                tail -1)
        case $status in
        ok)
                if [[ $SECONDS_EACH -eq 0 ]]; then
                        printf '%-22s committed inputs replay cleanly\n' "$t"
                else
                        printf '%-22s %12s executions in %ss, no crash\n' "$t" "${execs:-0}" \
                                "$SECONDS_EACH"
                fi
                return 0
                ;;
        replay)
                # libFuzzer stops at the first failing input: the last one it ran.
                printf '%-22s a committed input fails: %s (log: %s)\n' "$t" \
                        "$(sed -n 's/^Running: //p' "$out/replay.log" | tail -1)" "$out/replay.log"
                grep -m3 -E 'ERROR|^fuzz_[a-z_]+: ' "$out/replay.log" | sed 's/^/    /' || true
                ;;
        *)
                printf '%-22s %12s executions, CRASH: see %s\n' "$t" "${execs:-?}" "$out/fuzz.log"
                { grep -m3 -E '^fuzz_[a-z_]+: |ERROR' "$out/fuzz.log" || true
                  grep -o 'Test unit written to .*' "$out/fuzz.log" || true; } | sed 's/^/    /'
                ;;
        esac
        return 1
}

main() {
        local t running=0 failed=0
        for t in "${TARGETS[@]}"; do
                max_len "$t" >/dev/null
        done
        build
        for t in "${TARGETS[@]}"; do
                rm -f "$BUILD/fuzz-out/$t/status" "$BUILD/fuzz-out/$t/fuzz.log"
                fuzz_one "$t" &
                running=$((running + 1))
                if [[ $running -ge $JOBS ]]; then
                        wait -n || true
                        running=$((running - 1))
                fi
        done
        wait
        for t in "${TARGETS[@]}"; do
                report "$t" || failed=1
        done
        exit $failed
}

main
