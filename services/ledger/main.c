/*
 * keelson-ledger: double-entry accounting with TigerBeetle's contract
 * (keelson.ledger.v1.LedgerService). See ledger.h for how a batch runs.
 *
 * The service skeleton (ks_service.h) runs it: migrations of schema
 * "ledger", the pool, the health listener and the RPC server. What only the
 * ledger starts (batch groups, the expiry sweeper) is in setup.c, each
 * worker's working set in worker.c; its method table is methods.c.
 */
#include "ks_service.h"
#include "ledger.h"

int main(int argc, char **argv)
{
        static lg_config cfg;
        static lg_service svc = {.cfg = &cfg};
        const ks_service_spec spec = {
            .name = "ledger",
            .summary = "double-entry accounts and transfers",
            .id = KS_SVC_LEDGER,
            .methods = &lg_methods,
            .service = &svc,
            .config = &cfg,
            .settings_offset = offsetof(lg_config, base),
            .vars = lg_config_vars,
            .n_vars = lg_config_vars_n,
            .defaults = {.http_port = "7491",
                         .workers = "4",
                         .workers_min = 1,
                         .workers_max = 64,
                         .workers_help = "worker threads serving RPCs; each holds a working set"
                                         " for the largest batch, and each batch waiting in a"
                                         " group holds one",
                         .pg_pool_size = "5",
                         .pg_pool_help = "PostgreSQL connections of this replica (workers + 1"
                                         " for the sweeper is enough)",
                         .pg_login_help = "libpq connection string the pool logs in with, as a"
                                          " role that owns nothing and is a member of"
                                          " keelson_ledger_rt and keelson_ledger_sweeper (empty:"
                                          " KEELSON_PG_DSN, with a warning)",
                         .pg_acquire_timeout_ms = "5000",
                         .pg_statement_timeout_ms = "30000"},
            .schema = "ledger",
            .migrations = ks_service_migrations,
            .n_migrations = ks_service_migrations_n,
            /* Every transaction sets it itself too (SET LOCAL ROLE in db.c). */
            .pg_role = "keelson_ledger_rt",
            .pool = &svc.pool,
            .check = lg_check_config,
            .start = lg_start,
            .stop = lg_stop,
            .worker_init = lg_worker_init,
            .worker_fini = lg_worker_fini,
        };

        return ks_service_run(&spec, argc, argv);
}
