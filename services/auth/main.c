/*
 * keelson-auth: accounts, tenants, memberships, sessions, invitations,
 * password resets, API keys and the audit log (keelson.auth.v1.AuthService).
 *
 * The service skeleton (ks_service.h) runs it: migrations of schema "auth"
 * as the owner, the pool as the runtime role (see db.c), the outbox relay,
 * the health listener and the RPC server. What only auth starts (the hash
 * pool, housekeeping) is in setup.c; its method table is methods.c.
 *
 * Workers carry no state of their own (no worker_init): handlers take a
 * connection from the pool per statement or transaction; see db.c for why.
 */
#include "auth.h"
#include "ks_service.h"

#include <string.h>

int main(int argc, char **argv)
{
        if (argc > 1 && strcmp(argv[1], AUTH_HASH_WORKER_ARG) == 0) {
                return auth_hash_worker_main(argc, argv); /* a hash worker (hash_worker.c) */
        }
        static auth_config cfg;
        static auth_service svc = {.cfg = &cfg};
        const ks_service_spec spec = {
            .name = "auth",
            .summary = "accounts, tenants, sessions and API keys",
            .id = KS_SVC_AUTH,
            .methods = &auth_methods,
            .service = &svc,
            .config = &cfg,
            .settings_offset = offsetof(auth_config, base),
            .vars = auth_config_vars,
            .n_vars = auth_config_vars_n,
            .defaults = {.http_port = "7481",
                         .workers = "16",
                         .workers_min = 2,
                         .workers_max = 256,
                         .workers_help = "worker threads serving RPCs (some wait on the hash"
                                         " pool, the rest stay free)",
                         .pg_pool_size = "8",
                         .pg_acquire_timeout_ms = "2000",
                         .pg_statement_timeout_ms = "5000",
                         .outbox_retention_help = "events (they may hold mail tokens) are deleted"
                                                  " once published and this many seconds old"},
            .schema = "auth",
            .migrations = ks_service_migrations,
            .n_migrations = ks_service_migrations_n,
            .pg_role = "keelson_auth_rt",
            .pg_role_setting = true,
            .pool = &svc.pool,
            .outbox = true,
            .check = auth_check_config,
            .start = auth_start,
            .stop = auth_stop,
        };

        return ks_service_run(&spec, argc, argv);
}
