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
    KS_CFG_BOOL("KEELSON_WEBHOOK_DELIVER", C, deliver, "true",
                "run the feed and the delivery worker in this replica (any number of replicas"
                " may: they share the work)"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_POLL_MS", C, delivery_poll_ms, "200", 10, 60000,
               "pause of the feed and of the delivery worker when nothing is due"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_BATCH_MAX", C, delivery_batch_max, "100", 1, 1000,
               "due deliveries the worker claims at once"),
    KS_CFG_INT("KEELSON_WEBHOOK_FEED_BATCH_MAX", C, feed_batch_max, "500", 1, 10000,
               "events the feed reads from a source's outbox per transaction"),
    KS_CFG_STR("KEELSON_WEBHOOK_DELIVERY_RETRY_SCHEDULE", C, delivery_retry_schedule,
               "5s,5m,30m,2h,5h,10h,10h", KS_CFG_NONEMPTY,
               "waits between the attempts of a delivery (s, m, h, d; each ±20% jitter); after"
               " the last the delivery fails. The default spans 27.6 hours over 8 attempts"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_DISABLE_AFTER_S", C, delivery_disable_after_s, "432000",
               60, 31536000,
               "a subscription whose deliveries have all failed for this long is disabled"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_TIMEOUT_MS", C, delivery_timeout_ms, "15000", 100, 300000,
               "the whole of one attempt: connect, send, and the response"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_CONNECT_TIMEOUT_MS", C, delivery_connect_timeout_ms,
               "5000", 100, 60000, "DNS, TCP and TLS of one attempt"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_CONCURRENCY", C, delivery_concurrency, "64", 1, 4096,
               "attempts this replica runs at once"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_DESTINATION_CONCURRENCY", C,
               delivery_destination_concurrency, "4", 1, 4096,
               "attempts this replica runs at once to one host and port, and deliveries of one"
               " subscription it claims at once: a slow URL holds up no other"),
    KS_CFG_INT("KEELSON_WEBHOOK_DELIVERY_RETENTION_S", C, delivery_retention_s, "2592000", 3600,
               315360000,
               "delivered and failed deliveries, their attempts and their events are deleted this"
               " long after the event (pending ones are kept)"),
    KS_CFG_STR("KEELSON_WEBHOOK_DELIVERY_ALLOW", C, delivery_allow, "", 0,
               "addresses and CIDR blocks (comma-separated) that deliveries may reach although"
               " they are loopback, private, link-local or otherwise special; empty: only"
               " public addresses (docs/security.md)"),
};
#undef C
const size_t wh_config_vars_n = sizeof(wh_config_vars) / sizeof(wh_config_vars[0]);

int wh_check_config(void *service, char *err, size_t err_len)
{
        wh_service *svc = service;
        wh_config *c = svc->cfg;
        char why[WH_ADDR_ERR_MAX];

        if (wh_retry_parse(c->delivery_retry_schedule, c->retry_ms, WH_RETRY_MAX, &c->retry_n, why,
                           sizeof(why)) != 0) {
                snprintf(err, err_len, "KEELSON_WEBHOOK_DELIVERY_RETRY_SCHEDULE: %s", why);
                return -1;
        }
        if (wh_addr_policy_parse(&c->allow, c->delivery_allow, why, sizeof(why)) != 0) {
                snprintf(err, err_len, "KEELSON_WEBHOOK_DELIVERY_ALLOW: %s", why);
                return -1;
        }
        if (c->delivery_connect_timeout_ms > c->delivery_timeout_ms) {
                snprintf(err, err_len,
                         "KEELSON_WEBHOOK_DELIVERY_CONNECT_TIMEOUT_MS: at most"
                         " KEELSON_WEBHOOK_DELIVERY_TIMEOUT_MS (%lld)",
                         (long long)c->delivery_timeout_ms);
                return -1;
        }
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
        static const char *const deliveries[4] = {NULL, "retry", "delivered", "failed"};
        for (int st = 1; st < 4; st++) {
                snprintf(labels, sizeof(labels), "status=\"%s\"", deliveries[st]);
                svc->deliveries[st] = ks_counter_get(
                    reg, "keelson_webhook_deliveries_total",
                    "Delivery attempts recorded, by what they left the delivery (retry: pending"
                    " again after the schedule's wait)",
                    labels);
        }
        svc->delivery_lag_seconds = ks_histogram_get(
            reg, "keelson_webhook_delivery_lag_seconds",
            "Time from a delivery's creation (its event's fan-out) to its delivered attempt", NULL,
            KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
        svc->deliveries_in_flight =
            ks_gauge_get(reg, "keelson_webhook_deliveries_in_flight",
                         "Deliveries this replica has claimed and not yet recorded", NULL);
        svc->feed_events = ks_counter_get(reg, "keelson_webhook_feed_events_total",
                                          "Events the feed read from the sources' outboxes", NULL);
        svc->feed_deliveries = ks_counter_get(reg, "keelson_webhook_feed_deliveries_total",
                                              "Deliveries the feed's events became", NULL);
        svc->feed_lag_seconds =
            ks_histogram_get(reg, "keelson_webhook_feed_lag_seconds",
                             "Time from an event's transaction to its fan-out into deliveries",
                             NULL, KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
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
        if (svc->cfg->deliver && wh_deliverer_start(&svc->deliverer, svc) != KS_OK) {
                ks_log_error(NULL, "webhook: cannot start the delivery worker", NULL);
                wh_applier_stop(svc->applier);
                svc->applier = NULL;
                return -1;
        }
        return 0;
}

void wh_stop(void *service)
{
        wh_service *svc = service;

        wh_deliverer_stop(svc->deliverer);
        svc->deliverer = NULL;
        wh_applier_stop(svc->applier);
        svc->applier = NULL;
}
