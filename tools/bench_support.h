/*
 * bench_support: what the benchmarks under tools/ share — a stack's env
 * file, its PostgreSQL's durability, the CPU its processes used, a monotonic clock, latency
 * percentiles, and an RPC client to auth through the broker.
 */
#ifndef BENCH_SUPPORT_H
#define BENCH_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ks_rpc.h"

/* The largest request bench_auth_call packs; a larger one is KS_INTERNAL. */
#define BENCH_PAYLOAD_MAX 2048

/*
 * Copies the value of KEY from DIR/env (a stack started by
 * deploy/local/stack.sh: KEY=value lines) into out. Returns 0; -1 when
 * DIR/env cannot be read; -2 when KEY is not there or its value does not
 * fit in out_len bytes (out is then unspecified).
 */
int bench_stack_env(const char *dir, const char *key, char *out, size_t out_len);

/*
 * The broker options every auth benchmark takes: "--stack DIR" (the
 * broker from DIR/env) or "--broker URL". Returns 1 when flag is one of
 * them and broker is set; 0 when flag is neither (broker untouched); -1,
 * with a line on stderr, when DIR/env names no broker.
 */
int bench_broker_option(const char *flag, const char *value, char *broker, size_t broker_len);

/*
 * What a write's figures depend on: the settings of the PostgreSQL at dsn
 * that make a commit survive a crash (fsync, synchronous_commit,
 * full_page_writes), as one line for a benchmark's output, "durable" when
 * all are on, else marked unsafe (deploy/local/stack.sh --unsafe-fast).
 * Returns 0, or -1 when the server cannot be asked (out says so).
 */
int bench_pg_durability(const char *dsn, char *out, size_t out_len);

/*
 * CPU time (user + system, every thread) a stack's processes have used, in
 * clock ticks (bench_tick_us), read from /proc/PID/stat: sampled before and
 * after a phase, the difference over the requests served is the CPU each
 * request cost a process group, a figure that other load on the machine
 * disturbs less than requests per second. A process that is gone counts 0.
 */
long long bench_pid_ticks(long pid);

/* The processes of DIR/env's comma-separated pid list KEY, summed; 0 without KEY. */
long long bench_env_pids_ticks(const char *dir, const char *key);

/* The process whose pid is the first number of the file DIR/REL (e.g. "pids/broker.pid"). */
long long bench_pid_file_ticks(const char *dir, const char *rel);

/*
 * A stack's PostgreSQL: the postmaster (DIR/pg/postmaster.pid) and every
 * process it started (the backends of every service, its workers).
 */
long long bench_postgres_ticks(const char *dir);

/* The length of a clock tick in microseconds. */
double bench_tick_us(void);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t bench_now_ns(void);
/* Milliseconds since the epoch (the wall clock, as services stamp their rows). */
long long bench_wall_ms(void);

/* Sorts n samples in ascending order. */
void bench_sort_ns(int64_t *samples_ns, size_t n);

/* The sample at index n * pct / 100 of n > 0 sorted samples, pct 0..99. */
int64_t bench_percentile_ns(const int64_t *sorted_ns, size_t n, int pct);

/*
 * Dials auth's front on the broker base URL and waits up to 5 s for the
 * connection. On success *out is a connected client the caller frees with
 * ks_rpc_client_free; on error (-1) *out is NULL.
 */
int bench_auth_client(ks_rpc_client **out, const char *broker, int max_inflight);

/*
 * Packs m (at most BENCH_PAYLOAD_MAX bytes) and calls method with it.
 * Returns the call's code; *res holds the reply, which the caller clears
 * with ks_rpc_result_clear whatever the code.
 */
int bench_auth_call(ks_rpc_client *c, const char *request_id, const char *method,
                    const ProtobufCMessage *m, ks_rpc_result *res);

#endif
