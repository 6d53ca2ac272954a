/* ks_service: see ks_service.h. */
#include "ks_service.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_code.h"
#include "ks_health.h"
#include "ks_log.h"
#include "ks_metrics.h"
#include "ks_outbox.h"
#include "ks_pg_login.h"
#include "ks_process.h"
#include "ks_rpc.h"

#define SHARED_VARS_MAX 20
#define VAR_NAME_MAX    96
#define DEFAULT_DSN     "postgresql://keelson@127.0.0.1:5432/keelson"

/* ---- the configuration table ---------------------------------------------- */

typedef struct table {
        ks_config_var *v;
        size_t n, cap;
        char prefix[48]; /* "KEELSON_AUTH_" */
        size_t base;     /* offset of the settings in the config struct */
} table;

#define S(field) offsetof(ks_service_settings, field)

/* Appends one variable; a suffix starting with '_' is the service's ("_WORKERS"). */
static int add(table *t, const char *suffix, ks_config_var var)
{
        char name[VAR_NAME_MAX];

        if (t->n == t->cap) {
                return -1;
        }
        if (suffix[0] == '_') {
                snprintf(name, sizeof(name), "%s%s", t->prefix, suffix + 1);
        } else {
                snprintf(name, sizeof(name), "%s", suffix);
        }
        if ((var.name = strdup(name)) == NULL) {
                return -1;
        }
        var.offset += t->base;
        t->v[t->n++] = var;
        return 0;
}

static ks_config_var v_str(size_t off, const char *def, unsigned flags, const char *help)
{
        return (ks_config_var){.type = KS_CFG_TYPE_STR,
                               .offset = off,
                               .default_value = def,
                               .flags = flags,
                               .help = help};
}

static ks_config_var v_int(size_t off, const char *def, int64_t lo, int64_t hi, const char *help)
{
        return (ks_config_var){.type = KS_CFG_TYPE_INT,
                               .offset = off,
                               .default_value = def,
                               .min = lo,
                               .max = hi,
                               .help = help};
}

static int add_database(table *t, const ks_service_spec *spec)
{
        const ks_service_defaults *d = &spec->defaults;
        int rc = 0;

        rc |= add(t, "KEELSON_PG_DSN",
                  v_str(S(pg_dsn), DEFAULT_DSN, KS_CFG_SECRET | KS_CFG_NONEMPTY,
                        spec->schema != NULL
                            ? "libpq connection string of the schema's owner (migrations, the"
                              " outbox relay)"
                            : "libpq connection string (the pool's, when no login DSN is set)"));
        rc |= add(t, "_PG_LOGIN_DSN",
                  v_str(S(pg_login_dsn), "", KS_CFG_SECRET,
                        d->pg_login_help != NULL
                            ? d->pg_login_help
                            : "libpq connection string the pool logs in with, as a role that"
                              " owns nothing and is a member of the runtime role (empty:"
                              " KEELSON_PG_DSN, with a warning)"));
        if (spec->pg_role_setting) {
                rc |= add(t, "_PG_ROLE",
                          v_str(S(pg_role), spec->pg_role, KS_CFG_NONEMPTY,
                                "role the pool's connections run as (SET ROLE at connect);"
                                " owns no table"));
        }
        rc |= add(t, "_PG_POOL_SIZE",
                  v_int(S(pg_pool_size), d->pg_pool_size, 1, 256,
                        d->pg_pool_help != NULL ? d->pg_pool_help
                                                : "PostgreSQL connections of this replica"));
        rc |= add(t, "_PG_ACQUIRE_TIMEOUT_MS",
                  v_int(S(pg_acquire_timeout_ms), d->pg_acquire_timeout_ms, 1, 60000,
                        "wait for a free PostgreSQL connection before unavailable"));
        rc |= add(t, "_PG_STATEMENT_TIMEOUT_MS",
                  v_int(S(pg_statement_timeout_ms), d->pg_statement_timeout_ms, 0, 600000,
                        "statement_timeout of every connection (0 = server default)"));
        return rc;
}

