/*
 * Billing's figures of the summary: at each cache fill, one call of
 * keelson.billing.v1.BillingService/GetBillingSummary through the brokers
 * (KS_M_INTERNAL: only services call it). The figures are the tenant's,
 * cached once for every role, so the call is made for the tenant itself:
 * the caller's context with the role "admin" (billing's row asks for
 * billing.read), whoever's GetSummary fills the cache; which roles are shown
 * the figures is the reply's to decide (handler.c: billing.read). Its logs
 * carry the caller's request id.
 *
 * Its deadline is KEELSON_SUMMARY_BILLING_TIMEOUT_MS from now, or the
 * caller's own deadline when that comes first. Never resent: a call lost
 * with a billing replica costs this fill billing's figures, not a second
 * call's load on a billing that may be the slow part, and the value without
 * them lives only KEELSON_SUMMARY_PARTIAL_TTL_MS.
 *
 * Any failure makes the figures "unavailable", never the summary: auth's
 * counts are still right. Each one is logged (warn) with the request id, the
 * code and billing's message, and counted.
 */
#include "summary.h"

#include <stdio.h>
#include <string.h>

#include "ks_assert.h"
#include "ks_log.h"

#define BILLING_METHOD "keelson.billing.v1.BillingService/GetBillingSummary"

int sm_billing_start(sm_service *svc, const char *const *brokers, int n, int max_inflight)
{
        KS_ASSERT(svc->billing_timeout_ms > 0 && max_inflight > 0);
        return ks_rpc_client_of(&svc->billing, brokers, n, KS_SVC_BILLING, max_inflight,
                                (int)svc->billing_timeout_ms);
}

void sm_billing_stop(sm_service *svc)
{
        ks_rpc_client_free(svc->billing);
        svc->billing = NULL;
}

static bool currency_valid(const char *s)
{
        if (s == NULL || strlen(s) != SM_CURRENCY_LEN) {
                return false;
        }
        for (int i = 0; i < SM_CURRENCY_LEN; i++) {
                if (s[i] < 'A' || s[i] > 'Z') {
                        return false;
                }
        }
        return true;
}

/* Billing lists at most SM_CURRENCIES_MAX (its own bound): more is not its reply. */
static int amounts_from(Keelson__Billing__V1__CurrencyAmount *const *in, size_t n, sm_amounts *out)
{
        if (n > SM_CURRENCIES_MAX) {
                return KS_INTERNAL;
        }
        for (size_t i = 0; i < n; i++) {
                if (in[i] == NULL || !currency_valid(in[i]->currency)) {
                        return KS_INTERNAL;
                }
                memcpy(out->v[i].currency, in[i]->currency, SM_CURRENCY_LEN + 1);
                out->v[i].amount = in[i]->amount;
        }
        out->n = (uint32_t)n;
        return KS_OK;
}

int sm_billing_from(const Keelson__Billing__V1__GetBillingSummaryResponse *in, sm_billing *out)
{
        memset(out, 0, sizeof(*out));
        if (in->subscriptions_active < 0 || in->subscriptions_trialing < 0 ||
            in->subscriptions_past_due < 0 || in->subscriptions_paused < 0 ||
            in->subscriptions_canceled < 0 || in->invoices_open < 0 ||
            amounts_from(in->mrr, in->n_mrr, &out->mrr) != KS_OK ||
            amounts_from(in->open_amount, in->n_open_amount, &out->open_amount) != KS_OK ||
            amounts_from(in->past_due_amount, in->n_past_due_amount, &out->past_due_amount) !=
                KS_OK) {
                memset(out, 0, sizeof(*out));
                return KS_INTERNAL;
        }
        out->active = in->subscriptions_active;
        out->trialing = in->subscriptions_trialing;
        out->past_due = in->subscriptions_past_due;
        out->paused = in->subscriptions_paused;
        out->canceled = in->subscriptions_canceled;
        out->invoices_open = in->invoices_open;
        out->available = true;
        return KS_OK;
}

/* The reply's payload into out; the code, with why in msg when it is not OK. */
static int take_reply(const ks_rpc_result *res, sm_billing *out, char *msg, size_t msg_len)
{
        Keelson__Billing__V1__GetBillingSummaryResponse *m =
            keelson__billing__v1__get_billing_summary_response__unpack(NULL, res->payload_len,
                                                                       res->payload);
        int rc = m != NULL ? sm_billing_from(m, out) : KS_INTERNAL;

        if (rc != KS_OK) {
                snprintf(msg, msg_len, "%s", m == NULL ? "undecodable reply" : "reply refused");
        }
        keelson__billing__v1__get_billing_summary_response__free_unpacked(m, NULL);
        return rc;
}

void sm_billing_ask(sm_service *svc, const ks_call *call, sm_billing *out)
{
        uint8_t empty[1] = {0}; /* GetBillingSummaryRequest has no field: it packs to nothing */
        int64_t deadline = ks_now_ms() + svc->billing_timeout_ms;
        ks_rpc_result res;
        int code;

        memset(out, 0, sizeof(*out));
        if (call->deadline_unix_ms > 0 && call->deadline_unix_ms < deadline) {
                deadline = call->deadline_unix_ms;
        }
        /* The tenant's figures, whoever asks: the caller's context, as the tenant's admin. */
        ks_caller as_tenant = *call->caller;
        as_tenant.role = "admin";
        const ks_rpc_call_args a = {.method = BILLING_METHOD,
                                    .request_id = call->request_id,
                                    .caller = &as_tenant,
                                    .deadline_unix_ms = deadline,
                                    .payload = empty,
                                    .payload_len = 0};
        if (svc->billing == NULL) {
                memset(&res, 0, sizeof(res));
                code = res.code = KS_UNAVAILABLE;
                snprintf(res.message, sizeof(res.message), "no billing client");
        } else if ((code = ks_rpc_call(svc->billing, &a, &res)) == KS_OK) {
                code = take_reply(&res, out, res.message, sizeof(res.message));
        }
        if (code == KS_OK) {
                ks_counter_inc(svc->m.billing_ok);
        } else {
                memset(out, 0, sizeof(*out));
                ks_counter_inc(svc->m.billing_unavailable);
                ks_log_warn(call->request_id, "billing figures unavailable", "{s:s, s:s, s:s}",
                            "code", ks_code_name(code), "tenant_id", call->caller->tenant_id,
                            "error", res.message);
        }
        ks_rpc_result_clear(&res);
}
