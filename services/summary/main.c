/*
 * keelson-summary: the admin dashboard's counts per tenant
 * (keelson.summary.v1.AdminSummaryService), cached on two levels and
 * invalidated by auth's "users.admin_summary" events. See summary.h.
 *
 * Start: configuration, logging, the PostgreSQL pool (as the reader role auth
 * grants; this service has no schema and no migrations), the local cache,
 * the invalidation listener, the health listener, then the RPC server on the
 * back of every broker. SIGINT or SIGTERM stops it all in reverse order.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_config.h"
#include "ks_service.h"
#include "ks_shutdown.h"
#include "ks_health.h"
#include "ks_log.h"
#include "ks_pg_login.h"
#include "ks_topology.h"
#include "summary.h"

struct summary_config {
        char *pg_dsn;
        char *pg_role;
        char *pg_login_dsn;
        char *broker_url;
        char *redis_url;
        char *redis_prefix;
        char *log_level;
        char *http_host;
        int64_t http_port;
        int64_t workers;
        int64_t queue_max;
        int64_t max_inflight;
        int64_t pg_pool_size;
        int64_t pg_acquire_timeout_ms;
        int64_t pg_statement_timeout_ms;
        int64_t redis_timeout_ms;
        int64_t redis_retry_ms;
        int64_t ttl_ms;
        int64_t local_max;
        bool cache;
        bool test_hooks;
};

#define C struct summary_config
static const ks_config_var config_vars[] = {
    KS_CFG_STR("KEELSON_PG_DSN", C, pg_dsn, "postgresql://keelson@127.0.0.1:5432/keelson",
               KS_CFG_SECRET | KS_CFG_NONEMPTY, "libpq connection string"),
    KS_CFG_STR("KEELSON_SUMMARY_PG_ROLE", C, pg_role, "keelson_summary_rt", KS_CFG_NONEMPTY,
               "role the pool runs as (granted by auth's 004_summary_reader.sql)"),
    KS_CFG_STR("KEELSON_SUMMARY_PG_LOGIN_DSN", C, pg_login_dsn, "", KS_CFG_SECRET,
               "libpq connection string the pool logs in with, as a role that owns nothing and"
               " is a member of KEELSON_SUMMARY_PG_ROLE (empty: KEELSON_PG_DSN, with a warning)"),
    KS_CFG_STR("KEELSON_BROKER_URL", C, broker_url, "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
               "broker base URLs, comma-separated (every broker is dialled)"),
    KS_CFG_STR("KEELSON_REDIS_URL", C, redis_url, "redis://127.0.0.1:6379", KS_CFG_SECRET,
               "Redis of the shared cache and the generations (redis://host:port)"),
    KS_CFG_STR("KEELSON_SUMMARY_REDIS_PREFIX", C, redis_prefix, "keelson:summary:", KS_CFG_NONEMPTY,
               "prefix of every Redis key of this service"),
    KS_CFG_STR("KEELSON_LOG_LEVEL", C, log_level, "info", KS_CFG_NONEMPTY,
               "debug | info | warn | error"),
    KS_CFG_STR("KEELSON_SUMMARY_HTTP_HOST", C, http_host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address of the health and metrics listener"),
    KS_CFG_INT("KEELSON_SUMMARY_HTTP_PORT", C, http_port, "7501", 0, 65535,
               "port of the health and metrics listener (0 = any free port)"),
    KS_CFG_INT("KEELSON_SUMMARY_WORKERS", C, workers, "4", 1, 64, "worker threads serving RPCs"),
    KS_CFG_INT("KEELSON_SUMMARY_QUEUE_MAX", C, queue_max, "64", 1, 65536,
               "requests waiting for a worker; more are refused with resource_exhausted"),
    KS_CFG_INT("KEELSON_SUMMARY_MAX_INFLIGHT", C, max_inflight, "128", 2, 65536,
               "requests received at once; must exceed workers + queue max"),
    KS_CFG_INT("KEELSON_SUMMARY_PG_POOL_SIZE", C, pg_pool_size, "4", 1, 256,
               "PostgreSQL connections of this replica"),
    KS_CFG_INT("KEELSON_SUMMARY_PG_ACQUIRE_TIMEOUT_MS", C, pg_acquire_timeout_ms, "5000", 1, 60000,
               "wait for a free PostgreSQL connection before unavailable"),
    KS_CFG_INT("KEELSON_SUMMARY_PG_STATEMENT_TIMEOUT_MS", C, pg_statement_timeout_ms, "10000", 0,
               600000, "statement_timeout of every connection (0 = server default)"),
    KS_CFG_INT("KEELSON_SUMMARY_REDIS_TIMEOUT_MS", C, redis_timeout_ms, "100", 1, 10000,
               "connect and command timeout of Redis"),
    KS_CFG_INT("KEELSON_SUMMARY_REDIS_RETRY_MS", C, redis_retry_ms, "1000", 10, 60000,
               "after a Redis failure, wait this long before connecting again"),
    KS_CFG_INT("KEELSON_SUMMARY_CACHE_TTL_MS", C, ttl_ms, "30000", 100, 86400000,
               "longest a cached summary is served (the floor when an event is lost)"),
    KS_CFG_INT("KEELSON_SUMMARY_LOCAL_MAX", C, local_max, "4096", 1, 1048576,
               "tenants held in each replica's memory"),
    KS_CFG_BOOL("KEELSON_SUMMARY_CACHE", C, cache, "true",
                "false: every summary is computed from PostgreSQL (benchmarks)"),
    KS_CFG_BOOL("KEELSON_SUMMARY_TEST_HOOKS", C, test_hooks, "false",
                "test-only: honour GetSummaryRequest.test_fill_pause_ms; never in production"),
};
#undef C
#define CONFIG_VARS_N (sizeof(config_vars) / sizeof(config_vars[0]))

#define M(name) "keelson.summary.v1.AdminSummaryService/" name
#define D(name) &keelson__summary__v1__##name##__descriptor
static const ks_method methods[] = {
    {M("GetSummary"), D(get_summary_request), D(get_summary_response), sm_get_summary_handler,
     KS_M_IDEMPOTENT},
};
#undef D
#undef M

typedef struct summary_main {
        struct summary_config cfg;
        sm_service svc;
        ks_health *health;
        ks_service_ready ready; /* the readiness checks and the RPC server */
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        char dial[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial_urls[KS_BROKERS_MAX];
        const char *broker_bases[KS_BROKERS_MAX];
        int n_brokers;
} summary_main;

