/*
 * The events billing publishes, each queued in the outbox of the write it
 * reports (services/core/ks_outbox.h): published after commit, never on
 * rollback. Payloads are proto/keelson/billing/v1/events.proto; the admin
 * summary's invalidation is auth's users.admin_summary message.
 */
#include "billing.h"

#include <stdlib.h>

#include "keelson/auth/v1/events.pb-c.h"
#include "keelson/billing/v1/events.pb-c.h"
#include "ks_assert.h"
#include "ks_outbox.h"

/* The topics tenants may subscribe to (topics.def). */
enum {
#define KS_TOPIC(id, topic, desc) BL_TOPIC_##id,
#include "topics.def"
#undef KS_TOPIC
        BL_TOPIC_COUNT
};

static const struct {
        const char *name;
        const ProtobufCMessageDescriptor *desc;
} topics[BL_TOPIC_COUNT] = {
#define KS_TOPIC(id, topic, d) [BL_TOPIC_##id] = {topic, &d},
#include "topics.def"
#undef KS_TOPIC
};

/*
 * The event joins the transaction's batch (ks_outbox_batch): every event of
 * a transaction goes out as one insert, sent with COMMIT, without a NOTIFY
 * (billing's relay polls: ks_outbox.h says why).
 */
static int publish(bl_tx *tx, const char *topic, const ProtobufCMessage *m)
{
        size_t len = protobuf_c_message_get_packed_size(m);
        uint8_t *buf = malloc(len > 0 ? len : 1);
        int rc;

        if (buf == NULL) {
                return tx->call != NULL ? ks_call_oom(tx->call) : KS_RESOURCE_EXHAUSTED;
        }
        protobuf_c_message_pack(m, buf);
        if (!tx->events_begun) {
                /* No NOTIFY: billing's relays poll (ks_outbox.h says why; main.c the poll). */
                rc = ks_outbox_batch_begin(&tx->events, "billing", false);
                tx->events_begun = rc == KS_OK;
        }
        rc = tx->events_begun ? ks_outbox_batch_add(&tx->events, topic, tx->tenant_id, buf, len)
                              : KS_INTERNAL;
        free(buf);
        if (rc == KS_RESOURCE_EXHAUSTED) {
                return tx->call != NULL ? ks_call_oom(tx->call) : rc;
        }
        return rc == KS_OK ? KS_OK : bl_fail(tx, KS_INTERNAL, BL_INTERNAL_MSG);
}

/* One of topics.def, with the message it names. */
static int publish_topic(bl_tx *tx, int topic, const ProtobufCMessage *m)
{
        KS_ASSERT(topic >= 0 && topic < BL_TOPIC_COUNT && m->descriptor == topics[topic].desc);
        return publish(tx, topics[topic].name, m);
}

int bl_events_flush(bl_tx *tx)
{
        int rc;

        if (!tx->events_begun || tx->events.n_events == 0) {
                return KS_OK;
        }
        if ((rc = ks_outbox_batch_finish(&tx->events)) != KS_OK) {
                return tx->call != NULL ? ks_call_oom(tx->call) : rc;
        }
        rc = bl_defer(tx, tx->events.sql, tx->events.n_params, tx->events.params);
        bl_events_clear(tx);
        return rc;
}

void bl_events_clear(bl_tx *tx)
{
        if (tx->events_begun) {
                ks_outbox_batch_clear(&tx->events);
                tx->events_begun = false;
        }
}

int bl_event_invoice_finalized(bl_tx *tx, const bl_invoice *inv)
{
        Keelson__Billing__V1__InvoiceFinalized m = KEELSON__BILLING__V1__INVOICE_FINALIZED__INIT;

        m.tenant_id = (char *)tx->tenant_id;
        m.invoice_id = (char *)inv->id;
        m.number = (char *)inv->number;
        m.customer_id = (char *)inv->customer_id;
        m.subscription_id = (char *)inv->subscription_id;
        m.billing_reason = (char *)bl_reason_name(inv->reason);
        m.currency = (char *)inv->currency->code;
        m.total = inv->total;
        m.amount_due = inv->amount_due;
        m.finalized_at_unix_ms = inv->finalized_ms;
        return publish_topic(tx, BL_TOPIC_INVOICE_FINALIZED, &m.base);
}

int bl_event_invoice_paid(bl_tx *tx, const bl_invoice *inv)
{
        Keelson__Billing__V1__InvoicePaid m = KEELSON__BILLING__V1__INVOICE_PAID__INIT;

        m.tenant_id = (char *)tx->tenant_id;
        m.invoice_id = (char *)inv->id;
        m.number = (char *)inv->number;
        m.customer_id = (char *)inv->customer_id;
        m.subscription_id = (char *)inv->subscription_id;
        m.currency = (char *)inv->currency->code;
        m.amount_paid = inv->amount_paid;
        m.paid_at_unix_ms = inv->paid_ms;
        return publish_topic(tx, BL_TOPIC_INVOICE_PAID, &m.base);
}

int bl_event_subscription_changed(bl_tx *tx, const bl_subscription *s, int from_state,
                                  const char *event, int64_t at_ms, const char *invoice_id)
{
        Keelson__Billing__V1__SubscriptionChanged m =
            KEELSON__BILLING__V1__SUBSCRIPTION_CHANGED__INIT;

        m.tenant_id = (char *)tx->tenant_id;
        m.subscription_id = (char *)s->id;
        m.customer_id = (char *)s->customer_id;
        m.from_state = (char *)(from_state < 0 ? "" : bl_sub_state_name((bl_sub_state)from_state));
        m.to_state = (char *)bl_sub_state_name(s->state);
        m.event = (char *)event;
        m.plan_id = (char *)s->plan_id;
        m.quantity = s->quantity;
        m.at_unix_ms = at_ms;
        m.invoice_id = (char *)(invoice_id != NULL ? invoice_id : "");
        return publish_topic(tx, BL_TOPIC_SUBSCRIPTION_CHANGED, &m.base);
}

int bl_event_summary(bl_tx *tx, const char *reason)
{
        Keelson__Auth__V1__AdminSummaryChanged m = KEELSON__AUTH__V1__ADMIN_SUMMARY_CHANGED__INIT;
        int rc;

        if (tx->summary_published) {
                return KS_OK;
        }
        m.tenant_id = (char *)tx->tenant_id;
        m.reason = (char *)reason;
        if ((rc = publish(tx, "users.admin_summary", &m.base)) == KS_OK) {
                tx->summary_published = true;
        }
        return rc;
}

int bl_event_credit_note_created(bl_tx *tx, const bl_invoice *inv, const bl_credit_note *n)
{
        Keelson__Billing__V1__CreditNoteCreated m = KEELSON__BILLING__V1__CREDIT_NOTE_CREATED__INIT;

        m.tenant_id = (char *)tx->tenant_id;
        m.credit_note_id = (char *)n->id;
        m.number = (char *)n->number;
        m.invoice_id = (char *)inv->id;
        m.customer_id = (char *)inv->customer_id;
        m.currency = (char *)inv->currency->code;
        m.amount = n->amount;
        m.subtotal = n->subtotal;
        m.tax = n->tax;
        m.credited_to = (char *)n->credited_to;
        m.refund_payment_id = (char *)n->refund_payment_id;
        m.refund_reference = (char *)n->refund_reference;
        m.created_at_unix_ms = n->created_ms;
        return publish_topic(tx, BL_TOPIC_CREDIT_NOTE_CREATED, &m.base);
}
