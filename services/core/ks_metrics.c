/*
 * ks_metrics: registry and Prometheus text exposition (format 0.0.4).
 *
 * Creation and lookup take the registry mutex (a bounded open-addressing
 * hash over name + labels); updates are lock-free C11 atomics on the handle,
 * so a hot path that kept its handle never contends with a scrape.
 *
 * A series is allocated once and never moved or freed before the registry,
 * which is what keeps handles valid. Families (one per metric name) keep
 * their series in creation order, and the registry keeps families in creation
 * order, so the exposition is stable from one scrape to the next.
 */
#include "ks_metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_hmap.h"

#define NAME_MAX_BYTES   128
#define HELP_MAX_BYTES   512
#define LABELS_MAX_BYTES 1024
/* Twice the series bound keeps linear probing short. */

const double KS_LATENCY_BUCKETS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                     0.1,    0.25,  0.5,    1,     2.5,  5,     10};
const size_t KS_LATENCY_BUCKETS_N = sizeof(KS_LATENCY_BUCKETS) / sizeof(KS_LATENCY_BUCKETS[0]);

typedef enum kind { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM } kind;

struct ks_counter {
        _Atomic uint64_t value;
};

struct ks_gauge {
        _Atomic int64_t value;
};

/*
 * The sum is a double kept as its bit pattern in an _Atomic uint64_t and
 * updated with a compare-and-swap loop. A sum in integer micro-units would
 * be a single fetch_add, but it would fix one unit for every histogram:
 * sub-microsecond observations would vanish and a byte-size histogram would
 * overflow sooner. Observations are rare enough (one per request) that the
 * CAS loop almost never retries.
 */
struct ks_histogram {
        size_t n_bounds;
        const double *bounds; /* the family's, which outlives the series */
        _Atomic uint64_t sum_bits;
        _Atomic uint64_t counts[KS_METRICS_BUCKETS_MAX + 1]; /* per bucket; last is +Inf */
};

struct family;

typedef struct series {
        struct family *family;
        char *labels; /* "" for none */
        struct series *next;
        union {
                struct ks_counter counter;
                struct ks_gauge gauge;
                struct ks_histogram histogram;
        } u;
} series;

typedef struct family {
        char *name;
        char *help;
        kind kind;
        size_t n_bounds;
        double bounds[KS_METRICS_BUCKETS_MAX];
        series *first, *last;
        struct family *next;
} family;

struct ks_metrics {
        pthread_mutex_t mu;
        size_t n_series;
        family *families, *families_last;
        series **by_slot; /* KS_METRICS_SERIES_MAX of them, filled in order */
        ks_hmap index;    /* name and labels -> slot */
};

int ks_metrics_new(ks_metrics **out)
{
        KS_ASSERT(out != NULL);
        ks_metrics *m = calloc(1, sizeof(*m));
        if (m == NULL) {
                return -1;
        }
        m->by_slot = calloc(KS_METRICS_SERIES_MAX, sizeof(*m->by_slot));
        if (m->by_slot == NULL || ks_hmap_init(&m->index, KS_METRICS_SERIES_MAX) != 0 ||
            pthread_mutex_init(&m->mu, NULL) != 0) {
                ks_hmap_fini(&m->index);
                free(m->by_slot);
                free(m);
                return -1;
        }
        *out = m;
        return 0;
}

void ks_metrics_free(ks_metrics *m)
{
        if (m == NULL) {
                return;
        }
        family *f = m->families;
        while (f != NULL) {
                family *next_f = f->next;
                series *s = f->first;
                while (s != NULL) {
                        series *next_s = s->next;
                        free(s->labels);
                        free(s);
                        s = next_s;
                }
                free(f->name);
                free(f->help);
                free(f);
                f = next_f;
        }
        pthread_mutex_destroy(&m->mu);
        ks_hmap_fini(&m->index);
        free(m->by_slot);
        free(m);
}

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static ks_metrics *default_registry;

static void default_init(void)
{
        if (ks_metrics_new(&default_registry) != 0) {
                default_registry = NULL;
        }
}

/* Lives for the whole process: never pass it to ks_metrics_free. */
ks_metrics *ks_metrics_default(void)
{
        pthread_once(&default_once, default_init);
        return default_registry;
}

static bool valid_name(const char *name)
{
        size_t len = strlen(name);
        if (len == 0 || len >= NAME_MAX_BYTES) {
                return false;
        }
        for (size_t i = 0; i < len; i++) {
                char c = name[i];
                bool alpha =
                    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
                if (!alpha && !(i > 0 && c >= '0' && c <= '9')) {
                        return false;
                }
        }
        return true;
}

