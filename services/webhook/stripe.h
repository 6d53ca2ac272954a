/*
 * stripe.c: what billing needs of a Stripe event (ApplyProviderEvent), read
 * from its JSON body. Pure: no I/O, no clock.
 *
 * keelson's ids travel in the Stripe object's metadata, as an integration
 * puts them there when it creates the object: keelson_invoice_id (on an
 * invoice, a payment intent or a charge) and keelson_subscription_id (on a
 * subscription). One payment is one reference for both of its events: the
 * payment intent's id, which invoice.paid names in "payment_intent" (a
 * string, or the object when expanded).
 */
#ifndef WH_STRIPE_H
#define WH_STRIPE_H

#include <stddef.h>
#include <stdint.h>

#include "keelson/billing/v1/billing.pb-c.h"

#define WH_STRIPE_TEXT_MAX 255

/* The storage the request's strings point into. */
typedef struct wh_stripe_event {
        char event_id[WH_STRIPE_TEXT_MAX + 1];
        char type[WH_STRIPE_TEXT_MAX + 1];
        char invoice_id[64];
        char subscription_id[64];
        char currency[8];
        char reference[WH_STRIPE_TEXT_MAX + 1];
        char failure_code[64];
} wh_stripe_event;

/*
 * Reads body (len bytes) into *req, whose strings point into *ev. Returns
 * 0; -1 when the body is not a JSON object with a string "id" and "type"
 * and an integer "created". Fields the event does not have stay "" or 0;
 * a value too long for its field is left out ("").
 */
int wh_stripe_read(const uint8_t *body, size_t len, wh_stripe_event *ev,
                   Keelson__Billing__V1__ApplyProviderEventRequest *req);

#endif
