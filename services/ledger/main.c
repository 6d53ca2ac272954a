/*
 * keelson-ledger: double-entry accounting with TigerBeetle's contract
 * (keelson.ledger.v1.LedgerService). See ledger.h for how a batch runs.
 *
 * Start: configuration, logging, migrations of schema "ledger", the
 * PostgreSQL pool, the expiry sweeper, the health listener, then the RPC
 * server on the back of every broker. SIGINT or SIGTERM stops everything in
 * reverse order: the RPC server first (in-flight batches finish), the
 * sweeper, the health listener, the pool.
 *
 * Each worker owns a working set sized for the largest batch (lg_worker),
 * made once on its own thread: no allocation per event while a batch runs.
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
#include "ledger.h"

struct ledger_config {
        char *pg_dsn;
        char *pg_login_dsn;
        char *broker_url;
        char *log_level;
        char *http_host;
        int64_t http_port;
        int64_t workers;
        int64_t queue_max;
        int64_t max_inflight;
        int64_t pg_pool_size;
        int64_t pg_acquire_timeout_ms;
        int64_t pg_statement_timeout_ms;
        int64_t batch_max;
        int64_t tx_retries;
        int64_t expiry_interval_ms;
        int64_t expiry_batch_max;
        int64_t expiry_tenants_max;
        bool group_batches;
};

#define C struct ledger_config
static const ks_config_var config_vars[] = {
    KS_CFG_STR("KEELSON_PG_DSN", C, pg_dsn, "postgresql://keelson@127.0.0.1:5432/keelson",
               KS_CFG_SECRET | KS_CFG_NONEMPTY, "libpq connection string"),
    KS_CFG_STR("KEELSON_LEDGER_PG_LOGIN_DSN", C, pg_login_dsn, "", KS_CFG_SECRET,
               "libpq connection string the pool logs in with, as a role that owns nothing and"
               " is a member of keelson_ledger_rt and keelson_ledger_sweeper (empty:"
               " KEELSON_PG_DSN, with a warning)"),
    KS_CFG_STR("KEELSON_BROKER_URL", C, broker_url, "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
               "broker base URLs, comma-separated (every broker is dialled)"),
    KS_CFG_STR("KEELSON_LOG_LEVEL", C, log_level, "info", KS_CFG_NONEMPTY,
               "debug | info | warn | error"),
    KS_CFG_STR("KEELSON_LEDGER_HTTP_HOST", C, http_host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address of the health and metrics listener"),
    KS_CFG_INT("KEELSON_LEDGER_HTTP_PORT", C, http_port, "7491", 0, 65535,
               "port of the health and metrics listener (0 = any free port)"),
    KS_CFG_INT("KEELSON_LEDGER_WORKERS", C, workers, "4", 1, 64,
               "worker threads serving RPCs; each holds a working set for the largest batch,"
               " and each batch waiting in a group holds one"),
    KS_CFG_INT("KEELSON_LEDGER_QUEUE_MAX", C, queue_max, "64", 1, 65536,
               "requests waiting for a worker; more are refused with resource_exhausted"),
    KS_CFG_INT("KEELSON_LEDGER_MAX_INFLIGHT", C, max_inflight, "128", 2, 65536,
               "requests received at once; must exceed workers + queue max"),
    KS_CFG_INT("KEELSON_LEDGER_PG_POOL_SIZE", C, pg_pool_size, "5", 1, 256,
               "PostgreSQL connections of this replica (workers + 1 for the sweeper is enough)"),
    KS_CFG_INT("KEELSON_LEDGER_PG_ACQUIRE_TIMEOUT_MS", C, pg_acquire_timeout_ms, "5000", 1, 60000,
               "wait for a free PostgreSQL connection before unavailable"),
    KS_CFG_INT("KEELSON_LEDGER_PG_STATEMENT_TIMEOUT_MS", C, pg_statement_timeout_ms, "30000", 0,
               600000, "statement_timeout of every connection (0 = server default)"),
    KS_CFG_INT("KEELSON_LEDGER_BATCH_MAX", C, batch_max, "8190", 1, LG_BATCH_MAX,
               "events per CreateAccounts/CreateTransfers and ids per lookup"),
    KS_CFG_INT("KEELSON_LEDGER_TX_RETRIES", C, tx_retries, "5", 0, LG_TX_RETRIES_MAX,
               "retries of a batch after a serialization failure, deadlock or unique violation"),
    KS_CFG_INT("KEELSON_LEDGER_EXPIRY_INTERVAL_MS", C, expiry_interval_ms, "1000", 10, 3600000,
               "pause of the expiry sweeper when nothing more is due"),
    KS_CFG_INT("KEELSON_LEDGER_EXPIRY_BATCH_MAX", C, expiry_batch_max, "1000", 1, LG_BATCH_MAX,
               "pending transfers expired per tenant and transaction (at most the batch max)"),
    KS_CFG_INT("KEELSON_LEDGER_EXPIRY_TENANTS_MAX", C, expiry_tenants_max, "64", 1, 256,
               "tenants swept per pass"),
    KS_CFG_BOOL("KEELSON_LEDGER_GROUP_BATCHES", C, group_batches, "true",
                "run a tenant's CreateTransfers batches that wait for each other in one"
                " transaction, up to the batch max (false: one transaction per batch)"),
};
#undef C
#define CONFIG_VARS_N (sizeof(config_vars) / sizeof(config_vars[0]))

/* Every method is safe to receive twice: writes are idempotent by client-chosen ids. */
#define M(name) "keelson.ledger.v1.LedgerService/" name
#define D(name) &keelson__ledger__v1__##name##__descriptor
const ks_method lg_methods[] = {
    {M("CreateAccounts"), D(create_accounts_request), D(create_accounts_response),
     lg_create_accounts_handler, KS_M_IDEMPOTENT},
    {M("CreateTransfers"), D(create_transfers_request), D(create_transfers_response),
     lg_create_transfers_handler, KS_M_IDEMPOTENT},
    {M("LookupAccounts"), D(lookup_accounts_request), D(lookup_accounts_response),
     lg_lookup_accounts_handler, KS_M_IDEMPOTENT},
    {M("LookupTransfers"), D(lookup_transfers_request), D(lookup_transfers_response),
     lg_lookup_transfers_handler, KS_M_IDEMPOTENT},
    {M("GetAccountTransfers"), D(account_filter), D(get_account_transfers_response),
     lg_get_account_transfers_handler, KS_M_IDEMPOTENT},
    {M("GetAccountBalances"), D(account_filter), D(get_account_balances_response),
     lg_get_account_balances_handler, KS_M_IDEMPOTENT},
    {M("GetTrialBalance"), D(get_trial_balance_request), D(get_trial_balance_response),
     lg_get_trial_balance_handler, KS_M_IDEMPOTENT},
};
#undef D
#undef M
const size_t lg_methods_n = sizeof(lg_methods) / sizeof(lg_methods[0]);

