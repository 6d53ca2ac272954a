/*
 * keelson-auth: accounts, tenants, memberships, sessions, invitations,
 * password resets, API keys and the audit log (keelson.auth.v1.AuthService).
 *
 * Start: configuration, logging, the hash pool, migrations of schema "auth"
 * (as the DSN's role, the owner), the PostgreSQL pool (as the runtime role,
 * see db.c), the outbox relay and its publisher, the health listener, then
 * the RPC server on the back of every broker. Then the main thread waits for
 * SIGINT or SIGTERM and stops everything in reverse order: the RPC server
 * first (in-flight calls finish), the relay (its batch in hand finishes),
 * the publisher, the health listener, the hash pool, then the pool.
 * Housekeeping (housekeeping.c) starts with the relay and stops before it.
 *
 * Workers carry no state of their own (no worker_init): handlers take a
 * connection from the pool per statement or transaction; see db.c for why.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "auth.h"
#include "ks_config.h"
#include "ks_service.h"
#include "ks_shutdown.h"
#include "ks_events.h"
#include "ks_health.h"
#include "ks_log.h"
#include "ks_outbox.h"
#include "ks_pg_login.h"
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
        char *pg_role;
        char *pg_login_dsn;
        int64_t hash_workers;
        int64_t hash_queue_max;
        int64_t hash_nice;
        int64_t invitation_ttl_s;
        int64_t reset_ttl_s;
        int64_t reset_max_per_window;
        int64_t reset_window_s;
        int64_t lockout_max_failures;
        int64_t lockout_window_s;
        int64_t lockout_duration_s;
        int64_t outbox_batch_max;
        int64_t outbox_poll_ms;
        int64_t outbox_retention_s;
        bool outbox_relay;
        int64_t housekeeping_s;
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
    KS_CFG_INT("KEELSON_AUTH_WORKERS", C, workers, "16", 2, 256,
               "worker threads serving RPCs (some wait on the hash pool, the rest stay free)"),
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
    KS_CFG_STR("KEELSON_AUTH_PG_ROLE", C, pg_role, "keelson_auth_rt", KS_CFG_NONEMPTY,
               "role the pool's connections run as (SET ROLE at connect); owns no table"),
    KS_CFG_STR("KEELSON_AUTH_PG_LOGIN_DSN", C, pg_login_dsn, "", KS_CFG_SECRET,
               "libpq connection string the pool logs in with, as a role that owns nothing and"
               " is a member of KEELSON_AUTH_PG_ROLE (empty: KEELSON_PG_DSN, with a warning)"),
    KS_CFG_INT("KEELSON_AUTH_HASH_WORKERS", C, hash_workers, "0", 0, 256,
               "threads running scrypt (0 = the number of cores, at most half the workers)"),
    KS_CFG_INT("KEELSON_AUTH_HASH_QUEUE_MAX", C, hash_queue_max, "0", 0, 65536,
               "password hashes waiting for a hash thread; more are refused with"
               " resource_exhausted (0 = twice the hash workers)"),
    KS_CFG_INT("KEELSON_AUTH_HASH_NICE", C, hash_nice, "10", 0, 19,
               "scheduling niceness of the hash threads: cheap calls get the cores first"),
    KS_CFG_INT("KEELSON_AUTH_INVITATION_TTL_S", C, invitation_ttl_s, "604800", 60, 31536000,
               "invitation lifetime in seconds"),
    KS_CFG_INT("KEELSON_AUTH_RESET_TTL_S", C, reset_ttl_s, "3600", 60, 86400,
               "password reset token lifetime in seconds"),
    KS_CFG_INT("KEELSON_AUTH_RESET_MAX_PER_WINDOW", C, reset_max_per_window, "5", 1, 1000,
               "reset mails one address may cause per window; more are silently not sent"),
    KS_CFG_INT("KEELSON_AUTH_RESET_WINDOW_S", C, reset_window_s, "3600", 1, 86400,
               "the reset mail window in seconds"),
    KS_CFG_INT("KEELSON_AUTH_LOCKOUT_MAX_FAILURES", C, lockout_max_failures, "5", 1, 1000,
               "failed password checks within the window that lock an account"),
    KS_CFG_INT("KEELSON_AUTH_LOCKOUT_WINDOW_S", C, lockout_window_s, "900", 1, 86400,
               "the window failed password checks are counted in, in seconds"),
    KS_CFG_INT("KEELSON_AUTH_LOCKOUT_DURATION_S", C, lockout_duration_s, "900", 1, 86400,
               "how long a locked account refuses every login, in seconds"),
    KS_CFG_INT("KEELSON_AUTH_OUTBOX_BATCH_MAX", C, outbox_batch_max, "100", 1, 1000,
               "events the outbox relay publishes per claim"),
    KS_CFG_INT("KEELSON_AUTH_OUTBOX_POLL_MS", C, outbox_poll_ms, "1000", 10, 3600000,
               "the relay looks for unpublished events this often without a notification"),
    KS_CFG_INT("KEELSON_AUTH_OUTBOX_RETENTION_S", C, outbox_retention_s, "3600", 0, 31536000,
               "published events (mail tokens among them) are deleted after this many seconds"),
    KS_CFG_BOOL("KEELSON_AUTH_OUTBOX_RELAY", C, outbox_relay, "true",
                "run the outbox relay in this replica (false: other replicas publish what it "
                "commits, e.g. a few dedicated relay replicas)"),
    KS_CFG_INT("KEELSON_AUTH_HOUSEKEEPING_S", C, housekeeping_s, "300", 1, 86400,
               "how often stale sessions, reset tokens and request records are deleted"),
};
#undef C
#define CONFIG_VARS_N (sizeof(config_vars) / sizeof(config_vars[0]))

/*
 * The method table. Flags mirror services/gateway/routes.c: public methods
 * need no caller, ResolveContext is internal, idempotent ones may be resent
 * (reads, and tenant writes deduplicated by request id, see tx.c).
 */