static int add_rpc(table *t, const ks_service_spec *spec)
{
        const ks_service_defaults *d = &spec->defaults;
        ks_config_var level = KS_CFG_LOG_LEVEL(ks_service_settings, log_level);
        int rc = 0;

        rc |= add(t, "KEELSON_BROKER_URL",
                  v_str(S(broker_url), "tcp://127.0.0.1:7400", KS_CFG_NONEMPTY,
                        "broker base URLs, comma-separated (every broker is dialled)"));
        rc |= add(t, "KEELSON_LOG_LEVEL", level);
        rc |= add(t, "_HTTP_HOST",
                  v_str(S(http_host), "127.0.0.1", KS_CFG_NONEMPTY,
                        "address of the health and metrics listener"));
        rc |= add(t, "_HTTP_PORT",
                  v_int(S(http_port), d->http_port, 0, 65535,
                        "port of the health and metrics listener (0 = any free port)"));
        rc |= add(t, "_WORKERS",
                  v_int(S(workers), d->workers, d->workers_min, d->workers_max,
                        d->workers_help != NULL ? d->workers_help : "worker threads serving RPCs"));
        rc |= add(t, "_QUEUE_MAX",
                  v_int(S(queue_max), "64", 1, 65536,
                        "requests waiting for a worker; more are refused with"
                        " resource_exhausted"));
        rc |= add(t, "_MAX_INFLIGHT",
                  v_int(S(max_inflight), "128", 2, 65536,
                        "requests received at once; must exceed workers + queue max"));
        return rc;
}

static int add_outbox(table *t, const ks_service_defaults *d)
{
        ks_config_var relay = KS_CFG_BOOL(
            NULL, ks_service_settings, outbox_relay, "true",
            "run the outbox relay in this replica (false: other replicas publish what it"
            " commits, e.g. a few dedicated relay replicas)");
        int rc = 0;

        rc |= add(t, "_OUTBOX_BATCH_MAX",
                  v_int(S(outbox_batch_max), "100", 1, 1000,
                        "events the outbox relay publishes per claim"));
        rc |= add(t, "_OUTBOX_POLL_MS",
                  v_int(S(outbox_poll_ms), d->outbox_poll_ms != NULL ? d->outbox_poll_ms : "1000",
                        10, 3600000,
                        "the relay looks for unpublished events this often without a"
                        " notification"));
        rc |= add(t, "_OUTBOX_RETENTION_S",
                  v_int(S(outbox_retention_s),
                        d->outbox_retention_s != NULL ? d->outbox_retention_s : "3600", 0, 31536000,
                        d->outbox_retention_help != NULL
                            ? d->outbox_retention_help
                            : "events are deleted once published and this many seconds old"));
        rc |= add(t, "_OUTBOX_RELAY", relay);
        return rc;
}

void ks_service_vars_free(ks_config_var *vars, size_t n)
{
        if (vars == NULL) {
                return;
        }
        for (size_t i = 0; i < n; i++) {
                free((char *)vars[i].name);
        }
        free(vars);
}

/* "KEELSON_AUTH_" for "auth". */
static void var_prefix(const char *name, char *out, size_t out_len)
{
        size_t at = (size_t)snprintf(out, out_len, "KEELSON_");

        for (size_t i = 0; name[i] != '\0' && at + 2 < out_len; i++) {
                out[at++] = (char)toupper((unsigned char)name[i]);
        }
        out[at++] = '_';
        out[at] = '\0';
}

int ks_service_vars(const ks_service_spec *spec, ks_config_var **out, size_t *n)
{
        table t = {.cap = SHARED_VARS_MAX + spec->n_vars, .base = spec->settings_offset};
        size_t i;
        int rc = 0;

        *out = NULL;
        *n = 0;
        var_prefix(spec->name, t.prefix, sizeof(t.prefix));
        if ((t.v = calloc(t.cap, sizeof(*t.v))) == NULL) {
                return -1;
        }
        rc |= add_rpc(&t, spec);
        rc |= add_database(&t, spec);
        if (spec->outbox) {
                rc |= add_outbox(&t, &spec->defaults);
        }
        for (i = 0; rc == 0 && i < spec->n_vars; i++) {
                if (t.n == t.cap) {
                        rc = -1;
                        break;
                }
                t.v[t.n++] = spec->vars[i];
                if ((t.v[t.n - 1].name = strdup(spec->vars[i].name)) == NULL) {
                        rc = -1;
                }
        }
        if (rc != 0) {
                ks_service_vars_free(t.v, t.n);
                return -1;
        }
        *out = t.v;
        *n = t.n;
        return 0;
}

