#!/usr/bin/env bash
# bench_http_front.sh: the HTTP front candidates (tools/http_front/) measured
# in one run against minimal_evhttp, the baseline the gateway's performance
# target names: wrk over HTTP/1.1 and h2load over cleartext HTTP/2 (prior
# knowledge; minimal_evhttp has none), 10 and 50 connections, the server on
# 1 and 2 threads. Every candidate serves the same 20-byte body.
#
#   tools/bench_http_front.sh [BUILD_DIR (build)] [SECONDS per run (5)] [ROUNDS (3)]
#
# Each configuration runs every candidate in turn, ROUNDS times (a fresh
# server each run), so that other load on the machine falls on all alike.
# It prints one markdown row per candidate and configuration: the median
# requests/s, the ratio to the baseline at the same threads and connections
# (HTTP/1.1: minimal_evhttp; h2c, which minimal_evhttp lacks: minimal_h2o),
# the median CPU the server spent (100% = one core, from /proc), the median
# server CPU time per request (the figure least moved by other load) and
# each round's requests/s. The load generator runs on the same machine with 2
# threads, so on a small machine server and client share the cores: compare
# rows of one run, not runs of different machines.
# Needs wrk and h2load (apt-get install wrk nghttp2-client).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=$(cd "${1:-$ROOT/build}" && pwd)/tools
DURATION=${2:-5}
REPEAT=${3:-3}
CANDIDATES=(minimal_evhttp minimal_h2o minimal_strict)
THREADS=(1 2)
CONNECTIONS=(10 50)
H2_STREAMS=10
TICKS=$(getconf CLK_TCK)
SERVER_PID=

die() {
	echo "bench_http_front: $*" >&2
	exit 1
}

for tool in wrk h2load ss; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (apt-get install wrk nghttp2-client iproute2)"
done
[ -x "$BIN/minimal_evhttp" ] || die "no $BIN/minimal_evhttp: build first (make build)"

stop_server() {
	if [ -n "$SERVER_PID" ]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
		SERVER_PID=
	fi
}
trap stop_server EXIT

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

start_server() { # NAME THREADS PORT
	"$BIN/$1" "$3" "$2" &
	SERVER_PID=$!
	for _ in $(seq 1 50); do
		if ss -Hltn "sport = :$3" 2>/dev/null | grep -q .; then
			return
		fi
		sleep 0.1
	done
	die "$1 did not listen on $3"
}

cpu_ticks() { # utime + stime of the server, in clock ticks
	awk '{ print $14 + $15 }' "/proc/$SERVER_PID/stat"
}

# Runs one load and prints "REQ_PER_S CPU_PERCENT CPU_US_PER_REQUEST".
measure() { # PROTO CONNECTIONS URL
	local before after rps
	before=$(cpu_ticks)
	if [ "$1" = h1 ]; then
		rps=$(wrk -t2 -c"$2" -d"${DURATION}s" "$3" | awk '/^Requests\/sec:/ { printf "%d", $2 }')
	else
		rps=$(h2load -t2 -c"$2" -m"$H2_STREAMS" -D "$DURATION" "$3" |
			awk '/^finished in/ { sub(/,/, "", $4); printf "%d", $4 }')
	fi
	after=$(cpu_ticks)
	# CPU % of one core, and CPU microseconds per request
	echo "${rps:-0} $(((after - before) * 100 / TICKS / DURATION))" \
		"$(awk -v t=$((after - before)) -v hz="$TICKS" -v r="${rps:-0}" -v d="$DURATION" \
			'BEGIN { if (r > 0) printf "%.1f", t / hz * 1e6 / (r * d); else print 0 }')"
}

median() { # numbers on stdin -> the median
	sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}

# One configuration: every candidate in turn, REPEAT rounds, so that a burst
# of other load on the machine falls on all of them alike; medians printed.
run_config() { # THREADS PROTO CONNECTIONS
	local -A rps_of cpu_of us_of
	local name port rps cpu us base base_rps ratio label
	for _ in $(seq 1 "$REPEAT"); do
		for name in "${CANDIDATES[@]}"; do
			[ -x "$BIN/$name" ] || continue
			[ "$2" = h2c ] && [ "$name" = minimal_evhttp ] && continue
			port=$(free_port)
			start_server "$name" "$1" "$port"
			read -r rps cpu us < <(measure "$2" "$3" "http://127.0.0.1:$port/")
			stop_server
			rps_of[$name]+="$rps "
			cpu_of[$name]+="$cpu "
			us_of[$name]+="$us "
		done
	done
	base=minimal_evhttp
	[ "$2" = h2c ] && base=minimal_h2o
	label=$2
	[ "$2" = h2c ] && label="h2c (${H2_STREAMS} streams/conn)"
	for name in "${CANDIDATES[@]}"; do
		[ -n "${rps_of[$name]:-}" ] || continue
		rps=$(tr ' ' '\n' <<<"${rps_of[$name]}" | grep . | median)
		cpu=$(tr ' ' '\n' <<<"${cpu_of[$name]}" | grep . | median)
		us=$(tr ' ' '\n' <<<"${us_of[$name]}" | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
		base_rps=$(tr ' ' '\n' <<<"${rps_of[$base]:-}" | grep . | median || true)
		ratio=$(awk -v a="$rps" -v b="${base_rps:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
		echo "| $name | $1 | $label | $3 | $rps | $ratio | ${cpu}% | $us | ${rps_of[$name]% } |"
	done
}

for name in "${CANDIDATES[@]}"; do
	[ -x "$BIN/$name" ] || echo "(skipped $name: not built)" >&2
done
echo "| server | threads | protocol | connections | req/s (median) | ratio (h1: to minimal_evhttp, h2c: to minimal_h2o) | server CPU | server CPU µs/request | req/s of each round |"
echo "|---|---|---|---|---|---|---|---|---|"
for threads in "${THREADS[@]}"; do
	for proto in h1 h2c; do
		for conns in "${CONNECTIONS[@]}"; do
			run_config "$threads" "$proto" "$conns"
		done
	done
done
