/*
 * ks_metrics: a Prometheus metrics registry with the text exposition format
 * (version 0.0.4). Metrics are looked up or created by name and label set;
 * the returned handle stays valid for the registry's life, so hot paths keep
 * it and update it without a lookup. Updates are lock-free atomics.
 *
 *   ks_counter *c = ks_counter_get(reg, "keelson_rpc_requests_total",
 *                                  "RPCs handled", "method=\"Login\",code=\"ok\"");
 *   ks_counter_inc(c);
 */
#ifndef KS_METRICS_H
#define KS_METRICS_H

#include "ks_code.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ks_metrics ks_metrics;
typedef struct ks_counter ks_counter;
typedef struct ks_gauge ks_gauge;
typedef struct ks_histogram ks_histogram;

/* Bounds: names and label sets are short, series are finite. */
#define KS_METRICS_SERIES_MAX  4096
#define KS_METRICS_BUCKETS_MAX 32

int ks_metrics_new(ks_metrics **out) KS_MUST_CHECK;
void ks_metrics_free(ks_metrics *m);

/* The process-wide registry every module of a binary shares. */
ks_metrics *ks_metrics_default(void);

/*
 * labels: NULL or "" for none, else the inside of the braces, already
 * escaped ("route=\"/x\",code=\"ok\""). help is used by the first call for a
 * name. Returns NULL only when the series bound is reached or memory is out;
 * every update function accepts NULL and does nothing.
 */
ks_counter *ks_counter_get(ks_metrics *m, const char *name, const char *help, const char *labels);
ks_gauge *ks_gauge_get(ks_metrics *m, const char *name, const char *help, const char *labels);
/* buckets: ascending upper bounds (the +Inf bucket is implicit). */
ks_histogram *ks_histogram_get(ks_metrics *m, const char *name, const char *help,
                               const char *labels, const double *buckets, size_t n_buckets);

/* Latency buckets in seconds, 0.5 ms .. 10 s. */
extern const double KS_LATENCY_BUCKETS[];
extern const size_t KS_LATENCY_BUCKETS_N;

void ks_counter_inc(ks_counter *c);
void ks_counter_add(ks_counter *c, uint64_t v);
uint64_t ks_counter_value(const ks_counter *c);
void ks_gauge_set(ks_gauge *g, int64_t v);
void ks_gauge_add(ks_gauge *g, int64_t delta);
int64_t ks_gauge_value(const ks_gauge *g);
void ks_histogram_observe(ks_histogram *h, double v);

/*
 * Renders every series in the text format, grouped by name with one # HELP
 * and # TYPE line each. *out is malloc'd and NUL-terminated. Returns 0 or -1.
 */
int ks_metrics_render(ks_metrics *m, char **out, size_t *out_len) KS_MUST_CHECK;

/* Escapes a label value (\\, \", \n) into out; returns out. */
char *ks_metrics_escape(const char *value, char *out, size_t out_len);

#endif
