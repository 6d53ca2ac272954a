/*
 * keelson-summary: the admin dashboard's counts per tenant
 * (keelson.summary.v1.AdminSummaryService), cached on two levels and
 * invalidated by auth's "users.admin_summary" events. See summary.h.
 *
 * The service skeleton (ks_service.h) runs it: the pool (as the reader role
 * auth grants; this service owns no schema and has no migrations), the
 * health listener and the RPC server. What only the summary starts (the
 * local cache, the invalidation listener) is in setup.c; its method table
 * is methods.c.
 */
#include "ks_service.h"
#include "summary.h"

int main(int argc, char **argv)
{
        static sm_config cfg;
        static sm_service svc = {.cfg = &cfg};
        const ks_service_spec spec = {
            .name = "summary",
            .summary = "admin dashboard counts, cached",
            .id = KS_SVC_SUMMARY,
            .methods = &sm_methods,
            .service = &svc,
            .config = &cfg,
            .settings_offset = offsetof(sm_config, base),
            .vars = sm_config_vars,
            .n_vars = sm_config_vars_n,
            .defaults = {.http_port = "7501",
                         .workers = "4",
                         .workers_min = 1,
                         .workers_max = 64,
                         .pg_pool_size = "4",
                         .pg_acquire_timeout_ms = "5000",
                         .pg_statement_timeout_ms = "10000"},
            /* Granted by auth's 004_summary_reader.sql. */
            .pg_role = "keelson_summary_rt",
            .pg_role_setting = true,
            .login_schema = "auth", /* what it reads is auth's */
            .pool = &svc.pool,
            .check = sm_check_config,
            .start = sm_start,
            .stop = sm_stop,
            .worker_init = sm_worker_init,
            .worker_fini = sm_worker_fini,
        };

        return ks_service_run(&spec, argc, argv);
}