#define M(name, snake, fn, flags)                                                                  \
        {                                                                                          \
                "keelson.auth.v1.AuthService/" name,                                               \
                    &keelson__auth__v1__##snake##_request__descriptor,                             \
                    &keelson__auth__v1__##snake##_response__descriptor, fn, flags                  \
        }
#define PUB  KS_M_PUBLIC
#define IDEM KS_M_IDEMPOTENT
#define HASH KS_M_HASH_HEAVY
const ks_method auth_methods[] = {
    M("SignUp", sign_up, auth_signup, PUB | HASH),
    M("Login", login, auth_login, PUB | HASH),
    M("Logout", logout, auth_logout, IDEM | KS_M_CALLER_OPTIONAL),
    {"keelson.auth.v1.AuthService/WhoAmI", &keelson__auth__v1__who_am_irequest__descriptor,
     &keelson__auth__v1__who_am_iresponse__descriptor, auth_whoami, IDEM},
    M("ResolveContext", resolve_context, auth_resolve_context, KS_M_INTERNAL | PUB | IDEM),
    M("ListTenants", list_tenants, auth_list_tenants, IDEM),
    M("SwitchTenant", switch_tenant, auth_switch_tenant, 0),
    M("RevokeAllSessions", revoke_all_sessions, auth_revoke_all_sessions, IDEM),
    M("ChangePassword", change_password, auth_change_password, HASH),
    M("ListMembers", list_members, auth_list_members, IDEM),
    M("SetRole", set_role, auth_set_role, IDEM),
    M("RemoveMember", remove_member, auth_remove_member, IDEM),
    M("Invite", invite, auth_invite, IDEM),
    M("ListInvitations", list_invitations, auth_list_invitations, IDEM),
    M("RevokeInvitation", revoke_invitation, auth_revoke_invitation, IDEM),
    M("AcceptInvitation", accept_invitation, auth_accept_invitation, PUB | HASH),
    M("ForgotPassword", forgot_password, auth_forgot_password, PUB),
    M("ResetPassword", reset_password, auth_reset_password, PUB | HASH),
    M("CreateApiKey", create_api_key, auth_create_api_key, 0),
    M("ListApiKeys", list_api_keys, auth_list_api_keys, IDEM),
    M("RevokeApiKey", revoke_api_key, auth_revoke_api_key, IDEM),
    M("ListAudit", list_audit, auth_list_audit, IDEM),
};
#undef M
#undef PUB
#undef IDEM
#undef HASH
const size_t auth_methods_n = sizeof(auth_methods) / sizeof(auth_methods[0]);

