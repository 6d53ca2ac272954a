/*
 * keelson-auth: accounts, tenants and sessions (keelson.auth.v1.AuthService).
 *
 * Start: configuration, logging, migrations of schema "auth", the PostgreSQL
 * pool, the health listener, then the RPC server on the back of every
 * broker. Then the main thread waits for SIGINT or SIGTERM and stops
 * everything in reverse order: the RPC server first (in-flight calls
 * finish), then the health listener, then the pool.
 *
 * Workers carry no state of their own (no worker_init): handlers take a
 * connection from the pool per statement or transaction; see db.c for why.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ks_config.h"
#include "ks_health.h"
#include "ks_log.h"
#include "ks_topology.h"

#define SCRYPT_MEM_BYTES_MAX (1ull << 30) /* 128 * r * N: one hash may not want more */

struct auth_config {
        char *pg_dsn;
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
        int64_t session_ttl_s;
        int64_t scrypt_log_n;
        int64_t scrypt_r;
        int64_t scrypt_p;
};

#define C struct auth_config
static const ks_config_var config_vars[] = {
    KS_CFG_STR("KEELSON_PG_DSN", C, pg_dsn, "postgresql://keelson@127.0.0.1:5432/keelson",
               KS_CFG_SECRET | KS_CFG_NONEMPTY, "libpq connection string"),
    KS_CFG_STR("KEELSON_BROKER_URL", C, broker_url, "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
               "broker base URLs, comma-separated (every broker is dialled)"),
    KS_CFG_STR("KEELSON_LOG_LEVEL", C, log_level, "info", KS_CFG_NONEMPTY,
               "debug | info | warn | error"),
    KS_CFG_STR("KEELSON_AUTH_HTTP_HOST", C, http_host, "127.0.0.1", KS_CFG_NONEMPTY,
               "address of the health and metrics listener"),
    KS_CFG_INT("KEELSON_AUTH_HTTP_PORT", C, http_port, "7481", 0, 65535,
               "port of the health and metrics listener (0 = any free port)"),
    KS_CFG_INT("KEELSON_AUTH_WORKERS", C, workers, "8", 1, 256, "worker threads serving RPCs"),
    KS_CFG_INT("KEELSON_AUTH_QUEUE_MAX", C, queue_max, "64", 1, 65536,
               "requests waiting for a worker; more are refused with resource_exhausted"),
    KS_CFG_INT("KEELSON_AUTH_MAX_INFLIGHT", C, max_inflight, "128", 2, 65536,
               "requests received at once; must exceed workers + queue max"),
    KS_CFG_INT("KEELSON_AUTH_PG_POOL_SIZE", C, pg_pool_size, "8", 1, 256,
               "PostgreSQL connections of this replica"),
    KS_CFG_INT("KEELSON_AUTH_PG_ACQUIRE_TIMEOUT_MS", C, pg_acquire_timeout_ms, "2000", 1, 60000,
               "wait for a free PostgreSQL connection before unavailable"),
    KS_CFG_INT("KEELSON_AUTH_PG_STATEMENT_TIMEOUT_MS", C, pg_statement_timeout_ms, "5000", 0,
               600000, "statement_timeout of every connection (0 = server default)"),
    KS_CFG_INT("KEELSON_AUTH_SESSION_TTL_S", C, session_ttl_s, "604800", 60, 31536000,
               "session lifetime in seconds"),
    KS_CFG_INT("KEELSON_AUTH_SCRYPT_LOG_N", C, scrypt_log_n, "14", 10, 20,
               "scrypt cost: log2 of N for new password hashes"),
    KS_CFG_INT("KEELSON_AUTH_SCRYPT_R", C, scrypt_r, "8", 1, 32, "scrypt block size r"),
    KS_CFG_INT("KEELSON_AUTH_SCRYPT_P", C, scrypt_p, "1", 1, 16, "scrypt parallelism p"),
};
#undef C
#define CONFIG_VARS_N (sizeof(config_vars) / sizeof(config_vars[0]))

#define M(name) "keelson.auth.v1.AuthService/" name
const ks_method auth_methods[] = {
    {M("SignUp"), &keelson__auth__v1__sign_up_request__descriptor,
     &keelson__auth__v1__sign_up_response__descriptor, auth_signup, KS_M_PUBLIC | KS_M_HASH_HEAVY},
    {M("Login"), &keelson__auth__v1__login_request__descriptor,
     &keelson__auth__v1__login_response__descriptor, auth_login, KS_M_PUBLIC | KS_M_HASH_HEAVY},
    {M("Logout"), &keelson__auth__v1__logout_request__descriptor,
     &keelson__auth__v1__logout_response__descriptor, auth_logout, KS_M_IDEMPOTENT},
    {M("WhoAmI"), &keelson__auth__v1__who_am_irequest__descriptor,
     &keelson__auth__v1__who_am_iresponse__descriptor, auth_whoami, KS_M_IDEMPOTENT},
    {M("ResolveContext"), &keelson__auth__v1__resolve_context_request__descriptor,
     &keelson__auth__v1__resolve_context_response__descriptor, auth_resolve_context,
     KS_M_INTERNAL | KS_M_PUBLIC | KS_M_IDEMPOTENT},
};
#undef M
const size_t auth_methods_n = sizeof(auth_methods) / sizeof(auth_methods[0]);

