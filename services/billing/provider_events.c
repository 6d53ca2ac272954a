/*
 * ApplyProviderEvent (internal): a payment provider's event, as the webhook
 * service read it from a verified webhook, applied to keelson's invoices
 * and subscriptions through billing's own paths (a payment through
 * bl_invoice_apply_payment: its row, its ledger posting, its events), in
 * one transaction:
 *
 * 1. The event's row in billing.provider_events is taken first (its key is
 *    the provider's event id): a second application of the same event
 *    waits for the first to commit, finds the row and answers "duplicate"
 *    with what the first did. Exactly once, however often the webhook
 *    service asks.
 * 2. The keelson object the event is about (the invoice or subscription its
 *    metadata names) is locked; an event older than the newest one
 *    applied to that object is "stale" and changes nothing, so events
 *    arriving out of order never move an object back.
 * 3. The effect, by type (Stripe's):
 *      invoice.paid, payment_intent.succeeded   a payment of the invoice
 *        (one per payment at the provider: both events of one payment
 *        carry its payment intent as reference); "no_change" once paid
 *      invoice.payment_failed, payment_intent.payment_failed   a failed
 *        payment, the subscription past due
 *      customer.subscription.deleted   the subscription canceled now
 *      customer.subscription.updated   cancel at the period's end, or not
 *      charge.refunded, and anything else   "ignored" (billing models
 *        refunds as credit notes: issue one)
 *    A provider states facts: a move the object has made already is
 *    "no_change", not an error. What cannot be applied at all (an invoice
 *    or subscription the tenant does not have, another currency) is an
 *    error the webhook service records.
 */
#include "billing.h"

#include <stdio.h>
#include <string.h>

#include "ks_text.h"

#define EVENT_ID_MAX 255
#define TYPE_MAX     255
#define FAILURE_MAX  63

static const char sql_claim[] =
    "INSERT INTO billing.provider_events (tenant_id, provider, event_id, type, created_ms,"
    " applied_ms, outcome) VALUES (billing.ctx_tenant(), $1, $2, $3, $4::int8, billing.now_ms(),"
    " 'pending') ON CONFLICT (tenant_id, provider, event_id) DO NOTHING RETURNING 1";

static const char sql_prior[] = "SELECT outcome FROM billing.provider_events"
                                " WHERE tenant_id = billing.ctx_tenant() AND provider = $1"
                                " AND event_id = $2";

static const char sql_newest[] = "SELECT COALESCE(max(created_ms), -1) FROM billing.provider_events"
                                 " WHERE tenant_id = billing.ctx_tenant() AND object_key = $1"
                                 " AND outcome IN ('applied', 'no_change')";

static const char sql_done[] = "UPDATE billing.provider_events SET object_key = $3, outcome = $4,"
                               " detail = $5 WHERE tenant_id = billing.ctx_tenant()"
                               " AND provider = $1 AND event_id = $2";

static const char sql_paid_by[] = "SELECT 1 FROM billing.payments"
                                  " WHERE tenant_id = billing.ctx_tenant() AND method = 'provider'"
                                  " AND status = 1 AND reference = $1";

typedef enum effect {
        E_IGNORE,
        E_PAID,
        E_PAYMENT_FAILED,
        E_SUB_DELETED,
        E_SUB_UPDATED,
} effect;

static const struct {
        const char *type;
        effect e;
} effects[] = {
    {"invoice.paid", E_PAID},
    {"payment_intent.succeeded", E_PAID},
    {"invoice.payment_failed", E_PAYMENT_FAILED},
    {"payment_intent.payment_failed", E_PAYMENT_FAILED},
    {"customer.subscription.deleted", E_SUB_DELETED},
    {"customer.subscription.updated", E_SUB_UPDATED},
};

typedef struct apply {
        const Keelson__Billing__V1__ApplyProviderEventRequest *in;
        effect e;
        char key[BL_UUID_LEN + 16]; /* "invoice:<id>", "subscription:<id>", "" */
        const char *outcome;
        char detail[160];
} apply;

static effect effect_of(const char *type)
{
        for (size_t i = 0; i < sizeof(effects) / sizeof(effects[0]); i++) {
                if (strcmp(effects[i].type, type) == 0) {
                        return effects[i].e;
                }
        }
        return E_IGNORE;
}

static int outcome(apply *a, const char *what, const char *detail)
{
        a->outcome = what;
        snprintf(a->detail, sizeof(a->detail), "%s", detail);
        return KS_OK;
}

/* ---- the object --------------------------------------------------------------------- */

/* The object the event is about, or "" (then it is ignored); -1 when the event names none. */
static int object_of(apply *a)
{
        const char *id =
            a->e == E_PAID || a->e == E_PAYMENT_FAILED ? a->in->invoice_id : a->in->subscription_id;
        if (a->e == E_IGNORE || id[0] == '\0') {
                a->key[0] = '\0';
                return -1;
        }
        snprintf(a->key, sizeof(a->key), "%s:%s",
                 a->e == E_PAID || a->e == E_PAYMENT_FAILED ? "invoice" : "subscription", id);
        return 0;
}

