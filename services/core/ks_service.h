/*
 * ks_service: the one skeleton every RPC service runs on.
 *
 * A service's main.c is its spec: its name and broker slot, its method
 * table (methods.def), its own configuration variables, its schema and
 * migrations, and hooks for what only it starts. ks_service_run does the
 * rest, in this order, and undoes it in reverse on SIGINT or SIGTERM:
 *
 *   1. signals blocked, logging, configuration: the shared settings below
 *      (declared here once, named KEELSON_<SVC>_... after spec->name) and
 *      the service's own table, --help for both; a bad value exits 2
 *   2. spec->check: relations the ranges cannot say (exit 2 on failure)
 *   3. migrations of spec->schema, as the owner (KEELSON_PG_DSN)
 *   4. the pool, as the runtime role (ks_pg_login.h), into *spec->pool
 *   5. the outbox relay and its publisher, when spec->outbox
 *   6. spec->start: the service's own workers (sweepers, caches, listeners)
 *   7. the health listener: /healthz, /readyz (database and broker), /metrics
 *   8. the RPC server on the back of the service on every broker
 *
 * Stopping: the RPC server is withdrawn from readiness and stopped first
 * (calls in flight finish), then spec->stop, the relay, the publisher, the
 * health listener, the pool. The shutdown deadline (ks_shutdown.h) bounds it.
 * Exit status: 0 after a signal, 2 for configuration, 1 for anything else
 * that failed at start.
 */
#ifndef KS_SERVICE_H
#define KS_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_config.h"
#include "ks_events.h"
#include "ks_method.h"
#include "ks_metrics.h"
#include "ks_pg.h"
#include "ks_topology.h"

/* The settings every RPC service has; the first member of its config struct. */
typedef struct ks_service_settings {
        char *pg_dsn;       /* KEELSON_PG_DSN: the owner, for migrations and the relay */
        char *pg_login_dsn; /* KEELSON_<SVC>_PG_LOGIN_DSN: the pool's login */
        char *pg_role;      /* KEELSON_<SVC>_PG_ROLE, or spec->pg_role when not a setting */
        char *broker_url;   /* KEELSON_BROKER_URL */
        char *log_level;    /* KEELSON_LOG_LEVEL */
        char *http_host;    /* KEELSON_<SVC>_HTTP_HOST */
        int64_t http_port;
        int64_t workers;
        int64_t queue_max;
        int64_t max_inflight;
        int64_t pg_pool_size;
        int64_t pg_acquire_timeout_ms;
        int64_t pg_statement_timeout_ms;
        /* when spec->outbox: */
        int64_t outbox_batch_max;
        int64_t outbox_poll_ms;
        int64_t outbox_retention_s;
        bool outbox_relay;
} ks_service_settings;

/* A service's defaults for the shared settings, as written in the environment. */
typedef struct ks_service_defaults {
        const char *http_port;
        const char *workers;
        int64_t workers_min, workers_max;
        const char *workers_help; /* NULL: "worker threads serving RPCs" */
        const char *pg_pool_size;
        const char *pg_pool_help;  /* NULL: "PostgreSQL connections of this replica" */
        const char *pg_login_help; /* NULL: a login that is a member of the runtime role */
        const char *pg_acquire_timeout_ms;
        const char *pg_statement_timeout_ms;
        /* with spec->outbox: NULL is "1000" (a service whose events wake no relay polls sooner) */
        const char *outbox_poll_ms;
        const char *outbox_retention_s;    /* NULL: "3600" */
        const char *outbox_retention_help; /* NULL: a generic line */
} ks_service_defaults;

/* What the hooks are handed once the shared parts run. */
typedef struct ks_service_env {
        const ks_service_settings *settings;
        const char *const *broker_bases; /* every broker's base URL */
        int n_brokers;
        ks_publisher *publisher; /* the relay's, when spec->outbox and the relay runs; else NULL */
        /* set by spec->start: the server's bound on KS_M_HEAVY calls (0: none) */
        int heavy_max;
        const char *heavy_message;
        ks_counter *heavy_rejected;
        /* set by spec->start: a tenant's writes the workers run at once (0: no bound) */
        int tenant_writers;
        /* set by spec->start: how a group of a tenant's KS_M_GROUPED calls runs, and at most how
         * many (ks_rpc_server_options.group_run; 0: no groups) */
        void (*group_run)(void *service, ks_call *const *calls, int *codes, int n);
        int group_max;
} ks_service_env;

typedef struct ks_service_spec {
        const char *name;    /* "auth": logs, metrics, KEELSON_AUTH_* */
        const char *summary; /* the first line of --help */
        ks_service_id id;    /* its slot on the brokers */
        const ks_method_table *methods;
        void *service; /* handed to handlers as call->service, and to every hook */

        /* configuration: a struct whose member at settings_offset is a ks_service_settings */
        void *config;
        size_t settings_offset;
        const ks_config_var *vars; /* the service's own, offsets into config */
        size_t n_vars;
        ks_service_defaults defaults;

        /* PostgreSQL */
        const char *schema; /* the schema it owns and migrates; NULL: none */
        const ks_migration *migrations;
        size_t n_migrations;
        const char *pg_role;      /* the runtime role (the default, when pg_role_setting) */
        bool pg_role_setting;     /* KEELSON_<SVC>_PG_ROLE may change it */
        const char *login_schema; /* whose tables the login may not own (NULL: schema) */
        ks_pg_pool **pool;        /* where the pool goes (the service's struct) */

        bool outbox; /* publishes committed outbox rows of schema (KEELSON_<SVC>_OUTBOX_*) */
        /*
         * The service trusts the role of the caller context (it keeps no copy
         * of memberships): the RPC server refuses a role that lacks a method's
         * permission before the handler runs, before anything is read or
         * checked (ks_rpc_server_options.role_permission).
         */
        bool role_from_caller;

        /* hooks, each optional */
        int (*check)(void *service, char *err, size_t err_len); /* 0, or -1 and err */
        int (*start)(void *service, ks_service_env *env);       /* 0, or -1 (logged by it) */
        void (*stop)(void *service);                            /* undoes start, even a half one */
        int (*worker_init)(void *service, int index, void **state);
        void (*worker_fini)(void *service, void *state);
} ks_service_spec;

/* Runs the service until SIGINT or SIGTERM; returns main's exit status. */
int ks_service_run(const ks_service_spec *spec, int argc, char **argv);

/*
 * The configuration table ks_service_run loads: the shared settings with
 * spec's names and defaults, then spec->vars. *out is malloc'ed with the
 * names it points to (free it with ks_service_vars_free). For --help tests.
 */
int ks_service_vars(const ks_service_spec *spec, ks_config_var **out, size_t *n) KS_MUST_CHECK;
void ks_service_vars_free(ks_config_var *vars, size_t n);

#endif
