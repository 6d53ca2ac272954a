-- keelson-webhook, schema "webhook": intake endpoints and their secrets, and
-- the events received through them, per tenant (services/webhook/webhook.h).
-- Times are int8 Unix milliseconds.
--
-- Roles, cluster-wide and NOLOGIN (created once, reused by every database
-- of the cluster; a deployment may create them beforehand):
--   keelson_webhook_rt      what every transaction acting for a tenant runs
--                           as (services/core/ks_pg_login.h): it owns no
--                           table, so the row-level security policies below
--                           bind it to the tenant its transaction names
--                           (keelson.tenant_id).
--   keelson_webhook_worker  what must look across tenants before it can act
--                           for one: the intake, which knows an endpoint's
--                           id and nothing else until it has read the
--                           endpoint (intake.c). It reads the columns that
--                           takes and nothing else; the event is then
--                           stored as keelson_webhook_rt, for the tenant.
-- The migration role must be able to create roles and grant membership
-- (CREATEROLE), or find both roles already there and be a member of both.

DO $$
BEGIN
    -- The exception, not IF NOT EXISTS alone: two databases of one cluster
    -- may run this file at the same moment, under different advisory locks.
    BEGIN
        CREATE ROLE keelson_webhook_rt NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        CREATE ROLE keelson_webhook_worker NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

GRANT keelson_webhook_rt TO CURRENT_USER;
GRANT keelson_webhook_worker TO CURRENT_USER;

-- The tenant a transaction acts for; NULL (no row matches) when unset.
CREATE FUNCTION webhook.ctx_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('keelson.tenant_id', true), '')::uuid $$;

CREATE FUNCTION webhook.now_ms() RETURNS int8
    LANGUAGE sql VOLATILE PARALLEL SAFE
    AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8 $$;

-- ---- intake endpoints ----------------------------------------------------------

