/*
 * A Stripe event's facts for billing (stripe.h). The fields read, by the
 * event's type (Stripe's API reference, "Events" and each object):
 *
 *   invoice.*            data.object: an invoice. amount_paid, currency,
 *                        payment_intent (the reference; the invoice's own
 *                        id when it has none), metadata.keelson_invoice_id
 *   payment_intent.*     a payment intent. amount_received, currency, id
 *                        (the reference), last_payment_error.code,
 *                        metadata.keelson_invoice_id
 *   charge.*             a charge. amount_refunded, currency,
 *                        payment_intent, metadata.keelson_invoice_id
 *   customer.subscription.*   a subscription. cancel_at_period_end,
 *                        metadata.keelson_subscription_id
 */
#include "stripe.h"

#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* A string member copied into out when it fits; "" otherwise. */
static void text(const json_t *o, const char *key, char *out, size_t out_len)
{
        const json_t *v = json_object_get(o, key);
        size_t n = json_is_string(v) ? json_string_length(v) : out_len;

        out[0] = '\0';
        if (n < out_len && memchr(json_string_value(v), '\0', n) == NULL) {
                memcpy(out, json_string_value(v), n + 1);
        }
}

/* An id that may be a string or an expanded object with an "id". */
static void id_of(const json_t *o, const char *key, char *out, size_t out_len)
{
        const json_t *v = json_object_get(o, key);

        if (json_is_object(v)) {
                text(v, "id", out, out_len);
        } else {
                text(o, key, out, out_len);
        }
}

static int64_t integer(const json_t *o, const char *key)
{
        const json_t *v = json_object_get(o, key);

        return json_is_integer(v) && json_integer_value(v) > 0 ? (int64_t)json_integer_value(v) : 0;
}

static bool starts(const char *s, const char *prefix)
{
        return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void read_object(const json_t *obj, wh_stripe_event *ev,
                        Keelson__Billing__V1__ApplyProviderEventRequest *req)
{
        const json_t *meta = json_object_get(obj, "metadata");

        text(obj, "currency", ev->currency, sizeof(ev->currency));
        for (char *c = ev->currency; *c != '\0'; c++) {
                *c = (char)toupper((unsigned char)*c);
        }
        if (starts(ev->type, "customer.subscription.")) {
                text(meta, "keelson_subscription_id", ev->subscription_id,
                     sizeof(ev->subscription_id));
                req->cancel_at_period_end =
                    json_is_true(json_object_get(obj, "cancel_at_period_end"));
                return;
        }
        text(meta, "keelson_invoice_id", ev->invoice_id, sizeof(ev->invoice_id));
        if (starts(ev->type, "invoice.")) {
                req->amount = integer(obj, "amount_paid");
                id_of(obj, "payment_intent", ev->reference, sizeof(ev->reference));
                if (ev->reference[0] == '\0') {
                        text(obj, "id", ev->reference, sizeof(ev->reference));
                }
        } else if (starts(ev->type, "payment_intent.")) {
                req->amount = integer(obj, "amount_received");
                text(obj, "id", ev->reference, sizeof(ev->reference));
                text(json_object_get(obj, "last_payment_error"), "code", ev->failure_code,
                     sizeof(ev->failure_code));
        } else if (starts(ev->type, "charge.")) {
                req->amount = integer(obj, "amount_refunded");
                id_of(obj, "payment_intent", ev->reference, sizeof(ev->reference));
        }
}

int wh_stripe_read(const uint8_t *body, size_t len, wh_stripe_event *ev,
                   Keelson__Billing__V1__ApplyProviderEventRequest *req)
{
        json_t *root = json_loadb((const char *)body, len, 0, NULL);
        int rc = -1;

        memset(ev, 0, sizeof(*ev));
        keelson__billing__v1__apply_provider_event_request__init(req);
        if (json_is_object(root) && json_is_integer(json_object_get(root, "created"))) {
                text(root, "id", ev->event_id, sizeof(ev->event_id));
                text(root, "type", ev->type, sizeof(ev->type));
                if (ev->event_id[0] != '\0' && ev->type[0] != '\0') {
                        req->created_unix_ms = integer(root, "created") * 1000;
                        const json_t *obj =
                            json_object_get(json_object_get(root, "data"), "object");
                        if (json_is_object(obj)) {
                                read_object(obj, ev, req);
                        }
                        rc = 0;
                }
        }
        json_decref(root);
        req->provider = "stripe";
        req->event_id = ev->event_id;
        req->type = ev->type;
        req->invoice_id = ev->invoice_id;
        req->subscription_id = ev->subscription_id;
        req->currency = ev->currency;
        req->payment_reference = ev->reference;
        req->failure_code = ev->failure_code;
        return rc;
}