/* ---- the running service --------------------------------------------------- */

typedef struct running {
        const ks_service_spec *spec;
        ks_service_settings *set;
        ks_config_var *vars;
        size_t n_vars;
        ks_service_env env;
        char brokers[KS_BROKERS_MAX][KS_URL_MAX];
        char dial[KS_BROKERS_MAX][KS_URL_MAX];
        const char *dial_urls[KS_BROKERS_MAX];
        const char *broker_bases[KS_BROKERS_MAX];
        int n_brokers;
        ks_method *methods;
        size_t n_methods;
        ks_publisher *publisher;
        ks_outbox_relay *relay;
        bool started; /* spec->start ran: spec->stop is owed */
        ks_health *health;
        /* The readiness check runs on the health thread while the main thread
         * starts and stops the server: behind mu. */
        pthread_mutex_t mu;
        ks_rpc_server *rpc;
        char prefix[48]; /* "KEELSON_AUTH_" */
} running;

static int config_error(const running *r, const char *msg)
{
        /* Plain text, like ks_config_init's own errors: a person reads this one. */
        fprintf(stderr, "keelson-%s: %s\n", r->spec->name, msg);
        return 2;
}

/* What one variable's range cannot say: relations, URLs, the method table. */
static int check_config(running *r)
{
        const ks_service_settings *c = r->set;
        char msg[512];

        if (c->max_inflight <= c->workers + c->queue_max) {
                snprintf(msg, sizeof(msg),
                         "%sMAX_INFLIGHT=%lld must be greater than %sWORKERS + %sQUEUE_MAX = %lld",
                         r->prefix, (long long)c->max_inflight, r->prefix, r->prefix,
                         (long long)(c->workers + c->queue_max));
                return config_error(r, msg);
        }
        r->n_brokers = ks_broker_list(c->broker_url, r->brokers, KS_BROKERS_MAX);
        for (int i = 0; i < r->n_brokers; i++) {
                if (ks_broker_url(r->dial[i], KS_URL_MAX, r->brokers[i], (int)r->spec->id,
                                  KS_SIDE_BACK) != 0) {
                        r->n_brokers = -1;
                        break;
                }
                r->dial_urls[i] = r->dial[i];
                r->broker_bases[i] = r->brokers[i];
        }
        if (r->n_brokers <= 0) {
                return config_error(r, "KEELSON_BROKER_URL: expected " KS_BROKER_LIST_SYNTAX);
        }
        if (ks_method_resolve(r->spec->methods, &r->methods, &r->n_methods, msg, sizeof(msg)) !=
            0) {
                return config_error(r, msg);
        }
        if (r->spec->check != NULL && r->spec->check(r->spec->service, msg, sizeof(msg)) != 0) {
                return config_error(r, msg);
        }
        return 0;
}

static int init_database(running *r)
{
        const ks_service_spec *spec = r->spec;
        const ks_service_settings *c = r->set;
        char login_var[VAR_NAME_MAX], role_var[VAR_NAME_MAX], app[64], err[512];
        ks_pg_pool_options po = {
            .application_name = app,
            .size = (int)c->pg_pool_size,
            .acquire_timeout_ms = (int)c->pg_acquire_timeout_ms,
            .statement_timeout_ms = (int)c->pg_statement_timeout_ms,
        };
        ks_pg_login_spec login = {.owner_dsn = c->pg_dsn,
                                  .login_dsn = c->pg_login_dsn,
                                  .login_var = login_var,
                                  .role = c->pg_role,
                                  .role_var = role_var,
                                  .schema = spec->login_schema != NULL ? spec->login_schema
                                                                       : spec->schema};
        int rc;

        snprintf(app, sizeof(app), "keelson-%s", spec->name);
        snprintf(login_var, sizeof(login_var), "%sPG_LOGIN_DSN", r->prefix);
        snprintf(role_var, sizeof(role_var), "%s", spec->pg_role_setting ? "" : "the runtime role");
        if (spec->pg_role_setting) {
                snprintf(role_var, sizeof(role_var), "%sPG_ROLE", r->prefix);
        }
        if (spec->schema != NULL && spec->migrations != NULL &&
            ks_pg_migrate(c->pg_dsn, spec->schema, spec->migrations, spec->n_migrations, err,
                          sizeof(err)) != 0) {
                ks_log_error(NULL, "migrations failed", "{s:s}", "error", err);
                return 1;
        }
        if ((rc = ks_pg_login_pool_new(spec->pool, po, &login, err, sizeof(err))) ==
            KS_INVALID_ARGUMENT) {
                return config_error(r, err);
        }
        return rc == KS_OK ? 0 : 1;
}

