-- keelson-webhook 002: delivery of keelson's own events to tenants' URLs
-- (services/webhook/feed.c, deliver.c, subscriptions.c, deliveries.c).
-- Times are int8 Unix milliseconds.
--
-- The feed: the worker (keelson_webhook_worker) reads other services'
-- outboxes (billing's 003_feed.sql) through keelson_feed_reader, fans each
-- event out to the tenant's subscriptions of its topic (one deliveries row
-- each, the event's JSON once in events) and moves its cursor, all in one
-- transaction: an event becomes deliveries exactly once, and none is lost
-- while this service or the broker is down (the outbox keeps it).

DO $$
BEGIN
    BEGIN
        CREATE ROLE keelson_feed_reader NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

GRANT keelson_feed_reader TO keelson_webhook_worker;

-- ---- subscriptions ---------------------------------------------------------------

-- disabled_reason: '' while enabled; 'manual', 'gone' (410), 'failing'.
CREATE TABLE webhook.subscriptions (
    tenant_id         uuid    NOT NULL,
    id                uuid    NOT NULL DEFAULT gen_random_uuid(),
    url               text    NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    topics            text[]  NOT NULL CHECK (cardinality(topics) BETWEEN 1 AND 32),
    description       text    NOT NULL DEFAULT '',
    enabled           bool    NOT NULL DEFAULT true,
    disabled_reason   text    NOT NULL DEFAULT '',
    failing_since_ms  int8,
    created_ms        int8    NOT NULL,
    updated_ms        int8    NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX subscriptions_by_created
    ON webhook.subscriptions (tenant_id, created_ms DESC, id DESC);
-- The fan-out: a tenant's enabled subscriptions.
CREATE INDEX subscriptions_enabled ON webhook.subscriptions (tenant_id) WHERE enabled;

-- A secret signs while expires_ms is NULL or in the future; kept as made
-- (an HMAC key cannot be stored as a hash).
CREATE TABLE webhook.subscription_secrets (
    tenant_id        uuid  NOT NULL,
    id               uuid  NOT NULL DEFAULT gen_random_uuid(),
    subscription_id  uuid  NOT NULL,
    secret           text  NOT NULL CHECK (length(secret) BETWEEN 1 AND 256),
    created_ms       int8  NOT NULL,
    expires_ms       int8,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, subscription_id) REFERENCES webhook.subscriptions (tenant_id, id)
);

CREATE INDEX subscription_secrets_by_subscription
    ON webhook.subscription_secrets (tenant_id, subscription_id, created_ms DESC);

-- ---- events and deliveries -----------------------------------------------------------

-- An event with at least one delivery: its JSON, rendered once, so that
-- every attempt and every subscription gets the same bytes. id is the
-- event id of the outbox (the webhook-id header).
CREATE TABLE webhook.events (
    tenant_id   uuid  NOT NULL,
    id          uuid  NOT NULL,
    source      text  NOT NULL,
    topic       text  NOT NULL,
    body        text  NOT NULL,
    created_ms  int8  NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX events_by_age ON webhook.events (created_ms);

-- status: keelson.webhook.v1.DeliveryStatus (1 pending, 2 delivered,
-- 3 failed). attempts counts every attempt; tries those since the last
-- Redeliver (the retry schedule's position). A pending delivery is due at
-- next_attempt_ms; a worker that takes it moves next_attempt_ms past the
-- attempt's end (a lease): if the worker dies, the delivery is due again.
CREATE TABLE webhook.deliveries (
    tenant_id         uuid   NOT NULL,
    id                uuid   NOT NULL DEFAULT gen_random_uuid(),
    subscription_id   uuid   NOT NULL,
    event_id          uuid   NOT NULL,
    status            int2   NOT NULL DEFAULT 1 CHECK (status BETWEEN 1 AND 3),
    attempts          int4   NOT NULL DEFAULT 0,
    tries             int4   NOT NULL DEFAULT 0,
    next_attempt_ms   int8,
    created_ms        int8   NOT NULL,
    delivered_ms      int8,
    last_http_status  int4   NOT NULL DEFAULT 0,
    last_error        text   NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, subscription_id, event_id),
    FOREIGN KEY (tenant_id, subscription_id) REFERENCES webhook.subscriptions (tenant_id, id),
    FOREIGN KEY (tenant_id, event_id) REFERENCES webhook.events (tenant_id, id)
);

-- The worker's claim: a subscription's due deliveries, oldest due first.
CREATE INDEX deliveries_due ON webhook.deliveries (tenant_id, subscription_id, next_attempt_ms)
    WHERE status = 1;
-- ListDeliveries: newest first, of the tenant or of one subscription.
CREATE INDEX deliveries_by_time ON webhook.deliveries (tenant_id, created_ms DESC, id DESC);
CREATE INDEX deliveries_by_subscription
    ON webhook.deliveries (tenant_id, subscription_id, created_ms DESC, id DESC);
-- Retention (deliver.c): what is done, oldest first; and an event's deliveries.
CREATE INDEX deliveries_done_by_age ON webhook.deliveries (created_ms) WHERE status <> 1;
CREATE INDEX deliveries_by_event ON webhook.deliveries (tenant_id, event_id);

-- Every attempt, as the delivery log shows it. outcome: the sender's
-- (services/webhook/sender.h, wh_outcome_name).
CREATE TABLE webhook.delivery_attempts (
    tenant_id    uuid  NOT NULL,
    delivery_id  uuid  NOT NULL,
    n            int4  NOT NULL,
    at_ms        int8  NOT NULL,
    outcome      text  NOT NULL,
    http_status  int4  NOT NULL DEFAULT 0,
    latency_ms   int8  NOT NULL DEFAULT 0,
    excerpt      text  NOT NULL DEFAULT '',
    detail       text  NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, delivery_id, n),
    FOREIGN KEY (tenant_id, delivery_id) REFERENCES webhook.deliveries (tenant_id, id)
);

-- Where the fan-out stands in each source's outbox: every event at or
-- before (xid, id) has been fanned out.
CREATE TABLE webhook.feed_cursors (
    source      text  PRIMARY KEY,
    xid         xid8  NOT NULL,
    id          int8  NOT NULL,
    updated_ms  int8  NOT NULL
);

-- ---- row-level security ------------------------------------------------------

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['subscriptions', 'subscription_secrets', 'events', 'deliveries',
                             'delivery_attempts']
    LOOP
        EXECUTE format('ALTER TABLE webhook.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE webhook.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rt ON webhook.%I TO keelson_webhook_rt'
                       ' USING (tenant_id = webhook.ctx_tenant())'
                       ' WITH CHECK (tenant_id = webhook.ctx_tenant())', t);
        -- The worker fans out and delivers for every tenant.
        EXECUTE format('CREATE POLICY worker_all ON webhook.%I TO keelson_webhook_worker'
                       ' USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

-- ---- grants --------------------------------------------------------------------

GRANT SELECT, INSERT ON webhook.subscriptions TO keelson_webhook_rt;
GRANT UPDATE (url, topics, description, enabled, disabled_reason, failing_since_ms, updated_ms)
    ON webhook.subscriptions TO keelson_webhook_rt;
GRANT SELECT, INSERT ON webhook.subscription_secrets TO keelson_webhook_rt;
GRANT UPDATE (expires_ms) ON webhook.subscription_secrets TO keelson_webhook_rt;
GRANT SELECT ON webhook.events, webhook.delivery_attempts TO keelson_webhook_rt;
GRANT SELECT ON webhook.deliveries TO keelson_webhook_rt;
GRANT UPDATE (status, tries, next_attempt_ms) ON webhook.deliveries TO keelson_webhook_rt;

GRANT SELECT (tenant_id, id, url, topics, enabled, disabled_reason, failing_since_ms, created_ms,
              updated_ms),
      UPDATE (enabled, disabled_reason, failing_since_ms, updated_ms)
    ON webhook.subscriptions TO keelson_webhook_worker;
GRANT SELECT (tenant_id, subscription_id, secret, created_ms, expires_ms)
    ON webhook.subscription_secrets TO keelson_webhook_worker;
GRANT SELECT, INSERT, DELETE ON webhook.events TO keelson_webhook_worker;
GRANT SELECT, INSERT, DELETE ON webhook.deliveries TO keelson_webhook_worker;
GRANT UPDATE (status, attempts, tries, next_attempt_ms, delivered_ms, last_http_status,
              last_error) ON webhook.deliveries TO keelson_webhook_worker;
GRANT SELECT, INSERT, DELETE ON webhook.delivery_attempts TO keelson_webhook_worker;
GRANT SELECT, INSERT, UPDATE ON webhook.feed_cursors TO keelson_webhook_worker;
