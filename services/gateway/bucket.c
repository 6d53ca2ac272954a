/*
 * Rate-limit specs ("5:1/5s") and the in-process token buckets the gateway
 * falls back to while Redis is unavailable (and that tools/bench_bucket.c
 * measures).
 *
 * The arithmetic is ratelimit.lua's, in C: tokens are counted in units of
 * 1/period_us so that every refill is an exact integer (elapsed_us * refill)
 * and a client that waits the retry-after it was given always finds its
 * token. A key that is not in the table is a full bucket, which is also why
 * evicting the least recently used key is safe: at worst it forgets a
 * partly spent bucket, never grants more than capacity at once.
 *
 * The table: a fixed array of max_keys entries (keys inline, no allocation
 * per key), found through a ks_hmap and ordered by a ks_lru. One thread only
 * (the loop, or a benchmark).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "ks_clock.h"
#include "ks_hmap.h"
#include "ks_lru.h"

#define DIGITS_MAX       9
#define US_PER_MS        1000LL
#define BUCKETS_KEYS_MAX (1u << 24)

/* ---- specs ----------------------------------------------------------------- */

/* 1..DIGITS_MAX decimal digits at *p; advances *p. Returns -1 when none. */
static int64_t parse_digits(const char **p)
{
        int64_t v = 0;
        int n = 0;
        while (**p >= '0' && **p <= '9' && n < DIGITS_MAX) {
                v = v * 10 + (**p - '0');
                (*p)++;
                n++;
        }
        return n > 0 && !(**p >= '0' && **p <= '9') ? v : -1;
}

static int64_t unit_us(const char *u)
{
        static const struct {
                const char *name;
                int64_t us;
        } units[] = {{"ms", 1000LL}, {"s", 1000000LL}, {"m", 60000000LL}, {"h", 3600000000LL}};
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
                if (strcmp(u, units[i].name) == 0) {
                        return units[i].us;
                }
        }
        return -1;
}

static int spec_fail(char *err, size_t err_len, const char *spec, const char *why)
{
        snprintf(err, err_len, "\"%.64s\": %s", spec, why);
        return -1;
}

int gw_limit_parse(const char *spec, gw_limit *out, bool *off, char *err, size_t err_len)
{
        const char *p = spec;
        *off = false;
        if (strcmp(spec, "off") == 0) {
                *off = true;
                return 0;
        }
        int64_t cap = parse_digits(&p);
        if (cap < 0 || *p++ != ':') {
                return spec_fail(err, err_len, spec, "expected " GW_LIMIT_SPEC_HELP);
        }
        int64_t refill = parse_digits(&p);
        if (refill < 0 || *p++ != '/') {
                return spec_fail(err, err_len, spec, "expected " GW_LIMIT_SPEC_HELP);
        }
        int64_t count = *p >= '0' && *p <= '9' ? parse_digits(&p) : 1;
        int64_t unit = unit_us(p);
        if (count < 1 || unit < 0) {
                return spec_fail(err, err_len, spec,
                                 "the period is [digits]unit with unit ms, s, m or h (5s, 1m)");
        }
        if (cap < 1 || cap > GW_LIMIT_CAPACITY_MAX || refill < 1 ||
            refill > GW_LIMIT_CAPACITY_MAX) {
                return spec_fail(err, err_len, spec, "capacity and tokens must be 1..1000000");
        }
        if (count * unit > GW_LIMIT_PERIOD_MAX_US) {
                return spec_fail(err, err_len, spec, "the period must be at most 24h");
        }
        if (cap * count * unit >= GW_LIMIT_UNITS_MAX) {
                return spec_fail(err, err_len, spec,
                                 "capacity x period must stay below 2^53 token-microseconds");
        }
        *out = gw_limit_make(cap, refill, count * unit);
        return 0;
}

/*
 * m = ceil(2^F / d) with F = GW_RECIP_BITS + ceil(log2 d). Then m * d =
 * 2^F + e with 0 <= e < d <= 2^ceil(log2 d), so for n < 2^GW_RECIP_BITS
 * the error e * n / (d * 2^F) stays below 1/d and floor(n * m / 2^F) is
 * exactly floor(n / d). m < 2^(GW_RECIP_BITS + 2) and F < 128 - 56 for
 * every divisor here (d < 2^47), so n * m fits in 128 bits.
 */
gw_recip gw_recip_make(int64_t d)
{
        gw_recip r = {0, 0, d > 0 ? d : 1};
        uint32_t log2_ceil = 0;
        while (log2_ceil < 62 && ((int64_t)1 << log2_ceil) < r.d) {
                log2_ceil++;
        }
        if (log2_ceil > 47) {
                return r; /* out of the proven range: plain division */
        }
        r.shift = GW_RECIP_BITS + log2_ceil;
        unsigned __int128 one = (unsigned __int128)1 << r.shift;
        r.mul = (uint64_t)((one + (unsigned __int128)r.d - 1) / (unsigned __int128)r.d);
        return r;
}

gw_limit gw_limit_make(int64_t capacity, int64_t refill, int64_t period_us)
{
        gw_limit lim = {capacity, refill, period_us, gw_recip_make(period_us),
                        gw_recip_make(refill)};
        return lim;
}

gw_limit gw_limit_share(const gw_limit *lim, int64_t n)
{
        if (n <= 1) {
                return *lim;
        }
        /* the same tokens over n periods */
        return gw_limit_make(lim->capacity / n > 0 ? lim->capacity / n : 1, lim->refill,
                             lim->period_us * n);
}

