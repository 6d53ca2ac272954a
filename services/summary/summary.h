/*
 * keelson-summary: the admin dashboard's figures for one tenant
 * (keelson.summary.v1.AdminSummaryService/GetSummary), cached on two levels:
 * auth's counts, read from PostgreSQL through auth's contract (db.c), and
 * billing's figures, asked from keelson-billing over RPC in the same fill
 * (billing.c).
 *
 * Keys. Every cached value is keyed by (tenant, generation). The generation
 * is a per-tenant counter in Redis ("<prefix>gen:<tenant>", absent = 0); a
 * "users.admin_summary" event (auth's admin writes and billing's writes both
 * publish it) INCRs it (one atomic operation) and evicts the tenant's local
 * entry. A read first GETs the generation, then looks for (tenant,
 * generation) in this replica's memory, then in Redis
 * ("<prefix>v:<tenant>:<generation>"), and only then computes. A fill keeps
 * the generation it read before its SQL and its billing call and stores both
 * figures together under it: if an invalidation came in between, the value
 * lands under the old generation, which no later read asks for (and the
 * fill is counted as discarded).
 *
 * Floors. Every value carries the time it was computed and is not served
 * past computed + its TTL, on either level, so a lost event costs at most the
 * TTL. A value without billing's figures (billing down, slow or failing:
 * they say "unavailable") has a TTL of its own, short
 * (KEELSON_SUMMARY_PARTIAL_TTL_MS; 0: never stored), so billing's figures
 * come back soon after billing does, while an outage costs billing one call
 * per tenant per that TTL, not one per read. Redis down: the generation
 * cannot be known, so nothing cached is served; the figures are computed
 * (counted), and the local cache is emptied (a restarted Redis may begin its
 * generations at 0 again). A generation lost without any error seen (its key
 * evicted or flushed) costs the local level at most the TTL: an expired
 * entry gives way to any fill.
 */
#ifndef SUMMARY_H
#define SUMMARY_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "keelson/billing/v1/billing.pb-c.h"
#include "keelson/summary/v1/summary.pb-c.h"
#include "ks_events.h"
#include "ks_hmap.h"
#include "ks_lru.h"
#include "ks_metrics.h"
#include "ks_pg.h"
#include "ks_redis_url.h"
#include "ks_rpc.h"
#include "ks_service.h"

#define SM_TENANT_LEN   36 /* a uuid in text */
#define SM_PREFIX_MAX   64
#define SM_KEY_MAX      (SM_PREFIX_MAX + 64)
#define SM_PAUSE_MAX_MS 10000
#define SM_SQL_PER_FILL 4 /* BEGIN, set_config, the counts, COMMIT */
/* Currencies per billing figure: billing lists at most 32 (services/billing/summary.c). */
#define SM_CURRENCIES_MAX 32
#define SM_CURRENCY_LEN   3 /* ISO 4217: three upper-case letters */
/* A cached value's text (Redis): 18 numbers and 3 lists of currency and amount (redis.c). */
#define SM_VALUE_MAX 4096

typedef struct sm_amount {
        char currency[SM_CURRENCY_LEN + 1];
        int64_t amount;
} sm_amount;

/* Per currency, at most SM_CURRENCIES_MAX, in billing's order (by code). */
typedef struct sm_amounts {
        uint32_t n;
        sm_amount v[SM_CURRENCIES_MAX];
} sm_amounts;

/* Billing's figures (GetBillingSummary); all zero when !available. */
typedef struct sm_billing {
        bool available; /* false: billing could not be asked */
        int64_t active, trialing, past_due, paused, canceled;
        int64_t invoices_open;
        sm_amounts mrr, open_amount, past_due_amount;
} sm_billing;

/* The figures of one fill: auth's from PostgreSQL, then billing's. */
typedef struct sm_counts {
        int64_t active, invited, locked, disabled;
        int64_t owner, admin, member, viewer;
        int64_t pending_invitations, active_api_keys;
        int64_t computed_ms; /* when auth's were read */
        sm_billing billing;
} sm_counts;

/* Where an answer came from (the response's source field). */
typedef enum { SM_SRC_LOCAL, SM_SRC_REDIS, SM_SRC_DATABASE } sm_source;

/* One replica's in-process cache: at most n tenants, the least recently used evicted. */
typedef struct sm_local_entry {
        char tenant[SM_TENANT_LEN + 1];
        int64_t gen;
        uint64_t epoch;     /* sm_service.redis_epoch when stored */
        int64_t expires_ms; /* counts.computed_ms + the value's TTL */
        sm_counts counts;
} sm_local_entry;

typedef struct sm_local {
        pthread_mutex_t mu;
        sm_local_entry *slots;
        size_t n;
        ks_hmap by_tenant;
        ks_lru lru;
} sm_local;

typedef struct sm_redis_options {
        ks_redis_url url; /* host, port, credentials, database */
        int timeout_ms;
        int retry_ms; /* after a failure, no new connection attempt before this */
        char prefix[SM_PREFIX_MAX];
} sm_redis_options;

/* One synchronous Redis connection, owned by one thread. */
typedef struct sm_redis {
        const sm_redis_options *opts;
        redisContext *ctx;
        int64_t retry_at_ms;
} sm_redis;

