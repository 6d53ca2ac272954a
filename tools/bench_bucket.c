/*
 * bench_bucket: the gateway's in-process token buckets (services/gateway/
 * bucket.c, what decides while Redis is unavailable), consume operations
 * per second over 1,024 keys on one thread.
 *
 *   bench_bucket [seconds per run, default 2]
 *
 * Rows: consume alone (one clock read per 1,024 operations: a bound, not
 * what a request costs); consume with a CLOCK_MONOTONIC read each; and the
 * gateway's per-request path, a decision with the numbers of the RateLimit-*
 * headers and a read of the clock the gateway really uses for its buckets
 * (gw_bucket_now_us, CLOCK_MONOTONIC_COARSE), plus the same path with
 * CLOCK_MONOTONIC for comparison. The per-request row is the headline. Rates
 * are per CPU-second of the benchmark's thread (and per wall-clock second,
 * in brackets). Printed against the reference figure from DESIGN.md
 * (14.8 M consume/s, Node on an Apple M3 Pro): not measured here, so the
 * ratio says "faster or slower than that claim", not more.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bucket.h"

#define KEYS        1024
#define KEY_LEN_MAX 48
#define REFERENCE   14.8e6 /* consume/s, Node on an Apple M3 Pro (DESIGN.md) */
#define BATCH       (64 * KEYS)

static char keys[KEYS][KEY_LEN_MAX];
static size_t key_lens[KEYS];

enum { CLOCK_BATCH, CLOCK_PRECISE, CLOCK_GATEWAY }; /* when and which clock is read */

static int64_t precise_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static double seconds_since(clockid_t clock, const struct timespec *t0)
{
        struct timespec t;
        clock_gettime(clock, &t);
        return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

enum { CONSUME, TAKE }; /* take: also the numbers of the RateLimit-* headers */

/*
 * Runs batches until `seconds` of this thread's CPU time pass; returns
 * operations per CPU second (*wall_rate: per wall-clock second). CPU time,
 * because on a shared machine the wall clock also counts the time other
 * processes had the core.
 */
static double run(gw_buckets *b, const gw_limit *lim, double seconds, int clock, int what,
                  uint64_t *allowed, double *wall_rate)
{
        struct timespec t0, w0;
        uint64_t ops = 0;
        gw_decision d;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        clock_gettime(CLOCK_MONOTONIC, &w0);
        do {
                int64_t t = precise_us();
                for (uint32_t i = 0; i < BATCH; i++) {
                        uint32_t k = (i * 2654435761u) & (KEYS - 1); /* not in key order */
                        if (clock == CLOCK_PRECISE) {
                                t = precise_us();
                        } else if (clock == CLOCK_GATEWAY) {
                                t = gw_bucket_now_us();
                        }
                        if (what == CONSUME) {
                                *allowed += gw_buckets_consume(b, keys[k], key_lens[k], lim, t);
                        } else {
                                gw_buckets_take(b, keys[k], key_lens[k], lim, t, &d);
                                *allowed += d.allowed;
                        }
                }
                ops += BATCH;
        } while (seconds_since(CLOCK_THREAD_CPUTIME_ID, &t0) < seconds);
        *wall_rate = (double)ops / seconds_since(CLOCK_MONOTONIC, &w0);
        return (double)ops / seconds_since(CLOCK_THREAD_CPUTIME_ID, &t0);
}

static void print_row(const char *what, double ops, double wall)
{
        printf("  %-46s %7.2f M/s  %5.2fx the 14.8 M/s reference  (wall clock: %.2f M/s)\n", what,
               ops / 1e6, ops / REFERENCE, wall / 1e6);
}

int main(int argc, char **argv)
{
        double seconds = argc > 1 ? atof(argv[1]) : 2.0;
        /* the api scope's default, 500 per minute, made as the gateway makes it */
        gw_limit lim = gw_limit_make(500, 500, 60000000);
        gw_buckets *b = NULL;
        uint64_t allowed = 0;
        if (seconds <= 0 || seconds > 600 || gw_buckets_new(&b, KEYS) != 0) {
                fprintf(stderr, "usage: bench_bucket [seconds per run, 0-600]\n");
                return 2;
        }
        for (int i = 0; i < KEYS; i++) {
                /* the shape of an api-scope key: "t:" and a tenant uuid */
                key_lens[i] = (size_t)snprintf(keys[i], KEY_LEN_MAX, "t:%08x-0000-4000-8000-%012x",
                                               i * 7919, i);
        }
        double w1, w2, w3, w4;
        run(b, &lim, 0.2, CLOCK_PRECISE, CONSUME, &allowed, &w1); /* warm-up */
        double request = run(b, &lim, seconds, CLOCK_GATEWAY, TAKE, &allowed, &w1);
        double request_precise = run(b, &lim, seconds, CLOCK_PRECISE, TAKE, &allowed, &w2);
        double consume = run(b, &lim, seconds, CLOCK_BATCH, CONSUME, &allowed, &w3);
        double consume_clock = run(b, &lim, seconds, CLOCK_PRECISE, CONSUME, &allowed, &w4);
        printf("in-process token bucket, %d keys, one thread, %.1f CPU-seconds per row\n", KEYS,
               seconds);
        print_row("per request: coarse clock + decision + headers", request, w1);
        print_row("  the same with CLOCK_MONOTONIC", request_precise, w2);
        print_row("consume only, one clock read per 1,024", consume, w3);
        print_row("consume + a CLOCK_MONOTONIC read each", consume_clock, w4);
        printf("  (the reference is Node on an Apple M3 Pro, from DESIGN.md: not measured here; "
               "%llu allowed)\n",
               (unsigned long long)allowed);
        gw_buckets_free(b);
        return 0;
}