int64_t gw_bucket_now_us(void)
{
        return ks_mono_coarse_us();
}

int64_t gw_bucket_clock_tick_ms(void)
{
        return ks_mono_coarse_tick_ms();
}

/* ---- the arithmetic (ratelimit.lua) ----------------------------------------- */

/* ceil(a / b) for 0 <= a < 2^53: a + b - 1 stays below 2^GW_RECIP_BITS. */
static int64_t div_ceil(int64_t a, gw_recip b)
{
        return gw_recip_div(a + b.d - 1, b);
}

static int64_t ms_ceil(int64_t us)
{
        return (us + US_PER_MS - 1) / US_PER_MS; /* a constant: the compiler multiplies */
}

bool gw_limit_consume(const gw_limit *lim, int64_t *units, int64_t *last_us, int64_t now_us)
{
        int64_t full = lim->capacity * lim->period_us;
        int64_t s = *units;
        if (s < 0 || s > full) {
                s = full;
        }
        if (now_us > *last_us) {
                /* 128 bits: a long idle times the refill rate overflows 64 (then: full). */
                __int128 added = (__int128)(now_us - *last_us) * lim->refill;
                s = added >= full - s ? full : s + (int64_t)added;
                *last_us = now_us;
        }
        bool allowed = s >= lim->period_us; /* one token */
        *units = allowed ? s - lim->period_us : s;
        return allowed;
}

void gw_limit_describe(const gw_limit *lim, int64_t units, bool allowed, gw_decision *out)
{
        int64_t full = lim->capacity * lim->period_us;
        out->allowed = allowed;
        out->limit = lim->capacity;
        out->remaining = gw_recip_div(units, lim->per_period);
        out->retry_ms = allowed ? 0 : ms_ceil(div_ceil(lim->period_us - units, lim->per_refill));
        out->reset_ms = ms_ceil(div_ceil(full - units, lim->per_refill));
}

void gw_limit_decide(const gw_limit *lim, int64_t *units, int64_t *last_us, int64_t now_us,
                     gw_decision *out)
{
        bool allowed = gw_limit_consume(lim, units, last_us, now_us);
        gw_limit_describe(lim, *units, allowed, out);
}

/* ---- the table --------------------------------------------------------------- */

typedef struct bucket {
        int64_t units;
        int64_t last_us;
        uint8_t key_len;
        char key[GW_LIMIT_KEY_MAX];
} bucket;

struct gw_buckets {
        bucket *v;     /* max of them, indexed by slot */
        ks_hmap index; /* key -> slot (keyed: clients choose the keys) */
        ks_lru lru;    /* slot order of use; a new key past max evicts the oldest */
};

int gw_buckets_new(gw_buckets **out, size_t max_keys)
{
        *out = NULL;
        if (max_keys < 1 || max_keys > BUCKETS_KEYS_MAX) {
                return -1;
        }
        gw_buckets *b = calloc(1, sizeof(*b));
        if (b == NULL) {
                return -1;
        }
        b->v = calloc(max_keys, sizeof(*b->v));
        if (b->v == NULL || ks_hmap_init(&b->index, (uint32_t)max_keys) != 0 ||
            ks_lru_init(&b->lru, (uint32_t)max_keys) != 0) {
                gw_buckets_free(b);
                return -1;
        }
        *out = b;
        return 0;
}

void gw_buckets_free(gw_buckets *b)
{
        if (b == NULL) {
                return;
        }
        ks_lru_fini(&b->lru);
        ks_hmap_fini(&b->index);
        free(b->v);
        free(b);
}

size_t gw_buckets_count(const gw_buckets *b)
{
        return ks_lru_count(&b->lru);
}

/* The entry of key, made (full) when it is new. */
static uint32_t entry_of(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                         int64_t now_us)
{
        if (key_len > GW_LIMIT_KEY_MAX) {
                key_len = GW_LIMIT_KEY_MAX; /* ratelimit.c hashes long keys down first */
        }
        uint64_t h = ks_hmap_hash(&b->index, key, key_len);
        for (uint32_t i = ks_hmap_first(&b->index, h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&b->index, i)) {
                if (b->v[i].key_len == key_len && memcmp(b->v[i].key, key, key_len) == 0) {
                        ks_lru_touch(&b->lru, i);
                        return i;
                }
        }
        bool evicted;
        uint32_t i = ks_lru_take(&b->lru, &evicted);
        if (evicted) {
                ks_hmap_remove(&b->index, i); /* forgetting a bucket never grants more than full */
        }
        bucket *e = &b->v[i];
        e->key_len = (uint8_t)key_len;
        memcpy(e->key, key, key_len);
        e->units = lim->capacity * lim->period_us; /* a new bucket is full */
        e->last_us = now_us;
        ks_hmap_insert(&b->index, i, h);
        return i;
}

bool gw_buckets_consume(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                        int64_t now_us)
{
        bucket *e = &b->v[entry_of(b, key, key_len, lim, now_us)];
        return gw_limit_consume(lim, &e->units, &e->last_us, now_us);
}

void gw_buckets_take(gw_buckets *b, const char *key, size_t key_len, const gw_limit *lim,
                     int64_t now_us, gw_decision *out)
{
        bucket *e = &b->v[entry_of(b, key, key_len, lim, now_us)];
        gw_limit_decide(lim, &e->units, &e->last_us, now_us, out);
}
