/*
 * keelson-webhook's own settings and metrics; main.c hands these to
 * ks_service_run with the skeleton's (ks_service.h).
 */
#include <stdio.h>

#include "ks_log.h"
#include "webhook.h"

#define C wh_config
const ks_config_var wh_config_vars[] = {
    KS_CFG_INT("KEELSON_WEBHOOK_INTAKE_BODY_MAX_BYTES", C, intake_body_max_bytes, "262144", 1024,
               1000000,
               "largest event body the intake stores; a larger one is refused (400) and the"
               " gateway's KEELSON_GATEWAY_BODY_MAX_BYTES bounds it first"),
    KS_CFG_BOOL("KEELSON_WEBHOOK_APPLY", C, apply, "true",
                "run the applier in this replica (pending events applied to billing; any"
                " number of replicas may run it)"),
    KS_CFG_INT("KEELSON_WEBHOOK_APPLY_POLL_MS", C, apply_poll_ms, "200", 10, 60000,
               "pause of the applier when nothing is due (an event stored by this replica wakes"
               " it at once)"),
    KS_CFG_INT("KEELSON_WEBHOOK_APPLY_BATCH_MAX", C, apply_batch_max, "50", 1, 1000,
               "pending events the applier claims at once"),
    KS_CFG_INT("KEELSON_WEBHOOK_APPLY_ATTEMPTS_MAX", C, apply_attempts_max, "20", 1, 1000,
               "applications of an event that billing did not take (unavailable, slow) before"
               " it is marked failed; retried after 1 s doubling to 5 min"),
    KS_CFG_INT("KEELSON_WEBHOOK_BILLING_TIMEOUT_MS", C, billing_timeout_ms, "5000", 100, 60000,
               "deadline of each call to billing (ApplyProviderEvent)"),
};
#undef C
const size_t wh_config_vars_n = sizeof(wh_config_vars) / sizeof(wh_config_vars[0]);

int wh_check_config(void *service, char *err, size_t err_len)
{
        (void)service;
        (void)err;
        (void)err_len;
        return 0;
}

#define INTAKE_NAME  "keelson_webhook_intake_total"
#define INTAKE_HELP  "Webhook intake requests by outcome"
#define REFUSED_NAME "keelson_webhook_intake_refused_total"
#define REFUSED_HELP "Webhooks refused by their signature or its time, by reason"

static void init_metrics(wh_service *svc)
{
        static const char *const results[WH_IN_RESULTS] = {
            [WH_IN_STORED] = "stored",
            [WH_IN_DUPLICATE] = "duplicate",
            [WH_IN_UNKNOWN_ENDPOINT] = "unknown_endpoint",
            [WH_IN_BAD_REQUEST] = "bad_request",
            [WH_IN_REFUSED] = "refused",
            [WH_IN_UNAVAILABLE] = "unavailable",
        };
        ks_metrics *reg = ks_metrics_default();
        char labels[96];

        for (int i = 0; i < WH_IN_RESULTS; i++) {
                snprintf(labels, sizeof(labels), "result=\"%s\"", results[i]);
                svc->intake[i] = ks_counter_get(reg, INTAKE_NAME, INTAKE_HELP, labels);
        }
        for (int v = 1; v < WH_VERDICT_COUNT; v++) {
                snprintf(labels, sizeof(labels), "reason=\"%s\"", wh_verdict_name(v));
                svc->refused[v] = ks_counter_get(reg, REFUSED_NAME, REFUSED_HELP, labels);
        }
        static const char *const statuses[5] = {NULL, "pending", "applied", "ignored", "failed"};
        for (int s = 1; s < 5; s++) {
                snprintf(labels, sizeof(labels), "status=\"%s\"", statuses[s]);
                svc->applied[s] = ks_counter_get(reg, "keelson_webhook_applications_total",
                                                 "Applications of received events to billing, by"
                                                 " the status they left (pending: to retry)",
                                                 labels);
        }
        svc->apply_lag_seconds = ks_histogram_get(
            reg, "keelson_webhook_apply_lag_seconds",
            "Time from an event's arrival to its application (applied, ignored or failed)", NULL,
            KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
        svc->intake_seconds =
            ks_histogram_get(reg, "keelson_webhook_intake_seconds",
                             "Time from an intake call's arrival to its answer (verify and store)",
                             NULL, KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
}

int wh_start(void *service, ks_service_env *env)
{
        wh_service *svc = service;

        init_metrics(svc);
        if (svc->cfg->apply && wh_applier_start(&svc->applier, svc, env) != KS_OK) {
                ks_log_error(NULL, "webhook: cannot start the applier", NULL);
                return -1;
        }
        return 0;
}

void wh_stop(void *service)
{
        wh_service *svc = service;

        wh_applier_stop(svc->applier);
        svc->applier = NULL;
}