/* The relay publishes committed outbox rows; it connects as the owner (the DSN's role). */
static int start_relay(running *r)
{
        const ks_service_settings *c = r->set;
        ks_outbox_relay_options o = {
            .dsn = c->pg_dsn,
            .schema = r->spec->schema,
            .batch_max = (int)c->outbox_batch_max,
            .poll_ms = (int)c->outbox_poll_ms,
            .retention_s = (int)c->outbox_retention_s,
        };

        if (!r->spec->outbox) {
                return 0;
        }
        if (!c->outbox_relay) {
                ks_log_info(NULL, "outbox relay off: other replicas publish this one's events",
                            NULL);
                return 0;
        }
        if (ks_publisher_new(&r->publisher, r->broker_bases, r->n_brokers) != KS_OK) {
                ks_log_error(NULL, "cannot create the event publisher", NULL);
                return 1;
        }
        o.publisher = r->publisher;
        if (ks_outbox_relay_start(&r->relay, &o) != KS_OK) {
                ks_log_error(NULL, "cannot start the outbox relay", NULL);
                return 1;
        }
        r->env.publisher = r->publisher;
        return 0;
}

static int start_own(running *r)
{
        r->env.settings = r->set;
        r->env.broker_bases = r->broker_bases;
        r->env.n_brokers = r->n_brokers;
        if (r->spec->start == NULL) {
                return 0;
        }
        r->started = true;
        return r->spec->start(r->spec->service, &r->env) == 0 ? 0 : 1;
}

static int ready_database(void *arg)
{
        running *r = arg;
        return ks_pg_ping(*r->spec->pool) == 0 ? 0 : -1;
}

static int ready_broker(void *arg)
{
        running *r = arg;
        int connected = 0;

        pthread_mutex_lock(&r->mu);
        if (r->rpc != NULL) {
                connected = ks_rpc_server_connected(r->rpc);
        }
        pthread_mutex_unlock(&r->mu);
        return connected > 0 ? 0 : -1;
}

static int start_health(running *r)
{
        const ks_service_settings *c = r->set;

        if (ks_health_start(&r->health, c->http_host, (int)c->http_port) != 0) {
                ks_log_error(NULL, "cannot start the health listener", "{s:s, s:i}", "host",
                             c->http_host, "port", (int)c->http_port);
                return 1;
        }
        if (ks_health_add_check(r->health, "database", ready_database, r) != 0 ||
            ks_health_add_check(r->health, "broker", ready_broker, r) != 0) {
                ks_log_error(NULL, "cannot register readiness checks", NULL);
                return 1;
        }
        ks_log_info(NULL, "health listener started", "{s:s, s:i}", "host", c->http_host, "port",
                    ks_health_port(r->health));
        return 0;
}

/* The loop runs a short read itself only when a connection is free: it must not wait for one. */
static bool pool_has_free(void *arg)
{
        ks_pg_pool *const *pool = arg;
        return *pool == NULL || ks_pg_pool_has_free(*pool);
}

/* The reads of one pass of the loop, on one connection of the pool (ks_pg.h, "Batched reads"). */
static int pool_batch_run(void *arg, ks_pg_batch *batch)
{
        ks_pg_pool *pool = *(ks_pg_pool *const *)arg;
        PGconn *conn = NULL;
        int rc = ks_pg_acquire(pool, &conn);

        if (rc == KS_OK) {
                rc = ks_pg_batch_run(conn, NULL, batch);
                ks_pg_release(pool, conn);
        }
        return rc;
}