/* Whether an event newer than this one was applied to the object already. */
static int stale(bl_tx *tx, const apply *a, bool *out)
{
        const char *p[1] = {a->key};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_newest, 1, p, &res)) != KS_OK) {
                return rc;
        }
        *out = ks_pg_int(res, 0, 0) > a->in->created_unix_ms;
        PQclear(res);
        return KS_OK;
}

/* ---- the effects ------------------------------------------------------------------------ */

static int paid(bl_tx *tx, apply *a, bl_invoice *inv, int64_t now)
{
        const char *ref =
            a->in->payment_reference[0] != '\0' ? a->in->payment_reference : a->in->event_id;
        const char *p[1] = {ref};
        PGresult *res = NULL;
        bl_payment_made pay;
        int rc;

        if (inv->state == BL_INV_PAID || inv->state == BL_INV_VOID) {
                return outcome(a, "no_change",
                               inv->state == BL_INV_PAID ? "the invoice is paid"
                                                         : "the invoice is void");
        }
        if (inv->state == BL_INV_DRAFT) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "the invoice is a draft");
        }
        if (a->in->currency[0] != '\0' && strcmp(a->in->currency, inv->currency->code) != 0) {
                return bl_fail(tx, KS_FAILED_PRECONDITION, "currency %s: the invoice is in %s",
                               a->in->currency, inv->currency->code);
        }
        if ((rc = bl_exec(tx, sql_paid_by, 1, p, &res)) != KS_OK) {
                return rc;
        }
        bool before = PQntuples(res) > 0;
        PQclear(res);
        if (before) {
                return outcome(a, "no_change", "this payment was applied before");
        }
        int64_t remaining = bl_invoice_remaining(inv);
        memset(&pay, 0, sizeof(pay));
        pay.succeeded = true;
        pay.amount = a->in->amount > 0 && a->in->amount < remaining ? a->in->amount : remaining;
        pay.created_ms = now;
        snprintf(pay.method, sizeof(pay.method), "provider");
        snprintf(pay.reference, sizeof(pay.reference), "%s", ref);
        if ((rc = bl_invoice_apply_payment(tx, inv, NULL, &pay)) != KS_OK) {
                return rc;
        }
        return outcome(a, "applied",
                       inv->state == BL_INV_PAID ? "the invoice is paid"
                                                 : "a part of the invoice is paid");
}

static int payment_failed(bl_tx *tx, apply *a, bl_invoice *inv, int64_t now)
{
        bl_payment_made pay;
        int rc;

        if (inv->state != BL_INV_OPEN) {
                return outcome(a, "no_change", "the invoice is not open");
        }
        memset(&pay, 0, sizeof(pay));
        pay.amount = bl_invoice_remaining(inv);
        pay.created_ms = now;
        snprintf(pay.method, sizeof(pay.method), "provider");
        snprintf(pay.reference, sizeof(pay.reference), "%s",
                 a->in->payment_reference[0] != '\0' ? a->in->payment_reference : a->in->event_id);
        snprintf(pay.failure_code, sizeof(pay.failure_code), "%s",
                 a->in->failure_code[0] != '\0' ? a->in->failure_code : "provider_failure");
        if ((rc = bl_invoice_payment_failed(tx, inv, &pay)) != KS_OK) {
                return rc;
        }
        return outcome(a, "applied", "a failed payment");
}

static int on_invoice(bl_tx *tx, apply *a)
{
        bool is_stale = false;
        bl_customer cust;
        bl_invoice inv;
        int64_t now;
        int rc;

        if ((rc = bl_invoice_load(tx, a->in->invoice_id, true, &inv)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "invoice not found") : rc;
        }
        if ((rc = stale(tx, a, &is_stale)) != KS_OK || is_stale) {
                return rc != KS_OK ? rc : outcome(a, "stale", "a newer event was applied");
        }
        if ((rc = bl_customer_load(tx, inv.customer_id, true, &cust)) != KS_OK ||
            (rc = bl_now_for(tx, cust.test_clock_id, &now)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG) : rc;
        }
        return a->e == E_PAID ? paid(tx, a, &inv, now) : payment_failed(tx, a, &inv, now);
}

