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
        svc->intake_seconds =
            ks_histogram_get(reg, "keelson_webhook_intake_seconds",
                             "Time from an intake call's arrival to its answer (verify and store)",
                             NULL, KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
}

int wh_start(void *service, ks_service_env *env)
{
        (void)env;
        init_metrics(service);
        return 0;
}

void wh_stop(void *service)
{
        (void)service;
}