static int start_rpc(running *r)
{
        const ks_service_settings *c = r->set;
        ks_rpc_server_options o = {
            .service_name = r->spec->name,
            .dial_urls = r->dial_urls,
            .n_dial_urls = r->n_brokers,
            .methods = r->methods,
            .n_methods = r->n_methods,
            .workers = (int)c->workers,
            .queue_max = (int)c->queue_max,
            .max_inflight = (int)c->max_inflight,
            .heavy_max = r->env.heavy_max,
            .heavy_message = r->env.heavy_message,
            .heavy_rejected = r->env.heavy_rejected,
            .role_permission = r->spec->role_from_caller,
            .service = r->spec->service,
            .worker_init = r->spec->worker_init,
            .worker_fini = r->spec->worker_fini,
            .inline_ready = r->spec->pool != NULL ? pool_has_free : NULL,
            .inline_ready_arg = r->spec->pool,
            .batch_run = r->spec->pool != NULL ? pool_batch_run : NULL,
            .batch_run_arg = r->spec->pool,
            .tenant_writers = r->env.tenant_writers,
            .group_run = r->env.group_run,
            .group_max = r->env.group_max,
        };
        ks_rpc_server *s = NULL;

        if (ks_rpc_server_start(&s, &o) != KS_OK) {
                ks_log_error(NULL, "cannot start the RPC server", NULL);
                return 1;
        }
        pthread_mutex_lock(&r->mu);
        r->rpc = s; /* readiness may pass from now on */
        pthread_mutex_unlock(&r->mu);
        ks_log_info(NULL, "serving", "{s:i, s:i, s:i, s:i}", "brokers", r->n_brokers, "workers",
                    (int)c->workers, "queue_max", (int)c->queue_max, "max_inflight",
                    (int)c->max_inflight);
        return 0;
}

static void stop_all(running *r)
{
        ks_rpc_server *s;

        pthread_mutex_lock(&r->mu);
        s = r->rpc; /* readiness fails from here on: no new traffic while draining */
        r->rpc = NULL;
        pthread_mutex_unlock(&r->mu);
        ks_rpc_server_stop(s);
        if (r->started) {
                r->spec->stop(r->spec->service);
        }
        ks_outbox_relay_stop(r->relay);
        ks_publisher_free(r->publisher);
        ks_health_stop(r->health);
        if (r->spec->pool != NULL) {
                ks_pg_pool_free(*r->spec->pool);
                *r->spec->pool = NULL;
        }
        ks_method_free(r->methods, r->n_methods);
        ks_config_free(r->vars, r->n_vars, r->spec->config);
        ks_service_vars_free(r->vars, r->n_vars);
}

int ks_service_run(const ks_service_spec *spec, int argc, char **argv)
{
        static running r; /* one service per process */
        char summary[160];
        sigset_t stop;
        int rc;

        memset(&r, 0, sizeof(r));
        r.spec = spec;
        r.set = (ks_service_settings *)((char *)spec->config + spec->settings_offset);
        pthread_mutex_init(&r.mu, NULL);
        var_prefix(spec->name, r.prefix, sizeof(r.prefix));
        ks_process_signals(&stop);
        if (ks_service_vars(spec, &r.vars, &r.n_vars) != 0) {
                fprintf(stderr, "keelson-%s: out of memory\n", spec->name);
                return 1;
        }
        snprintf(summary, sizeof(summary), "keelson-%s: %s", spec->name, spec->summary);
        ks_process_config(spec->name, argc, argv, summary, r.vars, r.n_vars, spec->config);
        if (!spec->pg_role_setting) {
                r.set->pg_role = strdup(spec->pg_role); /* freed with the table's strings */
        }
        if ((rc = check_config(&r)) != 0 || (rc = init_database(&r)) != 0 ||
            (rc = start_relay(&r)) != 0 || (rc = start_own(&r)) != 0 ||
            (rc = start_health(&r)) != 0 || (rc = start_rpc(&r)) != 0) {
                stop_all(&r);
                return rc;
        }
        ks_process_wait(&stop);
        stop_all(&r);
        /* Last, with the exit status: a supervisor's log shows a clean stop. */
        ks_log_info(NULL, "stopped", "{s:i}", "exit_status", 0);
        return 0;
}
