/*
 * keelson-ledger's own settings and what it starts beside the service
 * skeleton (ks_service.h): the batch limits, the per-tenant batch groups
 * (group.c), the expiry sweeper (expiry.c) and the metrics. main.c hands
 * these to ks_service_run.
 */
#include <stdio.h>

#include "ks_log.h"
#include "ledger.h"

#define C lg_config
const ks_config_var lg_config_vars[] = {
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
const size_t lg_config_vars_n = sizeof(lg_config_vars) / sizeof(lg_config_vars[0]);

int lg_check_config(void *service, char *err, size_t err_len)
{
        const lg_config *c = ((lg_service *)service)->cfg;

        if (c->expiry_batch_max > c->batch_max) {
                snprintf(err, err_len,
                         "KEELSON_LEDGER_EXPIRY_BATCH_MAX must not exceed"
                         " KEELSON_LEDGER_BATCH_MAX");
                return -1;
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

int lg_start(void *service, ks_service_env *env)
{
        lg_service *svc = service;
        const lg_config *c = svc->cfg;

        (void)env;
        svc->batch_max = (int)c->batch_max;
        svc->tx_retries = (int)c->tx_retries;
        svc->expiry_interval_ms = (int)c->expiry_interval_ms;
        svc->expiry_batch_max = (int)c->expiry_batch_max;
        svc->expiry_tenants_max = (int)c->expiry_tenants_max;
        init_metrics(svc);
        if (c->group_batches && lg_groups_new(&svc->groups) != 0) {
                ks_log_error(NULL, "out of memory", NULL);
                return -1;
        }
        if (lg_sweeper_start(svc) != 0) {
                ks_log_error(NULL, "cannot start the expiry sweeper", NULL);
                return -1;
        }
        return 0;
}

void lg_stop(void *service)
{
        lg_service *svc = service;

        lg_sweeper_stop(svc);
        lg_groups_free(svc->groups); /* the RPC server, stopped, runs no batch */
        svc->groups = NULL;
}