-- provider: keelson.webhook.v1.Provider (1 stripe, 2 standard).
CREATE TABLE webhook.intake_endpoints (
    tenant_id    uuid  NOT NULL,
    id           uuid  NOT NULL DEFAULT gen_random_uuid(),
    provider     int2  NOT NULL CHECK (provider BETWEEN 1 AND 2),
    description  text  NOT NULL DEFAULT '',
    tolerance_s  int4  NOT NULL CHECK (tolerance_s BETWEEN 1 AND 3600),
    enabled      bool  NOT NULL DEFAULT true,
    created_ms   int8  NOT NULL,
    updated_ms   int8  NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- The intake knows the id alone (it is in the URL the provider calls).
CREATE UNIQUE INDEX intake_endpoints_by_id ON webhook.intake_endpoints (id);
-- ListIntakeEndpoints: newest first.
CREATE INDEX intake_endpoints_by_created
    ON webhook.intake_endpoints (tenant_id, created_ms DESC, id DESC);

-- A secret verifies while expires_ms is NULL or in the future. It is kept
-- as given: an HMAC key cannot be stored as a hash (docs/security.md).
CREATE TABLE webhook.intake_secrets (
    tenant_id    uuid  NOT NULL,
    id           uuid  NOT NULL DEFAULT gen_random_uuid(),
    endpoint_id  uuid  NOT NULL,
    secret       text  NOT NULL CHECK (length(secret) BETWEEN 1 AND 256),
    created_ms   int8  NOT NULL,
    expires_ms   int8,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook.intake_endpoints (tenant_id, id)
);

CREATE INDEX intake_secrets_by_endpoint
    ON webhook.intake_secrets (endpoint_id, created_ms DESC, id DESC);

-- ---- received events -----------------------------------------------------------

-- One row per (endpoint, provider's event id): the deduplication key, taken
-- in the transaction that stores the event, before the provider is answered.
-- status: keelson.webhook.v1.ReceivedStatus (1 pending, 2 applied,
-- 3 ignored, 4 failed). headers: the ones the signature covered, as sent.
CREATE TABLE webhook.received_events (
    tenant_id          uuid   NOT NULL,
    id                 uuid   NOT NULL DEFAULT gen_random_uuid(),
    endpoint_id        uuid   NOT NULL,
    provider           int2   NOT NULL CHECK (provider BETWEEN 1 AND 2),
    provider_event_id  text   NOT NULL CHECK (length(provider_event_id) BETWEEN 1 AND 255),
    type               text   NOT NULL DEFAULT '' CHECK (length(type) <= 255),
    body               bytea  NOT NULL,
    headers            jsonb  NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    signed_at_ms       int8   NOT NULL,
    received_ms        int8   NOT NULL,
    status             int2   NOT NULL CHECK (status BETWEEN 1 AND 4),
    attempts           int4   NOT NULL DEFAULT 0,
    next_attempt_ms    int8,
    last_error         text   NOT NULL DEFAULT '',
    applied_ms         int8,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, endpoint_id, provider_event_id),
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook.intake_endpoints (tenant_id, id)
);

-- ListReceivedEvents: newest first, of the tenant or of one endpoint.
CREATE INDEX received_by_time ON webhook.received_events (tenant_id, received_ms DESC, id DESC);
CREATE INDEX received_by_endpoint
    ON webhook.received_events (tenant_id, endpoint_id, received_ms DESC, id DESC);
-- What is still to apply, in the order it came.
CREATE INDEX received_pending ON webhook.received_events (next_attempt_ms) WHERE status = 1;

-- ---- row-level security ------------------------------------------------------

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['intake_endpoints', 'intake_secrets', 'received_events']
    LOOP
        EXECUTE format('ALTER TABLE webhook.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE webhook.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rt ON webhook.%I TO keelson_webhook_rt'
                       ' USING (tenant_id = webhook.ctx_tenant())'
                       ' WITH CHECK (tenant_id = webhook.ctx_tenant())', t);
    END LOOP;
END
$$;

-- The intake's look across tenants: an endpoint and its secrets by id.
CREATE POLICY worker_intake ON webhook.intake_endpoints FOR SELECT TO keelson_webhook_worker
    USING (true);
CREATE POLICY worker_intake ON webhook.intake_secrets FOR SELECT TO keelson_webhook_worker
    USING (true);
-- The applier's claim of pending events, and its verdicts (apply.c).
CREATE POLICY worker_apply_read ON webhook.received_events FOR SELECT TO keelson_webhook_worker
    USING (true);
CREATE POLICY worker_apply ON webhook.received_events FOR UPDATE TO keelson_webhook_worker
    USING (true) WITH CHECK (true);

-- ---- grants --------------------------------------------------------------------

GRANT USAGE ON SCHEMA webhook TO keelson_webhook_rt, keelson_webhook_worker;
GRANT EXECUTE ON FUNCTION webhook.ctx_tenant(), webhook.now_ms()
    TO keelson_webhook_rt, keelson_webhook_worker;

GRANT SELECT, INSERT ON webhook.intake_endpoints TO keelson_webhook_rt;
GRANT UPDATE (description, tolerance_s, enabled, updated_ms) ON webhook.intake_endpoints
    TO keelson_webhook_rt;
GRANT SELECT, INSERT ON webhook.intake_secrets TO keelson_webhook_rt;
GRANT UPDATE (expires_ms) ON webhook.intake_secrets TO keelson_webhook_rt;
GRANT SELECT, INSERT ON webhook.received_events TO keelson_webhook_rt;

GRANT SELECT (tenant_id, id, provider, tolerance_s, enabled) ON webhook.intake_endpoints
    TO keelson_webhook_worker;
GRANT SELECT (tenant_id, endpoint_id, secret, created_ms, expires_ms, id) ON webhook.intake_secrets
    TO keelson_webhook_worker;
GRANT SELECT (tenant_id, id, provider, provider_event_id, type, body, attempts, status,
              next_attempt_ms, received_ms),
      UPDATE (status, attempts, last_error, next_attempt_ms, applied_ms)
    ON webhook.received_events TO keelson_webhook_worker;
GRANT UPDATE (status, attempts, last_error, next_attempt_ms) ON webhook.received_events
    TO keelson_webhook_rt;