typedef struct auth_main {
        struct auth_config cfg;
        auth_service svc;
        ks_health *health;
        /* The broker readiness check runs on the health thread while main starts and stops rpc. */
        ks_service_ready ready; /* the readiness checks and the RPC server */
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        char dial[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial_urls[KS_BROKERS_MAX];
        const char *broker_bases[KS_BROKERS_MAX];
        int n_brokers;
        int hash_workers, hash_queue_max; /* after the "0 = automatic" defaults */
        ks_publisher *publisher;
        ks_outbox_relay *relay;
        auth_housekeeper *housekeeper;
} auth_main;

static int config_error(const char *msg)
{
        /* Plain text, like ks_config_init's own errors: a person reads this one. */
        fprintf(stderr, "keelson-auth: %s\n", msg);
        return 2;
}

/* The cores this process may run on (its affinity mask: a cpuset-limited container's share). */
static long usable_cores(void)
{
        cpu_set_t set;

        if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
                return CPU_COUNT(&set);
        }
        return sysconf(_SC_NPROCESSORS_ONLN);
}

/*
 * The hash pool's size, and the rule that keeps cheap methods answering: RPC
 * workers blocked on hashing (running or queued) are at most hash workers +
 * hash queue, which must leave at least one RPC worker free.
 */