typedef struct ledger_main {
        struct ledger_config cfg;
        lg_service svc;
        ks_health *health;
        /* The broker readiness check runs on the health thread while main starts and stops rpc. */
        ks_service_ready ready; /* the readiness checks and the RPC server */
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        char dial[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial_urls[KS_BROKERS_MAX];
        int n_brokers;
} ledger_main;

/* ---- workers ------------------------------------------------------------------- */

void lg_worker_fini(void *service, void *state)
{
        lg_worker *w = state;

        (void)service;
        if (w == NULL) {
                return;
        }
        lg_batch_free(w->batch);
        free(w->account_events);
        free(w->transfer_events);
        free(w->results);
        free(w->ids);
        lg_args_fini(&w->args);
        free(w);
}

int lg_worker_init(void *service, int index, void **state)
{
        lg_service *svc = service;
        lg_worker *w = calloc(1, sizeof(*w));
        size_t n = (size_t)svc->batch_max;

        (void)index;
        *state = NULL;
        if (w == NULL) {
                return -1;
        }
        w->account_events = calloc(n, sizeof(*w->account_events));
        w->transfer_events = calloc(n, sizeof(*w->transfer_events));
        w->results = calloc(n, sizeof(*w->results));
        w->ids = calloc(n, sizeof(*w->ids));
        if (w->account_events == NULL || w->transfer_events == NULL || w->results == NULL ||
            w->ids == NULL || lg_batch_new(&w->batch, svc->batch_max) != 0) {
                lg_worker_fini(service, w);
                return -1;
        }
        *state = w;
        return 0;
}

/* ---- start and stop ------------------------------------------------------------ */

static int config_error(const char *msg)
{
        /* Plain text, like ks_config_init's own errors: a person reads this one. */
        fprintf(stderr, "keelson-ledger: %s\n", msg);
        return 2;
}

/* Checks what one variable's range cannot: relations between variables, URLs. */
static int check_config(ledger_main *m)
{
        const struct ledger_config *c = &m->cfg;
        char msg[256];

        if (c->max_inflight <= c->workers + c->queue_max) {
                snprintf(msg, sizeof(msg),
                         "KEELSON_LEDGER_MAX_INFLIGHT=%lld must be greater than"
                         " KEELSON_LEDGER_WORKERS + KEELSON_LEDGER_QUEUE_MAX = %lld",
                         (long long)c->max_inflight, (long long)(c->workers + c->queue_max));
                return config_error(msg);
        }
        if (c->expiry_batch_max > c->batch_max) {
                return config_error("KEELSON_LEDGER_EXPIRY_BATCH_MAX must not exceed"
                                    " KEELSON_LEDGER_BATCH_MAX");
        }
        m->n_brokers = ks_broker_list(c->broker_url, m->brokers, KS_BROKERS_MAX);
        if (m->n_brokers <= 0) {
                return config_error("KEELSON_BROKER_URL: expected tcp://host:port[,...]");
        }
        for (int i = 0; i < m->n_brokers; i++) {
                if (ks_broker_url(m->dial[i], KS_URL_MAX, m->brokers[i], KS_SVC_LEDGER,
                                  KS_SIDE_BACK) != 0) {
                        return config_error("KEELSON_BROKER_URL: expected tcp://host:port[,...]");
                }
                m->dial_urls[i] = m->dial[i];
        }
        return 0;
}

static void init_metrics(lg_service *svc)
{
        static const char *const kinds[2] = {"kind=\"account\"", "kind=\"transfer\""};
        ks_metrics *reg = ks_metrics_default();

        for (int i = 0; i < 2; i++) {
                char ok[64], failed[64];
                snprintf(ok, sizeof(ok), "%s,result=\"ok\"", kinds[i]);
                snprintf(failed, sizeof(failed), "%s,result=\"failed\"", kinds[i]);
                svc->events_ok[i] = ks_counter_get(reg, "keelson_ledger_events_total",
                                                   "Events of create batches by outcome", ok);
                svc->events_failed[i] =
                    ks_counter_get(reg, "keelson_ledger_events_total",
                                   "Events of create batches by outcome", failed);
        }
        svc->retries = ks_counter_get(reg, "keelson_ledger_tx_retries_total",
                                      "Batches retried after a conflict", NULL);
        svc->reruns =
            ks_counter_get(reg, "keelson_ledger_exact_reruns_total",
                           "Transfer batches run again because an id of theirs existed", NULL);
        svc->grouped =
            ks_counter_get(reg, "keelson_ledger_grouped_batches_total",
                           "CreateTransfers batches that ran in one transaction with others", NULL);
        svc->expired = ks_counter_get(reg, "keelson_ledger_expired_total",
                                      "Pending transfers expired by the sweeper", NULL);
        svc->batch_seconds = ks_histogram_get(
            reg, "keelson_ledger_batch_duration_seconds",
            "Time of a create transaction: one batch, or a group of a tenant's batches", NULL,
            KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
}

/*
 * The pool's connections act as keelson_ledger_rt from their first
 * statement; every transaction also sets its role itself (SET LOCAL ROLE in
 * db.c: the runtime role, or the sweeper's for its first step).
 */
static int init_pool(ledger_main *m)
{
        ks_pg_pool_options po = {
            .application_name = "keelson-ledger",
            .size = (int)m->cfg.pg_pool_size,
            .acquire_timeout_ms = (int)m->cfg.pg_acquire_timeout_ms,
            .statement_timeout_ms = (int)m->cfg.pg_statement_timeout_ms,
        };
        const ks_pg_login_spec login = {.owner_dsn = m->cfg.pg_dsn,
                                        .login_dsn = m->cfg.pg_login_dsn,
                                        .login_var = "KEELSON_LEDGER_PG_LOGIN_DSN",
                                        .role = "keelson_ledger_rt",
                                        .role_var = "role",
                                        .schema = "ledger"};
        char err[512];
        int rc;

        if ((rc = ks_pg_login_pool_new(&m->svc.pool, po, &login, err, sizeof(err))) == -1) {
                ks_log_error(NULL, "cannot build the pool's connection string", "{s:s}", "error",
                             err);
        }
        return rc == 0 ? 0 : 1;
}

static int init_database(ledger_main *m)
{
        char err[512];
        lg_service *svc = &m->svc;

        if (ks_pg_migrate(m->cfg.pg_dsn, "ledger", ks_service_migrations, ks_service_migrations_n,
                          err, sizeof(err)) != 0) {
                ks_log_error(NULL, "migrations failed", "{s:s}", "error", err);
                return 1;
        }
        if (init_pool(m) != 0) {
                return 1;
        }
        svc->batch_max = (int)m->cfg.batch_max;
        svc->tx_retries = (int)m->cfg.tx_retries;
        svc->expiry_interval_ms = (int)m->cfg.expiry_interval_ms;
        svc->expiry_batch_max = (int)m->cfg.expiry_batch_max;
        svc->expiry_tenants_max = (int)m->cfg.expiry_tenants_max;
        init_metrics(svc);
        if (m->cfg.group_batches && lg_groups_new(&svc->groups) != 0) {
                ks_log_error(NULL, "out of memory", NULL);
                return 1;
        }
        if (lg_sweeper_start(svc) != 0) {
                ks_log_error(NULL, "cannot start the expiry sweeper", NULL);
                return 1;
        }
        return 0;
}

static int start_health(ledger_main *m)
{
        m->ready.pool = m->svc.pool;
        return ks_service_health_start(&m->health, m->cfg.http_host, (int)m->cfg.http_port,
                                       &m->ready);
}

static int start_rpc(ledger_main *m)
{
        ks_rpc_server_options o = {
            .service_name = "ledger",
            .dial_urls = m->dial_urls,
            .n_dial_urls = m->n_brokers,
            .methods = lg_methods,
            .n_methods = lg_methods_n,
            .workers = (int)m->cfg.workers,
            .queue_max = (int)m->cfg.queue_max,
            .max_inflight = (int)m->cfg.max_inflight,
            .service = &m->svc,
            .worker_init = lg_worker_init,
            .worker_fini = lg_worker_fini,
        };
        ks_rpc_server *s = NULL;

        if (ks_rpc_server_start(&s, &o) != KS_OK) {
                ks_log_error(NULL, "cannot start the RPC server", NULL);
                return 1;
        }
        ks_service_ready_set_rpc(&m->ready, s);
        ks_log_info(NULL, "serving", "{s:i, s:i, s:i, s:i, s:i}", "brokers", m->n_brokers,
                    "workers", (int)m->cfg.workers, "queue_max", (int)m->cfg.queue_max,
                    "max_inflight", (int)m->cfg.max_inflight, "batch_max", (int)m->cfg.batch_max);
        return 0;
}

static void stop_all(ledger_main *m)
{
        ks_rpc_server *s;

        s = ks_service_ready_take_rpc(
            &m->ready); /* readiness fails from here on: no new traffic while draining */
        if (s != NULL) {
                ks_rpc_server_stop(s);
        }
        lg_sweeper_stop(&m->svc);
        lg_groups_free(m->svc.groups); /* the RPC server, stopped, runs no batch */
        m->svc.groups = NULL;
        ks_health_stop(m->health);
        m->health = NULL;
        ks_pg_pool_free(m->svc.pool);
        m->svc.pool = NULL;
        ks_config_free(config_vars, CONFIG_VARS_N, &m->cfg);
}

/* Blocks the stop signals in this thread before any other starts, so all inherit the mask. */
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
        static ledger_main m;
        sigset_t stop;
        int level, sig = 0, rc;

        block_signals(&stop);
        ks_service_ready_init(&m.ready);
        ks_log_init("ledger", KS_LOG_INFO);
        ks_config_init(argc, argv, "keelson-ledger: double-entry accounts and transfers",
                       config_vars, CONFIG_VARS_N, &m.cfg);
        if ((level = ks_log_level_parse(m.cfg.log_level)) < 0) {
                rc = config_error("KEELSON_LOG_LEVEL: expected debug, info, warn or error");
                ks_config_free(config_vars, CONFIG_VARS_N, &m.cfg);
                return rc;
        }
        ks_log_init("ledger", (ks_log_level)level);
        if ((rc = check_config(&m)) != 0 || (rc = init_database(&m)) != 0 ||
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
