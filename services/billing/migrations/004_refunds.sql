-- keelson-billing 004: refunds. A credit note on a paid invoice may pay
-- its amount back through the card payment the invoice was paid with
-- (CreateCreditNote with refund: services/billing/credit_notes.c) instead
-- of keeping it as the customer's credit.
--
-- payments.amount_refunded: what refunds have paid back of a card payment
-- (never more than it). credit_notes: credited_to 'refund' names the
-- payment refunded and the provider's id of the refund; the note's chain
-- then moves its amount on from the customer's credit to cash (transfer
-- 123, services/billing/postings.c).
ALTER TABLE billing.payments
    ADD COLUMN amount_refunded int8 NOT NULL DEFAULT 0,
    ADD CONSTRAINT payments_refunded_check CHECK (amount_refunded BETWEEN 0 AND amount);

ALTER TABLE billing.credit_notes
    ADD COLUMN refund_payment_id uuid,
    ADD COLUMN refund_reference text NOT NULL DEFAULT '',
    ADD CONSTRAINT credit_notes_refund_check
        CHECK ((credited_to = 'refund') = (refund_payment_id IS NOT NULL));

GRANT UPDATE (amount_refunded) ON billing.payments TO keelson_billing_rt;