/* Name, then labels seeded by the name's hash: "a" "bc" and "ab" "c" differ. */
static uint64_t hash_of(const ks_metrics *m, const char *name, const char *labels)
{
        uint64_t h = ks_hmap_hash(&m->index, name, strlen(name));
        return ks_hash64(h, labels, strlen(labels));
}

static family *find_family(ks_metrics *m, const char *name)
{
        for (family *f = m->families; f != NULL; f = f->next) {
                if (strcmp(f->name, name) == 0) {
                        return f;
                }
        }
        return NULL;
}

static bool same_bounds(const family *f, const double *bounds, size_t n)
{
        return f->n_bounds == n && (n == 0 || memcmp(f->bounds, bounds, n * sizeof(double)) == 0);
}

static family *family_new(ks_metrics *m, const char *name, const char *help, kind k,
                          const double *bounds, size_t n_bounds)
{
        family *f = calloc(1, sizeof(*f));
        if (f == NULL) {
                return NULL;
        }
        f->name = strdup(name);
        f->help = strndup(help != NULL ? help : "", HELP_MAX_BYTES);
        if (f->name == NULL || f->help == NULL) {
                free(f->name);
                free(f->help);
                free(f);
                return NULL;
        }
        f->kind = k;
        f->n_bounds = n_bounds;
        if (n_bounds > 0) {
                memcpy(f->bounds, bounds, n_bounds * sizeof(double));
        }
        if (m->families_last != NULL) {
                m->families_last->next = f;
        } else {
                m->families = f;
        }
        m->families_last = f;
        return f;
}

static series *series_new(family *f, const char *labels)
{
        series *s = calloc(1, sizeof(*s));
        if (s == NULL) {
                return NULL;
        }
        s->labels = strdup(labels);
        if (s->labels == NULL) {
                free(s);
                return NULL;
        }
        s->family = f;
        if (f->kind == KIND_HISTOGRAM) {
                s->u.histogram.n_bounds = f->n_bounds;
                s->u.histogram.bounds = f->bounds;
                double zero = 0.0;
                uint64_t bits;
                memcpy(&bits, &zero, sizeof(bits));
                atomic_init(&s->u.histogram.sum_bits, bits);
        }
        if (f->last != NULL) {
                f->last->next = s;
        } else {
                f->first = s;
        }
        f->last = s;
        return s;
}

/* Finds or creates a series; called with the mutex held. */
static series *lookup_locked(ks_metrics *m, const char *name, const char *help, const char *labels,
                             kind k, const double *bounds, size_t n_bounds)
{
        uint64_t h = hash_of(m, name, labels);
        for (uint32_t i = ks_hmap_first(&m->index, h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&m->index, i)) {
                series *s = m->by_slot[i];
                if (strcmp(s->family->name, name) == 0 && strcmp(s->labels, labels) == 0) {
                        bool fits =
                            s->family->kind == k &&
                            (k != KIND_HISTOGRAM || same_bounds(s->family, bounds, n_bounds));
                        return fits ? s : NULL;
                }
        }
        if (m->n_series >= KS_METRICS_SERIES_MAX) {
                return NULL;
        }
        family *f = find_family(m, name);
        if (f != NULL &&
            (f->kind != k || (k == KIND_HISTOGRAM && !same_bounds(f, bounds, n_bounds)))) {
                return NULL; /* one name, one type (and one bucket layout) */
        }
        if (f == NULL && (f = family_new(m, name, help, k, bounds, n_bounds)) == NULL) {
                return NULL;
        }
        series *s = series_new(f, labels);
        if (s == NULL) {
                return NULL;
        }
        uint32_t slot = (uint32_t)m->n_series++;
        m->by_slot[slot] = s;
        ks_hmap_insert(&m->index, slot, h);
        KS_ASSERT(m->index.count == m->n_series);
        return s;
}

static series *lookup(ks_metrics *m, const char *name, const char *help, const char *labels, kind k,
                      const double *bounds, size_t n_bounds)
{
        if (m == NULL || name == NULL || !valid_name(name)) {
                return NULL;
        }
        if (labels == NULL) {
                labels = "";
        }
        /* A newline would end the sample line early and corrupt the exposition. */
        if (strnlen(labels, LABELS_MAX_BYTES) >= LABELS_MAX_BYTES || strchr(labels, '\n') != NULL) {
                return NULL;
        }
        pthread_mutex_lock(&m->mu);
        series *s = lookup_locked(m, name, help, labels, k, bounds, n_bounds);
        pthread_mutex_unlock(&m->mu);
        return s;
}

