/*
 * keelson-billing: customers, plans, subscriptions and invoices, per tenant
 * (keelson.billing.v1.BillingService). See billing.h for its files.
 *
 * The service skeleton (ks_service.h) runs it: migrations of schema
 * "billing", the pool, the event outbox's relay, the health listener and the
 * RPC server. Its own settings and what only it starts (the ledger relay,
 * the scheduler) are in setup.c; its method table is methods.c.
 */
#include "billing.h"
#include "ks_service.h"

int main(int argc, char **argv)
{
        static bl_config cfg;
        static bl_service svc = {.cfg = &cfg};
        const ks_service_spec spec = {
            .name = "billing",
            .summary = "customers, plans, subscriptions and invoices",
            .id = KS_SVC_BILLING,
            .methods = &bl_methods,
            .service = &svc,
            .config = &cfg,
            .settings_offset = offsetof(bl_config, base),
            .vars = bl_config_vars,
            .n_vars = bl_config_vars_n,
            .defaults = {.http_port = "7511",
                         .workers = "4",
                         .workers_min = 1,
                         .workers_max = 64,
                         .pg_pool_size = "6",
                         .pg_pool_help = "PostgreSQL connections of this replica (workers, and"
                                         " one each for the ledger relay and the scheduler)",
                         .pg_login_help = "libpq connection string the pool logs in with, as a"
                                          " role that owns nothing and is a member of"
                                          " keelson_billing_rt and keelson_billing_worker"
                                          " (empty: KEELSON_PG_DSN, with a warning)",
                         .pg_acquire_timeout_ms = "5000",
                         .pg_statement_timeout_ms = "10000",
                         /* its events send no NOTIFY (events.c): the relay polls */
                         .outbox_poll_ms = "100",
                         /* keelson-webhook reads the outbox as its feed (003_feed.sql): a
                          * day of events waits for it */
                         .outbox_retention_s = "86400",
                         .outbox_retention_help =
                             "events are deleted once published and this many seconds old; the"
                             " webhook service delivers from the outbox, so it must not be down"
                             " longer"},
            .schema = "billing",
            .migrations = ks_service_migrations,
            .n_migrations = ks_service_migrations_n,
            .pg_role = "keelson_billing_rt",
            .pool = &svc.pool,
            .outbox = true,
            .role_from_caller = true,
            .check = bl_check_config,
            .start = bl_start,
            .stop = bl_stop,
        };

        return ks_service_run(&spec, argc, argv);
}