static int check_hash_config(auth_main *m)
{
        const struct auth_config *c = &m->cfg;
        long cores = usable_cores();
        char msg[256];

        m->hash_workers = (int)c->hash_workers;
        if (m->hash_workers == 0) {
                m->hash_workers = cores > 0 ? (int)cores : 1;
                if (m->hash_workers > (int)c->workers / 2) {
                        m->hash_workers = (int)c->workers / 2;
                }
        }
        m->hash_queue_max = c->hash_queue_max != 0 ? (int)c->hash_queue_max : 2 * m->hash_workers;
        if (m->hash_workers + m->hash_queue_max >= (int)c->workers) {
                snprintf(msg, sizeof(msg),
                         "KEELSON_AUTH_HASH_WORKERS + KEELSON_AUTH_HASH_QUEUE_MAX (%d + %d) must be"
                         " less than KEELSON_AUTH_WORKERS (%lld): some workers must stay free",
                         m->hash_workers, m->hash_queue_max, (long long)c->workers);
                return config_error(msg);
        }
        return 0;
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
        if (check_hash_config(m) != 0) {
                return 2;
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
                m->broker_bases[i] = m->brokers[i];
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
        explicit_bzero(throwaway, sizeof(throwaway));
        explicit_bzero(raw, sizeof(raw));
        if (auth_hash_pool_new(&svc->hash, m->hash_workers, m->hash_queue_max,
                               (int)m->cfg.hash_nice) != KS_OK) {
                ks_log_error(NULL, "cannot start the hash pool", NULL);
                return 1;
        }
        ks_log_info(NULL, "password hashing ready", "{s:i, s:i, s:i, s:i, s:i, s:i}",
                    "scrypt_log_n", (int)m->cfg.scrypt_log_n, "scrypt_r", (int)m->cfg.scrypt_r,
                    "scrypt_p", (int)m->cfg.scrypt_p, "hash_ms", (int)(ks_now_ms() - t0),
                    "hash_workers", m->hash_workers, "hash_queue_max", m->hash_queue_max);
        return 0;
}

/* The per-request limits the handlers read. */
static void init_settings(auth_main *m)
{
        auth_service *svc = &m->svc;
        const struct auth_config *c = &m->cfg;

        svc->session_ttl_s = c->session_ttl_s;
        svc->invitation_ttl_s = c->invitation_ttl_s;
        svc->reset_ttl_s = c->reset_ttl_s;
        svc->reset_max_per_window = (int)c->reset_max_per_window;
        svc->reset_window_s = (int)c->reset_window_s;
        svc->lockout_max_failures = (int)c->lockout_max_failures;
        svc->lockout_window_s = (int)c->lockout_window_s;
        svc->lockout_duration_s = (int)c->lockout_duration_s;
        svc->logins_ok =
            ks_counter_get(ks_metrics_default(), "keelson_auth_logins_total",
                           "Login calls by outcome (failed: any reply but ok)", "result=\"ok\"");
        svc->logins_failed = ks_counter_get(ks_metrics_default(), "keelson_auth_logins_total",
                                            "Login calls by outcome (failed: any reply but ok)",
                                            "result=\"failed\"");
        svc->lockouts = ks_counter_get(ks_metrics_default(), "keelson_auth_lockouts_total",
                                       "Accounts locked after repeated failed logins", NULL);
}

static int init_database(auth_main *m)
{
        ks_pg_pool_options po = {
            .application_name = "keelson-auth",
            .size = (int)m->cfg.pg_pool_size,
            .acquire_timeout_ms = (int)m->cfg.pg_acquire_timeout_ms,
            .statement_timeout_ms = (int)m->cfg.pg_statement_timeout_ms,
        };
        const ks_pg_login_spec login = {.owner_dsn = m->cfg.pg_dsn,
                                        .login_dsn = m->cfg.pg_login_dsn,
                                        .login_var = "KEELSON_AUTH_PG_LOGIN_DSN",
                                        .role = m->cfg.pg_role,
                                        .role_var = "KEELSON_AUTH_PG_ROLE",
                                        .schema = "auth"};
        char err[512];
        int rc;

        init_settings(m);
        if (ks_pg_migrate(m->cfg.pg_dsn, "auth", ks_service_migrations, ks_service_migrations_n,
                          err, sizeof(err)) != 0) {
                ks_log_error(NULL, "migrations failed", "{s:s}", "error", err);
                return 1;
        }
        if ((rc = ks_pg_login_pool_new(&m->svc.pool, po, &login, err, sizeof(err))) == -1) {
                ks_log_error(NULL, "cannot build the pool's connection string", "{s:s}", "error",
                             err);
        }
        return rc == 0 ? 0 : 1;
}

/* The relay publishes committed outbox rows; it connects as the owner (the DSN's role). */
static int start_relay(auth_main *m)
{
        ks_outbox_relay_options o = {
            .dsn = m->cfg.pg_dsn,
            .schema = "auth",
            .batch_max = (int)m->cfg.outbox_batch_max,
            .poll_ms = (int)m->cfg.outbox_poll_ms,
            .retention_s = (int)m->cfg.outbox_retention_s,
        };

        if (!m->cfg.outbox_relay) {
                ks_log_info(NULL, "outbox relay off: other replicas publish this one's events",
                            NULL);
        } else if (ks_publisher_new(&m->publisher, m->broker_bases, m->n_brokers) != KS_OK) {
                ks_log_error(NULL, "cannot create the event publisher", NULL);
                return 1;
        }
        o.publisher = m->publisher;
        if (m->cfg.outbox_relay && ks_outbox_relay_start(&m->relay, &o) != KS_OK) {
                ks_log_error(NULL, "cannot start the outbox relay", NULL);
                return 1;
        }
        if (auth_housekeeper_start(&m->housekeeper, &m->svc, (int)m->cfg.housekeeping_s) != KS_OK) {
                ks_log_error(NULL, "cannot start housekeeping", NULL);
                return 1;
        }
        return 0;
}

static int start_health(auth_main *m)
{
        m->ready.pool = m->svc.pool;
        return ks_service_health_start(&m->health, m->cfg.http_host, (int)m->cfg.http_port,
                                       &m->ready);
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
        ks_service_ready_set_rpc(&m->ready, s);
        ks_log_info(NULL, "serving", "{s:i, s:i, s:i, s:i}", "brokers", m->n_brokers, "workers",
                    (int)m->cfg.workers, "queue_max", (int)m->cfg.queue_max, "max_inflight",
                    (int)m->cfg.max_inflight);
        return 0;
}

static void stop_all(auth_main *m)
{
        ks_rpc_server *s;

        s = ks_service_ready_take_rpc(
            &m->ready); /* readiness fails from here on: no new traffic while draining */
        if (s != NULL) {
                ks_rpc_server_stop(s);
        }
        auth_housekeeper_stop(m->housekeeper);
        m->housekeeper = NULL;
        ks_outbox_relay_stop(m->relay);
        m->relay = NULL;
        ks_publisher_free(m->publisher);
        m->publisher = NULL;
        ks_health_stop(m->health);
        m->health = NULL;
        auth_hash_pool_free(m->svc.hash);
        m->svc.hash = NULL;
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
        ks_service_ready_init(&m.ready);
        ks_log_init("auth", KS_LOG_INFO);
        ks_config_init(argc, argv, "keelson-auth: accounts, tenants, sessions and API keys",
                       config_vars, CONFIG_VARS_N, &m.cfg);
        if ((level = ks_log_level_parse(m.cfg.log_level)) < 0) {
                rc = config_error("KEELSON_LOG_LEVEL: expected debug, info, warn or error");
                ks_config_free(config_vars, CONFIG_VARS_N, &m.cfg);
                return rc;
        }
        ks_log_init("auth", (ks_log_level)level);
        if ((rc = check_config(&m)) != 0 || (rc = init_passwords(&m)) != 0 ||
            (rc = init_database(&m)) != 0 || (rc = start_relay(&m)) != 0 ||
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