typedef struct auth_main {
        struct auth_config cfg;
        auth_service svc;
        ks_health *health;
        /* The broker readiness check runs on the health thread while main starts and stops rpc. */
        pthread_mutex_t rpc_mu;
        ks_rpc_server *rpc;
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        char dial[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial_urls[KS_BROKERS_MAX];
        int n_brokers;
} auth_main;

static int config_error(const char *msg)
{
        /* Plain text, like ks_config_init's own errors: a person reads this one. */
        fprintf(stderr, "keelson-auth: %s\n", msg);
        return 2;
}

/* Checks what one variable's range cannot: relations between variables, URLs. */
static int check_config(auth_main *m)
{
        const struct auth_config *c = &m->cfg;
        char msg[256];
        int i;

        if (c->max_inflight <= c->workers + c->queue_max) {
                snprintf(msg, sizeof(msg),
                         "KEELSON_AUTH_MAX_INFLIGHT=%lld must be greater than KEELSON_AUTH_WORKERS"
                         " + KEELSON_AUTH_QUEUE_MAX = %lld",
                         (long long)c->max_inflight, (long long)(c->workers + c->queue_max));
                return config_error(msg);
        }
        if ((128ull * (uint64_t)c->scrypt_r << c->scrypt_log_n) > SCRYPT_MEM_BYTES_MAX) {
                return config_error("KEELSON_AUTH_SCRYPT_LOG_N and KEELSON_AUTH_SCRYPT_R ask"
                                    " for more than 1 GiB per hash (128 * r * 2^log_n)");
        }
        m->n_brokers = ks_broker_list(c->broker_url, m->brokers, KS_BROKERS_MAX);
        if (m->n_brokers <= 0) {
                return config_error("KEELSON_BROKER_URL: expected tcp://host:port[,...]");
        }
        for (i = 0; i < m->n_brokers; i++) {
                if (ks_broker_url(m->dial[i], KS_URL_MAX, m->brokers[i], KS_SVC_AUTH,
                                  KS_SIDE_BACK) != 0) {
                        return config_error("KEELSON_BROKER_URL: expected tcp://host:port[,...]");
                }
                m->dial_urls[i] = m->dial[i];
        }
        return 0;
}

/* The hashing parameters, and the dummy hash that unknown emails are verified against. */
static int init_passwords(auth_main *m)
{
        auth_service *svc = &m->svc;
        char throwaway[AUTH_TOKEN_LEN + 1];
        uint8_t raw[AUTH_TOKEN_BYTES];
        int64_t t0;

        svc->scrypt = KS_SCRYPT_DEFAULT;
        svc->scrypt.n = 1ull << m->cfg.scrypt_log_n;
        svc->scrypt.r = (uint32_t)m->cfg.scrypt_r;
        svc->scrypt.p = (uint32_t)m->cfg.scrypt_p;
        if (ks_random_bytes(raw, sizeof(raw)) != 0 ||
            ks_base64url_encode(raw, sizeof(raw), throwaway, sizeof(throwaway)) < 0) {
                ks_log_error(NULL, "no random bytes", NULL);
                return 1;
        }
        t0 = ks_now_ms();
        if (ks_password_hash(throwaway, &svc->scrypt, svc->dummy_hash) != 0) {
                ks_log_error(NULL, "scrypt failed with the configured parameters", NULL);
                return 1;
        }
        ks_log_info(NULL, "password hashing ready", "{s:i, s:i, s:i, s:i}", "scrypt_log_n",
                    (int)m->cfg.scrypt_log_n, "scrypt_r", (int)m->cfg.scrypt_r, "scrypt_p",
                    (int)m->cfg.scrypt_p, "hash_ms", (int)(ks_now_ms() - t0));
        explicit_bzero(throwaway, sizeof(throwaway));
        explicit_bzero(raw, sizeof(raw));
        return 0;
}

static int init_database(auth_main *m)
{
        ks_pg_pool_options po = {
            .dsn = m->cfg.pg_dsn,
            .application_name = "keelson-auth",
            .size = (int)m->cfg.pg_pool_size,
            .acquire_timeout_ms = (int)m->cfg.pg_acquire_timeout_ms,
            .statement_timeout_ms = (int)m->cfg.pg_statement_timeout_ms,
        };
        char err[512];

        if (ks_pg_migrate(m->cfg.pg_dsn, "auth", ks_service_migrations, ks_service_migrations_n,
                          err, sizeof(err)) != 0) {
                ks_log_error(NULL, "migrations failed", "{s:s}", "error", err);
                return 1;
        }
        if (ks_pg_pool_new(&m->svc.pool, &po) != KS_OK) {
                ks_log_error(NULL, "cannot create the PostgreSQL pool", NULL);
                return 1;
        }
        m->svc.session_ttl_s = m->cfg.session_ttl_s;
        m->svc.logins_ok =
            ks_counter_get(ks_metrics_default(), "keelson_auth_logins_total",
                           "Login calls by outcome (failed: any reply but ok)", "result=\"ok\"");
        m->svc.logins_failed = ks_counter_get(ks_metrics_default(), "keelson_auth_logins_total",
                                              "Login calls by outcome (failed: any reply but ok)",
                                              "result=\"failed\"");
        return 0;
}

static int ready_database(void *arg)
{
        auth_main *m = arg;

        return ks_pg_ping(m->svc.pool) == 0 ? 0 : -1;
}

static int ready_broker(void *arg)
{
        auth_main *m = arg;
        int connected = 0;

        pthread_mutex_lock(&m->rpc_mu);
        if (m->rpc != NULL) {
                connected = ks_rpc_server_connected(m->rpc);
        }
        pthread_mutex_unlock(&m->rpc_mu);
        return connected > 0 ? 0 : -1;
}

static int start_health(auth_main *m)
{
        if (ks_health_start(&m->health, m->cfg.http_host, (int)m->cfg.http_port) != KS_OK) {
                ks_log_error(NULL, "cannot start the health listener", "{s:s, s:i}", "host",
                             m->cfg.http_host, "port", (int)m->cfg.http_port);
                return 1;
        }
        if (ks_health_add_check(m->health, "database", ready_database, m) != 0 ||
            ks_health_add_check(m->health, "broker", ready_broker, m) != 0) {
                ks_log_error(NULL, "cannot register readiness checks", NULL);
                return 1;
        }
        ks_log_info(NULL, "health listener started", "{s:s, s:i}", "host", m->cfg.http_host, "port",
                    ks_health_port(m->health));
        return 0;
}

static int start_rpc(auth_main *m)
{
        ks_rpc_server_options o = {
            .service_name = "auth",
            .dial_urls = m->dial_urls,
            .n_dial_urls = m->n_brokers,
            .methods = auth_methods,
            .n_methods = auth_methods_n,
            .workers = (int)m->cfg.workers,
            .queue_max = (int)m->cfg.queue_max,
            .max_inflight = (int)m->cfg.max_inflight,
            .service = &m->svc,
        };
        ks_rpc_server *s = NULL;

        if (ks_rpc_server_start(&s, &o) != KS_OK) {
                ks_log_error(NULL, "cannot start the RPC server", NULL);
                return 1;
        }
        pthread_mutex_lock(&m->rpc_mu);
        m->rpc = s;
        pthread_mutex_unlock(&m->rpc_mu);
        ks_log_info(NULL, "serving", "{s:i, s:i, s:i, s:i}", "brokers", m->n_brokers, "workers",
                    (int)m->cfg.workers, "queue_max", (int)m->cfg.queue_max, "max_inflight",
                    (int)m->cfg.max_inflight);
        return 0;
}

static void stop_all(auth_main *m)
{
        ks_rpc_server *s;

        pthread_mutex_lock(&m->rpc_mu);
        s = m->rpc;
        m->rpc = NULL; /* readiness fails from here on: no new traffic while draining */
        pthread_mutex_unlock(&m->rpc_mu);
        if (s != NULL) {
                ks_rpc_server_stop(s);
        }
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
        static auth_main m;
        sigset_t stop;
        int level, sig = 0, rc;

        block_signals(&stop);
        pthread_mutex_init(&m.rpc_mu, NULL);
        ks_log_init("auth", KS_LOG_INFO);
        ks_config_init(argc, argv, "keelson-auth: accounts, tenants and sessions", config_vars,
                       CONFIG_VARS_N, &m.cfg);
        if ((level = ks_log_level_parse(m.cfg.log_level)) < 0) {
                rc = config_error("KEELSON_LOG_LEVEL: expected debug, info, warn or error");
                ks_config_free(config_vars, CONFIG_VARS_N, &m.cfg);
                return rc;
        }
        ks_log_init("auth", (ks_log_level)level);
        if ((rc = check_config(&m)) != 0 || (rc = init_passwords(&m)) != 0 ||
            (rc = init_database(&m)) != 0 || (rc = start_health(&m)) != 0 ||
            (rc = start_rpc(&m)) != 0) {
                stop_all(&m);
                return rc;
        }
        sigwait(&stop, &sig);
        ks_log_info(NULL, "stopping", "{s:s}", "signal", sig == SIGINT ? "SIGINT" : "SIGTERM");
        stop_all(&m);
        ks_log_info(NULL, "stopped", NULL);
        return 0;
}
