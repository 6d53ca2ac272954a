-- keelson-billing 002: payment providers' events, as the webhook service
-- hands them over (ApplyProviderEvent, services/billing/provider_events.c).
--
-- provider_events: one row per provider event applied, taken first in the
-- transaction that applies it: a second application of the same event
-- waits for the first and then finds its row (exactly once). outcome:
-- applied, no_change, stale or ignored. object_key: 'invoice:<id>' or
-- 'subscription:<id>', the keelson object the event is about: an event
-- older than one applied to the same object is stale.
CREATE TABLE billing.provider_events (
    tenant_id   uuid  NOT NULL,
    provider    text  NOT NULL CHECK (provider ~ '^[a-z]{1,32}$'),
    event_id    text  NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    type        text  NOT NULL CHECK (length(type) BETWEEN 1 AND 255),
    object_key  text  NOT NULL DEFAULT '',
    created_ms  int8  NOT NULL,
    applied_ms  int8  NOT NULL,
    outcome     text  NOT NULL,
    detail      text  NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, provider, event_id)
);

CREATE INDEX provider_events_by_object
    ON billing.provider_events (tenant_id, object_key, created_ms DESC)
    WHERE outcome IN ('applied', 'no_change');

-- One succeeded payment per payment at the provider: Stripe tells of one
-- payment twice (invoice.paid and payment_intent.succeeded).
CREATE UNIQUE INDEX payments_provider_reference ON billing.payments (tenant_id, reference)
    WHERE method = 'provider' AND status = 1;

ALTER TABLE billing.provider_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE billing.provider_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rt ON billing.provider_events TO keelson_billing_rt
    USING (tenant_id = billing.ctx_tenant()) WITH CHECK (tenant_id = billing.ctx_tenant());

GRANT SELECT, INSERT ON billing.provider_events TO keelson_billing_rt;
GRANT UPDATE (object_key, outcome, detail) ON billing.provider_events TO keelson_billing_rt;