ks_counter *ks_counter_get(ks_metrics *m, const char *name, const char *help, const char *labels)
{
        series *s = lookup(m, name, help, labels, KIND_COUNTER, NULL, 0);
        return s != NULL ? &s->u.counter : NULL;
}

ks_gauge *ks_gauge_get(ks_metrics *m, const char *name, const char *help, const char *labels)
{
        series *s = lookup(m, name, help, labels, KIND_GAUGE, NULL, 0);
        return s != NULL ? &s->u.gauge : NULL;
}

ks_histogram *ks_histogram_get(ks_metrics *m, const char *name, const char *help,
                               const char *labels, const double *buckets, size_t n_buckets)
{
        if (n_buckets > KS_METRICS_BUCKETS_MAX || (n_buckets > 0 && buckets == NULL)) {
                return NULL;
        }
        for (size_t i = 0; i < n_buckets; i++) {
                if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1]))) {
                        return NULL;
                }
        }
        series *s = lookup(m, name, help, labels, KIND_HISTOGRAM, buckets, n_buckets);
        return s != NULL ? &s->u.histogram : NULL;
}

void ks_counter_inc(ks_counter *c)
{
        ks_counter_add(c, 1);
}

void ks_counter_add(ks_counter *c, uint64_t v)
{
        if (c != NULL) {
                atomic_fetch_add_explicit(&c->value, v, memory_order_relaxed);
        }
}

uint64_t ks_counter_value(const ks_counter *c)
{
        return c != NULL ? atomic_load_explicit(&c->value, memory_order_relaxed) : 0;
}

void ks_gauge_set(ks_gauge *g, int64_t v)
{
        if (g != NULL) {
                atomic_store_explicit(&g->value, v, memory_order_relaxed);
        }
}

void ks_gauge_add(ks_gauge *g, int64_t delta)
{
        if (g != NULL) {
                atomic_fetch_add_explicit(&g->value, delta, memory_order_relaxed);
        }
}

int64_t ks_gauge_value(const ks_gauge *g)
{
        return g != NULL ? atomic_load_explicit(&g->value, memory_order_relaxed) : 0;
}

static double bits_to_double(uint64_t bits)
{
        double d;
        memcpy(&d, &bits, sizeof(d));
        return d;
}

static uint64_t double_to_bits(double d)
{
        uint64_t bits;
        memcpy(&bits, &d, sizeof(bits));
        return bits;
}

void ks_histogram_observe(ks_histogram *h, double v)
{
        /* A NaN would poison the sum forever; drop it. */
        if (h == NULL || isnan(v)) {
                return;
        }
        size_t i = 0;
        while (i < h->n_bounds && v > h->bounds[i]) {
                i++;
        }
        KS_ASSERT(i <= KS_METRICS_BUCKETS_MAX); /* counts has one more than the bounds */
        atomic_fetch_add_explicit(&h->counts[i], 1, memory_order_relaxed);
        uint64_t old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed);
        while (!atomic_compare_exchange_weak_explicit(&h->sum_bits, &old,
                                                      double_to_bits(bits_to_double(old) + v),
                                                      memory_order_relaxed, memory_order_relaxed)) {
        }
}

