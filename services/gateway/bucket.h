/*
 * bucket.c: rate-limit specs ("5:1/5s") and the in-process token buckets
 * that decide while Redis is unavailable, with the arithmetic of
 * ratelimit.lua.
 */
#ifndef GW_BUCKET_H
#define GW_BUCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A token bucket's parameters: capacity tokens at most, refill tokens added
 * every period_us. Tokens are counted in units of 1/period_us (integers),
 * exactly as ratelimit.lua does, which bounds capacity * period_us below
 * 2^53 (GW_LIMIT_UNITS_MAX).
 */
/*
 * Division by a divisor fixed at configuration time, as a multiply and a
 * shift (exact for every dividend below 2^GW_RECIP_BITS): the header numbers
 * of a decision are computed on every request, a 64-bit division costs tens
 * of cycles and the divisors are constants of the limit.
 */
typedef struct gw_recip {
        uint64_t mul; /* ceil(2^shift / d); 0: not made (plain division) */
        uint32_t shift;
        int64_t d;
} gw_recip;

#define GW_RECIP_BITS 54

gw_recip gw_recip_make(int64_t d);
/* floor(n / r.d), for 0 <= n < 2^GW_RECIP_BITS. */
static inline int64_t gw_recip_div(int64_t n, gw_recip r)
{
        if (r.mul == 0) {
                return n / r.d;
        }
        return (int64_t)(((unsigned __int128)(uint64_t)n * r.mul) >> r.shift);
}

typedef struct gw_limit {
        int64_t capacity;
        int64_t refill;
        int64_t period_us;
        gw_recip per_period, per_refill; /* made by gw_limit_make */
} gw_limit;

#define GW_LIMIT_CAPACITY_MAX  1000000
#define GW_LIMIT_PERIOD_MAX_US (24LL * 3600 * 1000000) /* one day */
#define GW_LIMIT_UNITS_MAX     (1LL << 53)
#define GW_LIMIT_KEY_MAX       96 /* bucket keys; longer ones are hashed down */
#define GW_LIMIT_SPEC_HELP     "CAPACITY:TOKENS/PERIOD (e.g. 5:1/5s, 500:500/1m) or off"

/* One decision, as the RateLimit-* headers carry it. */
typedef struct gw_decision {
        bool allowed;
        int64_t limit;     /* the bucket's capacity */
        int64_t remaining; /* whole tokens left after this request */
        int64_t retry_ms;  /* refused: when one token will be there; 0 when allowed */
        int64_t reset_ms;  /* when the bucket will be full again */
} gw_decision;

/*
 * Parses "CAPACITY:TOKENS/PERIOD" (PERIOD = [digits]unit, unit ms, s, m or h;
 * "5:1/5s", "500:500/1m", "10:1/s") or "off". Returns 0 with *out (and *off
 * false), 0 with *off true, or -1 with a message in err.
 */
int gw_limit_parse(const char *spec, gw_limit *out, bool *off, char *err, size_t err_len);
/* A limit with its divisions prepared; every gw_limit is made by this. */
gw_limit gw_limit_make(int64_t capacity, int64_t refill, int64_t period_us);
/* The same parameters for one of n replicas: capacity / n (at least 1), rate / n. */
gw_limit gw_limit_share(const gw_limit *lim, int64_t n);
/*
 * The clock of the in-process buckets: CLOCK_MONOTONIC_COARSE in us. Its
 * resolution is the kernel tick (1-4 ms), far below any bucket's period;
 * read once per decision, it costs a few ns where CLOCK_MONOTONIC costs
 * 30-70 ns in a VM (tools/bench_bucket.c measures both).
 */
int64_t gw_bucket_now_us(void);
/* That clock's resolution in ms, rounded up (what a reading may lag by). */
int64_t gw_bucket_clock_tick_ms(void);
/*
 * One decision on a bucket in units: *units is the bucket's content (updated),
 * *last_us its last refill (updated), now_us the clock. The arithmetic of
 * ratelimit.lua, in C. gw_limit_consume refills and takes one token (true
 * when there was one); gw_limit_describe adds what the headers say
 * (divisions, so only when a reply needs them); gw_limit_decide does both.
 */
bool gw_limit_consume(const gw_limit *lim, int64_t *units, int64_t *last_us, int64_t now_us);
void gw_limit_describe(const gw_limit *lim, int64_t units, bool allowed, gw_decision *out);
void gw_limit_decide(const gw_limit *lim, int64_t *units, int64_t *last_us, int64_t now_us,
                     gw_decision *out);

typedef struct gw_buckets gw_buckets;

/* An in-process table of at most max_keys buckets (least recently used evicted). */
int gw_buckets_new(gw_buckets **out, size_t max_keys);
void gw_buckets_free(gw_buckets *b);
/* Takes one token from key's bucket (a new key starts full); now_us is monotonic. */
void gw_buckets_take(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                     int64_t now_us, gw_decision *out);
/* The same, answering only whether the token was there (no header numbers). */
bool gw_buckets_consume(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                        int64_t now_us);
size_t gw_buckets_count(const gw_buckets *b);

#endif