static int worker_init(void *service, int index, void **state)
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

static void worker_fini(void *service, void *state)
{
        sm_worker *w = state;

        (void)service;
        if (w != NULL) {
                sm_redis_fini(&w->redis);
                free(w);
        }
}

static int config_error(const char *msg)
{
        fprintf(stderr, "keelson-summary: %s\n", msg);
        return 2;
}

static int check_config(summary_main *m)
{
        const struct summary_config *c = &m->cfg;
        sm_service *svc = &m->svc;

        if (c->max_inflight <= c->workers + c->queue_max) {
                return config_error("KEELSON_SUMMARY_MAX_INFLIGHT must be greater than"
                                    " KEELSON_SUMMARY_WORKERS + KEELSON_SUMMARY_QUEUE_MAX");
        }
        if (sm_redis_parse_url(c->redis_url, &svc->redis) != 0) {
                return config_error("KEELSON_REDIS_URL: expected redis://host[:port]");
        }
        if (strlen(c->redis_prefix) >= sizeof(svc->redis.prefix) ||
            strpbrk(c->redis_prefix, " \t\r\n%") != NULL) {
                return config_error("KEELSON_SUMMARY_REDIS_PREFIX: at most 63 characters,"
                                    " no spaces or %");
        }
        snprintf(svc->redis.prefix, sizeof(svc->redis.prefix), "%s", c->redis_prefix);
        svc->redis.timeout_ms = (int)c->redis_timeout_ms;
        svc->redis.retry_ms = (int)c->redis_retry_ms;
        m->n_brokers = ks_broker_list(c->broker_url, m->brokers, KS_BROKERS_MAX);
        if (m->n_brokers <= 0) {
                return config_error("KEELSON_BROKER_URL: expected tcp://host:port[,...]");
        }
        for (int i = 0; i < m->n_brokers; i++) {
                if (ks_broker_url(m->dial[i], KS_URL_MAX, m->brokers[i], KS_SVC_SUMMARY,
                                  KS_SIDE_BACK) != 0) {
                        return config_error("KEELSON_BROKER_URL: expected tcp://host:port[,...]");
                }
                m->dial_urls[i] = m->dial[i];
                m->broker_bases[i] = m->brokers[i];
        }
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
        mm->paused = ks_gauge_get(reg, "keelson_summary_test_fills_paused",
                                  "Fills held by the test hook right now", NULL);
        mm->latency =
            ks_histogram_get(reg, "keelson_summary_duration_seconds", "Time to answer GetSummary",
                             NULL, KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
}

static int init_service(summary_main *m)
{
        sm_service *svc = &m->svc;
        char err[256];
        int rc;
        ks_pg_pool_options po = {
            .application_name = "keelson-summary",
            .size = (int)m->cfg.pg_pool_size,
            .acquire_timeout_ms = (int)m->cfg.pg_acquire_timeout_ms,
            .statement_timeout_ms = (int)m->cfg.pg_statement_timeout_ms,
        };
        /* Summary owns no schema: the tables it reads are auth's. */
        const ks_pg_login_spec login = {.owner_dsn = m->cfg.pg_dsn,
                                        .login_dsn = m->cfg.pg_login_dsn,
                                        .login_var = "KEELSON_SUMMARY_PG_LOGIN_DSN",
                                        .role = m->cfg.pg_role,
                                        .role_var = "KEELSON_SUMMARY_PG_ROLE",
                                        .schema = "auth"};

        if ((rc = ks_pg_login_pool_new(&svc->pool, po, &login, err, sizeof(err))) != 0) {
                return rc == -1 ? config_error(err) : 1;
        }
        svc->ttl_ms = m->cfg.ttl_ms;
        svc->cache_enabled = m->cfg.cache;
        svc->test_hooks = m->cfg.test_hooks;
        init_metrics(&svc->m);
        if (sm_local_init(&svc->local, (size_t)m->cfg.local_max) != 0) {
                return 1;
        }
        if (svc->test_hooks) {
                ks_log_warn(NULL, "test hooks enabled: not for production", NULL);
        }
        if (sm_events_start(svc, m->broker_bases, m->n_brokers) != 0) {
                ks_log_error(NULL, "cannot subscribe to users.admin_summary", NULL);
                return 1;
        }
        return 0;
}

/* Redis is not a readiness check: without it the service still answers (degraded). */
static int start_health(summary_main *m)
{
        m->ready.pool = m->svc.pool;
        return ks_service_health_start(&m->health, m->cfg.http_host, (int)m->cfg.http_port,
                                       &m->ready);
}

static int start_rpc(summary_main *m)
{
        ks_rpc_server_options o = {
            .service_name = "summary",
            .dial_urls = m->dial_urls,
            .n_dial_urls = m->n_brokers,
            .methods = methods,
            .n_methods = sizeof(methods) / sizeof(methods[0]),
            .workers = (int)m->cfg.workers,
            .queue_max = (int)m->cfg.queue_max,
            .max_inflight = (int)m->cfg.max_inflight,
            .service = &m->svc,
            .worker_init = worker_init,
            .worker_fini = worker_fini,
        };
        ks_rpc_server *s = NULL;

        if (ks_rpc_server_start(&s, &o) != KS_OK) {
                ks_log_error(NULL, "cannot start the RPC server", NULL);
                return 1;
        }
        ks_service_ready_set_rpc(&m->ready, s);
        ks_log_info(NULL, "serving", "{s:i, s:i, s:b, s:i}", "brokers", m->n_brokers, "workers",
                    (int)m->cfg.workers, "cache", m->cfg.cache, "ttl_ms", (int)m->cfg.ttl_ms);
        return 0;
}

static void stop_all(summary_main *m)
{
        ks_rpc_server *s;

        s = ks_service_ready_take_rpc(&m->ready); /* readiness fails from here on */
        if (s != NULL) {
                ks_rpc_server_stop(s);
        }
        sm_events_stop(&m->svc);
        ks_health_stop(m->health);
        m->health = NULL;
        ks_pg_pool_free(m->svc.pool);
        m->svc.pool = NULL;
        sm_local_fini(&m->svc.local);
        ks_config_free(config_vars, CONFIG_VARS_N, &m->cfg);
}

static void block_signals(sigset_t *set)
{
        sigemptyset(set);
        sigaddset(set, SIGINT);
        sigaddset(set, SIGTERM);
        pthread_sigmask(SIG_BLOCK, set, NULL);
        signal(SIGPIPE, SIG_IGN);
}

int main(int argc, char **argv)
{
        static summary_main m;
        sigset_t stop;
        int level, sig = 0, rc;

        block_signals(&stop);
        ks_service_ready_init(&m.ready);
        ks_log_init("summary", KS_LOG_INFO);
        ks_config_init(argc, argv, "keelson-summary: admin dashboard counts, cached", config_vars,
                       CONFIG_VARS_N, &m.cfg);
        if ((level = ks_log_level_parse(m.cfg.log_level)) < 0) {
                rc = config_error("KEELSON_LOG_LEVEL: expected debug, info, warn or error");
                ks_config_free(config_vars, CONFIG_VARS_N, &m.cfg);
                return rc;
        }
        ks_log_init("summary", (ks_log_level)level);
        if ((rc = check_config(&m)) != 0 || (rc = init_service(&m)) != 0 ||
            (rc = start_health(&m)) != 0 || (rc = start_rpc(&m)) != 0) {
                stop_all(&m);
                return rc;
        }
        sigwait(&stop, &sig);
        ks_log_info(NULL, "stopping", "{s:s}", "signal", sig == SIGINT ? "SIGINT" : "SIGTERM");
        ks_shutdown_deadline(KS_SHUTDOWN_DEADLINE_MS);
        stop_all(&m);
        ks_log_info(NULL, "stopped", NULL);
        return 0;
}
