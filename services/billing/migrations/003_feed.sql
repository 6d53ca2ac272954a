-- keelson-billing 003: the outbox as a durable feed for keelson-webhook,
-- which delivers billing's events to tenants' URLs (services/webhook/feed.c).
--
-- xid is the transaction that wrote the event. A reader that has taken
-- every row with xid below the oldest transaction still running (the xmin
-- of its snapshot) will never see another such row appear: a transaction
-- that commits later has a larger xid. So a reader pages by (xid, id) and
-- stops at that bound, and loses no event to commit order, which the
-- bigserial id alone would (a smaller id can commit after a larger one).
ALTER TABLE billing.outbox ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX outbox_feed ON billing.outbox (xid, id);

-- Whoever consumes the feed (the webhook service's worker role is made a
-- member by the webhook service's own migration). Cluster-wide, NOLOGIN.
DO $$
BEGIN
    BEGIN
        CREATE ROLE keelson_feed_reader NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

GRANT USAGE ON SCHEMA billing TO keelson_feed_reader;
GRANT SELECT (id, xid, event_id, topic, tenant_id, payload, created_at) ON billing.outbox
    TO keelson_feed_reader;