static int on_subscription(bl_tx *tx, apply *a)
{
        bool changed = false, is_stale = false;
        bl_subscription s;
        int rc;

        if ((rc = bl_sub_load(tx, a->in->subscription_id, true, &s)) != KS_OK) {
                return rc == KS_NOT_FOUND ? bl_fail(tx, KS_NOT_FOUND, "subscription not found")
                                          : rc;
        }
        if ((rc = stale(tx, a, &is_stale)) != KS_OK || is_stale) {
                return rc != KS_OK ? rc : outcome(a, "stale", "a newer event was applied");
        }
        bl_provider_cancel how = a->e == E_SUB_DELETED         ? BL_PROVIDER_CANCEL_NOW
                                 : a->in->cancel_at_period_end ? BL_PROVIDER_CANCEL_AT_END
                                                               : BL_PROVIDER_CANCEL_WITHDRAW;
        if ((rc = bl_sub_cancel_as_provider(tx, &s, how, &changed)) != KS_OK) {
                return rc;
        }
        static const char *const what[] = {
            [BL_PROVIDER_CANCEL_NOW] = "canceled now",
            [BL_PROVIDER_CANCEL_AT_END] = "to be canceled at the period's end",
            [BL_PROVIDER_CANCEL_WITHDRAW] = "no cancellation at the period's end"};
        return outcome(a, changed ? "applied" : "no_change", what[how]);
}

/* ---- the transaction --------------------------------------------------------------------- */

static int apply_tx(bl_tx *tx, void *arg)
{
        apply *a = arg;
        const Keelson__Billing__V1__ApplyProviderEventRequest *in = a->in;
        Keelson__Billing__V1__ApplyProviderEventResponse resp =
            KEELSON__BILLING__V1__APPLY_PROVIDER_EVENT_RESPONSE__INIT;
        ks_pg_num created = ks_pg_num_of(in->created_unix_ms);
        const char *claim[4] = {in->provider, in->event_id, in->type, created.s};
        PGresult *res = NULL;
        int rc;

        if ((rc = bl_exec(tx, sql_claim, 4, claim, &res)) != KS_OK) {
                return rc;
        }
        bool first = PQntuples(res) == 1;
        PQclear(res);
        if (!first) {
                /* Applied before (or by a twin that committed while this one waited). */
                if ((rc = bl_exec(tx, sql_prior, 2, claim, &res)) != KS_OK) {
                        return rc;
                }
                snprintf(a->detail, sizeof(a->detail), "%s",
                         PQntuples(res) > 0 ? ks_pg_text(res, 0, 0) : "");
                PQclear(res);
                a->outcome = "duplicate";
        } else {
                if (object_of(a) != 0) {
                        rc = outcome(a, "ignored",
                                     a->e == E_IGNORE ? "billing does not act on this type"
                                                      : "the object names no keelson invoice or"
                                                        " subscription (metadata)");
                } else if (a->e == E_PAID || a->e == E_PAYMENT_FAILED) {
                        rc = on_invoice(tx, a);
                } else {
                        rc = on_subscription(tx, a);
                }
                if (rc != KS_OK) {
                        return rc;
                }
                const char *done[5] = {in->provider, in->event_id, a->key, a->outcome, a->detail};
                if ((rc = bl_defer(tx, sql_done, 5, done)) != KS_OK) {
                        return rc;
                }
        }
        resp.outcome = (char *)a->outcome;
        resp.detail = a->detail;
        return ks_call_reply(tx->call, &resp.base);
}

static bool text_valid(const char *field, const char *s, size_t max, bool required, char *err,
                       size_t err_len)
{
        size_t n = strlen(s);

        if ((required && n == 0) || n > max) {
                snprintf(err, err_len, "%s: 1..%zu bytes", field, max);
                return false;
        }
        for (size_t i = 0; i < n; i++) {
                if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) {
                        snprintf(err, err_len, "%s: control characters", field);
                        return false;
                }
        }
        return true;
}

int bl_apply_provider_event(ks_call *call)
{
        const Keelson__Billing__V1__ApplyProviderEventRequest *in = (const void *)call->in;
        apply a = {.in = in, .e = effect_of(in->type)};
        char err[BL_ERR_MAX];

        if (strcmp(in->provider, "stripe") != 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "provider: stripe");
        }
        if (!text_valid("event_id", in->event_id, EVENT_ID_MAX, true, err, sizeof(err)) ||
            !text_valid("type", in->type, TYPE_MAX, true, err, sizeof(err)) ||
            !text_valid("payment_reference", in->payment_reference, BL_REFERENCE_MAX, false, err,
                        sizeof(err)) ||
            !text_valid("failure_code", in->failure_code, FAILURE_MAX, false, err, sizeof(err)) ||
            (in->invoice_id[0] != '\0' &&
             !bl_id_valid("invoice_id", in->invoice_id, err, sizeof(err))) ||
            (in->subscription_id[0] != '\0' &&
             !bl_id_valid("subscription_id", in->subscription_id, err, sizeof(err)))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if (in->created_unix_ms < 0 || in->amount < 0) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "created_unix_ms and amount: not negative");
        }
        if (in->currency[0] != '\0' && bl_currency_find(in->currency) == NULL) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "currency: not an ISO 4217 code");
        }
        return bl_tx_run(call, apply_tx, &a);
}