char *ks_metrics_escape(const char *value, char *out, size_t out_len)
{
        if (out == NULL || out_len == 0) {
                return out;
        }
        size_t o = 0;
        for (const char *p = value != NULL ? value : ""; *p != '\0'; p++) {
                const char *rep = *p == '\\'   ? "\\\\"
                                  : *p == '"'  ? "\\\""
                                  : *p == '\n' ? "\\n"
                                               : NULL;
                size_t n = rep != NULL ? 2 : 1;
                /* Truncate between characters, never inside an escape. */
                if (o + n >= out_len) {
                        break;
                }
                if (rep != NULL) {
                        memcpy(out + o, rep, 2);
                } else {
                        out[o] = *p;
                }
                o += n;
        }
        out[o] = '\0';
        return out;
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct strbuf {
        char *buf;
        size_t len, cap;
        bool failed;
} strbuf;

static void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(strbuf *sb, const char *fmt, ...)
{
        if (sb->failed) {
                return;
        }
        for (;;) {
                va_list ap;
                va_start(ap, fmt);
                int n = vsnprintf(sb->buf + sb->len, sb->cap - sb->len, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        sb->failed = true;
                        return;
                }
                if ((size_t)n < sb->cap - sb->len) {
                        sb->len += (size_t)n;
                        return;
                }
                size_t cap = sb->cap * 2 + (size_t)n + 1;
                char *b = realloc(sb->buf, cap);
                if (b == NULL) {
                        sb->failed = true;
                        return;
                }
                sb->buf = b;
                sb->cap = cap;
        }
}

/* Shortest text that reads back as the same double, as Prometheus clients write. */
static void format_double(double v, char *out, size_t out_len)
{
        if (isnan(v)) {
                snprintf(out, out_len, "NaN");
                return;
        }
        if (isinf(v)) {
                snprintf(out, out_len, v > 0 ? "+Inf" : "-Inf");
                return;
        }
        int digits = 17;
        for (int d = 1; d <= 17; d++) {
                snprintf(out, out_len, "%.*e", d - 1, v);
                if (strtod(out, NULL) == v) {
                        digits = d;
                        break;
                }
        }
        /* Like Go's FormatFloat(v, 'g', -1, 64): plain notation for exponents in [-4, 21). */
        int exp10 = v == 0.0 ? 0 : atoi(strchr(out, 'e') + 1);
        if (exp10 >= -4 && exp10 < 21) {
                int decimals = digits - 1 - exp10;
                snprintf(out, out_len, "%.*f", decimals > 0 ? decimals : 0, v);
        } else {
                snprintf(out, out_len, "%.*e", digits - 1, v);
        }
}

static void render_help(strbuf *sb, const family *f)
{
        static const char *const types[] = {"counter", "gauge", "histogram"};
        sb_printf(sb, "# HELP %s ", f->name);
        /* HELP text escapes only backslash and newline. */
        for (const char *p = f->help; *p != '\0'; p++) {
                if (*p == '\\') {
                        sb_printf(sb, "\\\\");
                } else if (*p == '\n') {
                        sb_printf(sb, "\\n");
                } else {
                        sb_printf(sb, "%c", *p);
                }
        }
        sb_printf(sb, "\n# TYPE %s %s\n", f->name, types[f->kind]);
}

static void render_histogram(strbuf *sb, const family *f, const series *s)
{
        const struct ks_histogram *h = &s->u.histogram;
        const char *sep = s->labels[0] != '\0' ? "," : "";
        char num[64];
        uint64_t cumulative = 0;

        for (size_t i = 0; i <= h->n_bounds; i++) {
                cumulative += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
                if (i < h->n_bounds) {
                        format_double(h->bounds[i], num, sizeof(num));
                } else {
                        snprintf(num, sizeof(num), "+Inf");
                }
                sb_printf(sb, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", f->name, s->labels, sep,
                          num, cumulative);
        }
        format_double(bits_to_double(atomic_load_explicit(&h->sum_bits, memory_order_relaxed)), num,
                      sizeof(num));
        const char *open = s->labels[0] != '\0' ? "{" : "";
        const char *close = s->labels[0] != '\0' ? "}" : "";
        sb_printf(sb, "%s_sum%s%s%s %s\n", f->name, open, s->labels, close, num);
        /* The count is the +Inf bucket, so the two always agree in one scrape. */
        sb_printf(sb, "%s_count%s%s%s %" PRIu64 "\n", f->name, open, s->labels, close, cumulative);
}

static void render_series(strbuf *sb, const family *f, const series *s)
{
        const char *open = s->labels[0] != '\0' ? "{" : "";
        const char *close = s->labels[0] != '\0' ? "}" : "";
        switch (f->kind) {
        case KIND_COUNTER:
                sb_printf(sb, "%s%s%s%s %" PRIu64 "\n", f->name, open, s->labels, close,
                          ks_counter_value(&s->u.counter));
                break;
        case KIND_GAUGE:
                sb_printf(sb, "%s%s%s%s %" PRId64 "\n", f->name, open, s->labels, close,
                          ks_gauge_value(&s->u.gauge));
                break;
        case KIND_HISTOGRAM:
                render_histogram(sb, f, s);
                break;
        }
}

int ks_metrics_render(ks_metrics *m, char **out, size_t *out_len)
{
        if (m == NULL || out == NULL) {
                return -1;
        }
        strbuf sb = {.buf = malloc(4096), .len = 0, .cap = 4096, .failed = false};
        if (sb.buf == NULL) {
                return -1;
        }
        sb.buf[0] = '\0';
        pthread_mutex_lock(&m->mu);
        for (const family *f = m->families; f != NULL; f = f->next) {
                render_help(&sb, f);
                for (const series *s = f->first; s != NULL; s = s->next) {
                        render_series(&sb, f, s);
                }
        }
        pthread_mutex_unlock(&m->mu);
        if (sb.failed) {
                free(sb.buf);
                return -1;
        }
        *out = sb.buf;
        if (out_len != NULL) {
                *out_len = sb.len;
        }
        return 0;
}
