/*
 * keelson-summary's own settings and what it starts beside the service
 * skeleton (ks_service.h): its Redis client settings, the local cache, the
 * users.admin_summary listener, the client of billing, and each worker's
 * Redis connection.
 * main.c hands these to ks_service_run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_log.h"
#include "summary.h"

#define C sm_config
const ks_config_var sm_config_vars[] = {
    KS_CFG_STR("KEELSON_REDIS_URL", C, redis_url, "redis://127.0.0.1:6379", KS_CFG_SECRET,
               "Redis of the shared cache and the generations (redis://host:port)"),
    KS_CFG_STR("KEELSON_SUMMARY_REDIS_PREFIX", C, redis_prefix, "keelson:summary:", KS_CFG_NONEMPTY,
               "prefix of every Redis key of this service"),
    KS_CFG_INT("KEELSON_SUMMARY_REDIS_TIMEOUT_MS", C, redis_timeout_ms, "100", 1, 10000,
               "connect and command timeout of Redis"),
    KS_CFG_INT("KEELSON_SUMMARY_REDIS_RETRY_MS", C, redis_retry_ms, "1000", 10, 60000,
               "after a Redis failure, wait this long before connecting again"),
    KS_CFG_INT("KEELSON_SUMMARY_CACHE_TTL_MS", C, ttl_ms, "30000", 100, 86400000,
               "longest a cached summary is served (the floor when an event is lost)"),
    KS_CFG_INT("KEELSON_SUMMARY_PARTIAL_TTL_MS", C, partial_ttl_ms, "5000", 0, 86400000,
               "longest a summary without billing's figures (billing unavailable) is served;"
               " 0: never cached; at most KEELSON_SUMMARY_CACHE_TTL_MS"),
    KS_CFG_INT("KEELSON_SUMMARY_BILLING_TIMEOUT_MS", C, billing_timeout_ms, "500", 10, 60000,
               "longest a cache fill waits for billing's figures (GetBillingSummary); past it"
               " the summary answers with billing unavailable. Keep it below the gateway's"
               " KEELSON_GATEWAY_RESEND_MS, or a hung billing makes the gateway resend"
               " GetSummary"),
    KS_CFG_INT("KEELSON_SUMMARY_LOCAL_MAX", C, local_max, "4096", 1, 1048576,
               "tenants held in each replica's memory"),
    KS_CFG_BOOL("KEELSON_SUMMARY_CACHE", C, cache, "true",
                "false: every summary is computed from PostgreSQL (benchmarks)"),
    KS_CFG_BOOL("KEELSON_SUMMARY_TEST_HOOKS", C, test_hooks, "false",
                "test-only: honour GetSummaryRequest.test_fill_pause_ms; never in production"),
};
#undef C
const size_t sm_config_vars_n = sizeof(sm_config_vars) / sizeof(sm_config_vars[0]);

int sm_worker_init(void *service, int index, void **state)
{
        sm_service *svc = service;
        sm_worker *w = calloc(1, sizeof(*w));

        (void)index;
        *state = w;
        if (w == NULL) {
                return -1;
        }
        w->redis.opts = &svc->redis;
        return 0;
}

void sm_worker_fini(void *service, void *state)
{
        sm_worker *w = state;

        (void)service;
        if (w != NULL) {
                sm_redis_fini(&w->redis);
                free(w);
        }
}

int sm_check_config(void *service, char *err, size_t err_len)
{
        sm_service *svc = service;
        const sm_config *c = svc->cfg;

        char why[KS_REDIS_ERR_MAX];

        if (ks_redis_url_parse(c->redis_url, &svc->redis.url, why, sizeof(why)) != 0) {
                snprintf(err, err_len, "KEELSON_REDIS_URL: %s", why);
                return -1;
        }
        if (strlen(c->redis_prefix) >= sizeof(svc->redis.prefix) ||
            strpbrk(c->redis_prefix, " \t\r\n%") != NULL) {
                snprintf(err, err_len,
                         "KEELSON_SUMMARY_REDIS_PREFIX: at most 63 characters, no spaces or %%");
                return -1;
        }
        if (c->partial_ttl_ms > c->ttl_ms) {
                snprintf(err, err_len,
                         "KEELSON_SUMMARY_PARTIAL_TTL_MS=%lld must not exceed"
                         " KEELSON_SUMMARY_CACHE_TTL_MS=%lld",
                         (long long)c->partial_ttl_ms, (long long)c->ttl_ms);
                return -1;
        }
        snprintf(svc->redis.prefix, sizeof(svc->redis.prefix), "%s", c->redis_prefix);
        svc->redis.timeout_ms = (int)c->redis_timeout_ms;
        svc->redis.retry_ms = (int)c->redis_retry_ms;
        return 0;
}

static void init_metrics(sm_metrics *mm)
{
        ks_metrics *reg = ks_metrics_default();
        const char *hits = "keelson_summary_cache_hits_total",
                   *hh = "Summaries served from a level";
        const char *miss = "keelson_summary_cache_misses_total", *mh = "Lookups a level missed";

        mm->hits_local = ks_counter_get(reg, hits, hh, "level=\"local\"");
        mm->hits_redis = ks_counter_get(reg, hits, hh, "level=\"redis\"");
        mm->misses_local = ks_counter_get(reg, miss, mh, "level=\"local\"");
        mm->misses_redis = ks_counter_get(reg, miss, mh, "level=\"redis\"");
        mm->invalidations = ks_counter_get(reg, "keelson_summary_invalidations_total",
                                           "users.admin_summary events received", NULL);
        mm->discarded = ks_counter_get(reg, "keelson_summary_fills_discarded_total",
                                       "Fills that raced an invalidation, never served", NULL);
        mm->sql = ks_counter_get(reg, "keelson_summary_sql_statements_total",
                                 "SQL statements sent to PostgreSQL", NULL);
        mm->degraded =
            ks_counter_get(reg, "keelson_summary_degraded_total",
                           "Summaries computed from PostgreSQL because Redis failed", NULL);
        mm->redis_errors = ks_counter_get(reg, "keelson_summary_redis_errors_total",
                                          "Redis commands or connections that failed", NULL);
        mm->billing_ok =
            ks_counter_get(reg, "keelson_summary_billing_calls_total",
                           "GetBillingSummary calls of cache fills by outcome", "result=\"ok\"");
        mm->billing_unavailable = ks_counter_get(
            reg, "keelson_summary_billing_calls_total",
            "GetBillingSummary calls of cache fills by outcome", "result=\"unavailable\"");
        mm->paused = ks_gauge_get(reg, "keelson_summary_test_fills_paused",
                                  "Fills held by the test hook right now", NULL);
        mm->latency =
            ks_histogram_get(reg, "keelson_summary_duration_seconds", "Time to answer GetSummary",
                             NULL, KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
}

int sm_start(void *service, ks_service_env *env)
{
        sm_service *svc = service;
        const sm_config *c = svc->cfg;

        svc->ttl_ms = c->ttl_ms;
        svc->partial_ttl_ms = c->partial_ttl_ms;
        svc->billing_timeout_ms = c->billing_timeout_ms;
        svc->cache_enabled = c->cache;
        svc->test_hooks = c->test_hooks;
        init_metrics(&svc->m);
        if (sm_local_init(&svc->local, (size_t)c->local_max) != 0) {
                return -1;
        }
        if (svc->test_hooks) {
                ks_log_warn(NULL, "test hooks enabled: not for production", NULL);
        }
        /* Each worker makes at most one call at a time: that bounds the calls in flight. */
        if (sm_billing_start(svc, env->broker_bases, env->n_brokers, (int)c->base.workers) !=
            KS_OK) {
                ks_log_error(NULL, "cannot make the billing client", NULL);
                return -1;
        }
        if (sm_events_start(svc, env->broker_bases, env->n_brokers) != 0) {
                ks_log_error(NULL, "cannot subscribe to users.admin_summary", NULL);
                return -1;
        }
        ks_log_info(NULL, "cache", "{s:b, s:i, s:i, s:i}", "cache", c->cache, "ttl_ms",
                    (int)c->ttl_ms, "partial_ttl_ms", (int)c->partial_ttl_ms, "billing_timeout_ms",
                    (int)c->billing_timeout_ms);
        return 0;
}

void sm_stop(void *service)
{
        sm_service *svc = service;

        sm_events_stop(svc);
        sm_billing_stop(svc);
        sm_local_fini(&svc->local);
}
