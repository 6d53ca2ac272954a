/*
 * keelson-billing's own settings and what it starts beside the service
 * skeleton (ks_service.h): a client of the ledger, the ledger relay
 * (relay.c) and the scheduler (scheduler.c). main.c hands these to
 * ks_service_run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "billing.h"
#include "ks_log.h"

#define C bl_config
const ks_config_var bl_config_vars[] = {
    KS_CFG_INT("KEELSON_BILLING_LEDGER_TIMEOUT_MS", C, ledger_timeout_ms, "5000", 100, 60000,
               "deadline of each call to the ledger (the relay's batches, reconciliation)"),
    KS_CFG_BOOL("KEELSON_BILLING_RELAY", C, relay, "true",
                "run the ledger relay in this replica (false: other replicas post what it"
                " queues)"),
    KS_CFG_INT("KEELSON_BILLING_RELAY_BATCH_MAX", C, relay_batch_max, "500", 1, 2000,
               "postings the relay claims and sends to the ledger at once"),
    KS_CFG_INT("KEELSON_BILLING_RELAY_POLL_MS", C, relay_poll_ms, "100", 10, 60000,
               "pause of the relay when nothing is queued"),
    KS_CFG_INT("KEELSON_BILLING_RELAY_ATTEMPTS_MAX", C, relay_attempts_max, "20", 1, 1000,
               "tries of a posting the ledger refuses (not exists, not ok) before it is"
               " marked failed"),
    KS_CFG_BOOL("KEELSON_BILLING_SCHEDULER", C, scheduler, "true",
                "run the scheduler in this replica (renewals, trial ends, dunning retries;"
                " any number of replicas may run it)"),
    KS_CFG_INT("KEELSON_BILLING_SCHEDULER_POLL_MS", C, scheduler_poll_ms, "1000", 10, 3600000,
               "pause of the scheduler when nothing is due"),
    KS_CFG_INT("KEELSON_BILLING_SCHEDULER_BATCH_MAX", C, scheduler_batch_max, "100", 1, 1000,
               "due subscriptions the scheduler takes per pass"),
    KS_CFG_STR("KEELSON_BILLING_DUNNING_RETRY_DAYS", C, dunning_retry_days, "3,5,7", 0,
               "days between a failed automatic charge and each retry, comma-separated"
               " (1..8 retries of 1..60 days); after the last one fails the invoice is"
               " uncollectible and the subscription canceled"),
    KS_CFG_INT("KEELSON_BILLING_TENANT_WRITERS", C, tenant_writers, "1", 1, 1024,
               "write calls of one tenant this replica runs at once; the others wait their"
               " turn in the order they came (within their deadline)"),
    KS_CFG_INT("KEELSON_BILLING_GROUP_MAX", C, group_max, "15", 1, 15,
               "CreateSubscription calls of one tenant queued together that run in one"
               " transaction, in one turn (1: each alone)"),
};
#undef C
const size_t bl_config_vars_n = sizeof(bl_config_vars) / sizeof(bl_config_vars[0]);

int bl_dunning_parse(const char *s, int32_t *days, int *n)
{
        const char *p = s;

        *n = 0;
        if (s == NULL || *s == '\0') {
                return -1;
        }
        for (;;) {
                char *end;
                if (*p < '0' || *p > '9') { /* digits only: no sign, no space */
                        return -1;
                }
                long v = strtol(p, &end, 10);
                if (end == p || v < 1 || v > 60 || *n >= BL_DUNNING_RETRIES_MAX ||
                    (*end != ',' && *end != '\0')) {
                        return -1;
                }
                days[(*n)++] = (int32_t)v;
                if (*end == '\0') {
                        return 0;
                }
                p = end + 1;
        }
}

int bl_check_config(void *service, char *err, size_t err_len)
{
        bl_service *svc = service;

        if (bl_dunning_parse(svc->cfg->dunning_retry_days, svc->dunning_days, &svc->n_dunning) !=
            0) {
                snprintf(err, err_len,
                         "KEELSON_BILLING_DUNNING_RETRY_DAYS: 1 to %d numbers of days (1..60),"
                         " comma-separated",
                         BL_DUNNING_RETRIES_MAX);
                return -1;
        }
        return 0;
}

static void init_metrics(bl_service *svc)
{
        ks_metrics *reg = ks_metrics_default();

        svc->charges_ok = ks_counter_get(reg, "keelson_billing_charges_total",
                                         "Automatic and requested card charges by outcome",
                                         "result=\"succeeded\"");
        svc->grouped_committed = ks_counter_get(
            reg, "keelson_billing_grouped_calls_total",
            "Calls of a group (a tenant's queued writes run in one transaction) by outcome:"
            " committed together, or rolled back and run one by one",
            "outcome=\"committed\"");
        svc->grouped_undone = ks_counter_get(
            reg, "keelson_billing_grouped_calls_total",
            "Calls of a group (a tenant's queued writes run in one transaction) by outcome:"
            " committed together, or rolled back and run one by one",
            "outcome=\"run_alone\"");
        svc->charges_declined = ks_counter_get(reg, "keelson_billing_charges_total",
                                               "Automatic and requested card charges by outcome",
                                               "result=\"declined\"");
}

int bl_start(void *service, ks_service_env *env)
{
        bl_service *svc = service;
        const bl_config *c = svc->cfg;

        init_metrics(svc);
        env->tenant_writers = (int)c->tenant_writers; /* the RPC server keeps the turns */
        env->group_max = (int)c->group_max;           /* and makes the groups */
        env->group_run = c->group_max > 1 ? bl_group_run : NULL;
        if (ks_rpc_client_of(&svc->ledger, env->broker_bases, env->n_brokers, KS_SVC_LEDGER, 64,
                             (int)c->ledger_timeout_ms) != KS_OK) {
                ks_log_error(NULL, "billing: cannot make the ledger client", NULL);
                return -1;
        }
        if (c->relay && bl_relay_start(&svc->relay, svc) != KS_OK) {
                ks_log_error(NULL, "billing: cannot start the ledger relay", NULL);
                return -1;
        }
        if (c->scheduler && bl_scheduler_start(&svc->scheduler, svc) != KS_OK) {
                ks_log_error(NULL, "billing: cannot start the scheduler", NULL);
                return -1;
        }
        return 0;
}

void bl_stop(void *service)
{
        bl_service *svc = service;

        bl_scheduler_stop(svc->scheduler);
        svc->scheduler = NULL;
        bl_relay_stop(svc->relay);
        svc->relay = NULL;
        ks_rpc_client_free(svc->ledger);
        svc->ledger = NULL;
}