typedef struct sm_metrics {
        ks_counter *hits_local, *hits_redis, *misses_local, *misses_redis;
        ks_counter *invalidations, *discarded, *sql, *degraded, *redis_errors;
        ks_counter *billing_ok, *billing_unavailable; /* GetBillingSummary calls by outcome */
        ks_gauge *paused;
        ks_histogram *latency;
} sm_metrics;

/* ---- configuration and start (setup.c) ---------------------------------- */

typedef struct sm_config {
        ks_service_settings base; /* the skeleton's shared settings */
        char *redis_url;
        char *redis_prefix;
        int64_t redis_timeout_ms;
        int64_t redis_retry_ms;
        int64_t ttl_ms;
        int64_t partial_ttl_ms;
        int64_t billing_timeout_ms;
        int64_t local_max;
        bool cache;
        bool test_hooks;
} sm_config;

/* The summary's own variables, beside the shared ones of ks_service.h. */
extern const ks_config_var sm_config_vars[];
extern const size_t sm_config_vars_n;

/* The service's methods: methods.def with its handlers (methods.c). */
extern const ks_method_table sm_methods;

typedef struct sm_service {
        const sm_config *cfg;
        ks_pg_pool *pool;
        sm_local local;
        sm_redis_options redis;
        bool cache_enabled;
        bool test_hooks;
        int64_t ttl_ms;
        int64_t partial_ttl_ms; /* of a value without billing's figures; 0: not stored */
        /* billing.c: a client of keelson-billing on every broker */
        ks_rpc_client *billing;
        int64_t billing_timeout_ms;
        /* Bumped on every Redis failure: local entries of an older epoch are misses. */
        _Atomic uint64_t redis_epoch;
        sm_metrics m;
        /* the invalidation listener */
        ks_subscriber *sub;
        void *pending; /* bumps to retry once Redis answers (events.c) */
        pthread_t events_thread;
        bool events_started;
        atomic_bool stop;
} sm_service;

typedef struct sm_worker {
        sm_redis redis;
} sm_worker;

/* The hooks of ks_service_spec (setup.c). */
int sm_check_config(void *service, char *err, size_t err_len);
int sm_start(void *service, ks_service_env *env);
void sm_stop(void *service);
int sm_worker_init(void *service, int index, void **state);
void sm_worker_fini(void *service, void *state);

/*
 * How long a value may be served after it was computed: ttl_ms, or
 * partial_ttl_ms when it lacks billing's figures (0: not to be stored).
 */
int64_t sm_value_ttl_ms(const sm_counts *c, int64_t ttl_ms, int64_t partial_ttl_ms);

/* local.c; ttl_ms: the value's own (sm_value_ttl_ms) */
int sm_local_init(sm_local *l, size_t n);
void sm_local_fini(sm_local *l);
bool sm_local_get(sm_local *l, const char *tenant, int64_t gen, uint64_t epoch, int64_t now_ms,
                  sm_counts *out);
void sm_local_put(sm_local *l, const char *tenant, int64_t gen, uint64_t epoch, const sm_counts *c,
                  int64_t now_ms, int64_t ttl_ms);
void sm_local_evict(sm_local *l, const char *tenant);

/* redis.c: every call returns 0, 1 (not found, for the gets) or -1 (Redis failed). */
void sm_redis_fini(sm_redis *r);
int sm_redis_gen(sm_redis *r, const char *tenant, int64_t *gen);
int sm_redis_bump(sm_redis *r, const char *tenant);
int sm_redis_get(sm_redis *r, const char *tenant, int64_t gen, sm_counts *out);
int sm_redis_put(sm_redis *r, const char *tenant, int64_t gen, const sm_counts *c, int64_t ttl_ms);
/*
 * The value's text form (what Redis stores, "v2 ..."); 0 or -1. Parse
 * refuses anything else, an older format ("v1 ...", from a replica of before
 * billing's figures) too: the caller takes that as a miss.
 */
int sm_counts_format(const sm_counts *c, char *out, size_t len);
int sm_counts_parse(const char *s, sm_counts *out);

/* db.c */
int sm_db_counts(sm_service *svc, const char *request_id, const char *tenant, sm_counts *out);

/*
 * billing.c. sm_billing_ask never fails the summary: on any failure (no
 * broker or replica, past KEELSON_SUMMARY_BILLING_TIMEOUT_MS or the call's
 * own deadline, an error, a reply it cannot take) out says unavailable, and
 * the failure is logged with the call's request id and counted.
 */
int sm_billing_start(sm_service *svc, const char *const *brokers, int n, int max_inflight);
void sm_billing_stop(sm_service *svc);
void sm_billing_ask(sm_service *svc, const ks_call *call, sm_billing *out);
/* Billing's reply into out; KS_OK, or KS_INTERNAL for a reply not to be trusted. */
int sm_billing_from(const Keelson__Billing__V1__GetBillingSummaryResponse *in, sm_billing *out);

/* handler.c */
int sm_get_summary_handler(ks_call *call);
bool sm_uuid_valid(const char *s);

/* events.c */
int sm_events_start(sm_service *svc, const char *const *brokers, int n);
void sm_events_stop(sm_service *svc);

#endif
