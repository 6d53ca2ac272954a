/*
 * keelson-webhook: webhooks in both directions, per tenant
 * (keelson.webhook.v1.WebhookService). See webhook.h for its files.
 *
 * The service skeleton (ks_service.h) runs it: migrations of schema
 * "webhook", the pool, the health listener and the RPC server. Its own
 * settings are in setup.c; its method table is methods.c.
 */
#include "ks_service.h"
#include "webhook.h"

int main(int argc, char **argv)
{
        static wh_config cfg;
        static wh_service svc = {.cfg = &cfg};
        const ks_service_spec spec = {
            .name = "webhook",
            .summary = "webhooks: signed intake from providers",
            .id = KS_SVC_WEBHOOK,
            .methods = &wh_methods,
            .service = &svc,
            .config = &cfg,
            .settings_offset = offsetof(wh_config, base),
            .vars = wh_config_vars,
            .n_vars = wh_config_vars_n,
            .defaults = {.http_port = "7521",
                         .workers = "4",
                         .workers_min = 1,
                         .workers_max = 64,
                         .pg_pool_size = "4",
                         .pg_login_help = "libpq connection string the pool logs in with, as a"
                                          " role that owns nothing and is a member of"
                                          " keelson_webhook_rt and keelson_webhook_worker"
                                          " (empty: KEELSON_PG_DSN, with a warning)",
                         .pg_acquire_timeout_ms = "5000",
                         .pg_statement_timeout_ms = "10000"},
            .schema = "webhook",
            .migrations = ks_service_migrations,
            .n_migrations = ks_service_migrations_n,
            .pg_role = "keelson_webhook_rt",
            .pool = &svc.pool,
            .role_from_caller = true,
            .check = wh_check_config,
            .start = wh_start,
            .stop = wh_stop,
        };

        return ks_service_run(&spec, argc, argv);
}
