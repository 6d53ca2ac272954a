-- keelson-billing, schema "billing": the ledger relay's queue of postings
-- not yet in the ledger, a table of its own (services/billing/relay.c).
--
-- Before, the relay set posted_ms on each posting it sent. That took the
-- row out of the partial index of queued postings, so the update could not
-- be HOT: it wrote a new version of the row (its packed chain included)
-- into the table and every index, after the claim had already locked it.
-- Now a posting's id is in billing.postings_queue until the ledger holds its
-- chain (or refuses it for good: failed); the relay deletes the ids it
-- posted. As for the outbox (006), a statement trigger queues every posting
-- inserted, whoever inserts it: a replica of the release before this one,
-- still running during a rolling upgrade, queues its postings all the same.
--
-- posted_ms stays, unused by this release: a replica of the release before
-- it still claims by it, and so sends again postings this release has
-- already sent; the ledger answers exists and nothing doubles. The partial
-- index goes: no posting leaves it any more.

CREATE TABLE billing.postings_queue (
    id        int8 PRIMARY KEY,
    tenant_id uuid NOT NULL
);

-- The postings still queued, before row-level security (forced, it would
-- refuse the owner's insert: no policy is the owner's).
INSERT INTO billing.postings_queue (id, tenant_id)
SELECT id, tenant_id FROM billing.postings WHERE posted_ms IS NULL AND NOT failed;
DROP INDEX billing.postings_queued;

ALTER TABLE billing.postings_queue ENABLE ROW LEVEL SECURITY;
ALTER TABLE billing.postings_queue FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rt ON billing.postings_queue TO keelson_billing_rt
    USING (tenant_id = billing.ctx_tenant())
    WITH CHECK (tenant_id = billing.ctx_tenant());
-- The relay, across tenants: claim (SELECT ... FOR UPDATE, which PostgreSQL
-- lets only a role that may update), then delete. It never updates a row.
CREATE POLICY worker_claim ON billing.postings_queue FOR SELECT TO keelson_billing_worker
    USING (true);
CREATE POLICY worker_lock ON billing.postings_queue FOR UPDATE TO keelson_billing_worker
    USING (true) WITH CHECK (false);
CREATE POLICY worker_done ON billing.postings_queue FOR DELETE TO keelson_billing_worker
    USING (true);

-- Reconciliation reads its tenant's (a posting queued or not).
GRANT SELECT, INSERT ON billing.postings_queue TO keelson_billing_rt;
GRANT SELECT, UPDATE (id), DELETE ON billing.postings_queue TO keelson_billing_worker;

CREATE FUNCTION billing.postings_queue_add() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO billing.postings_queue (id, tenant_id) SELECT id, tenant_id FROM new_postings;
    RETURN NULL;
END
$$;

CREATE TRIGGER postings_queued AFTER INSERT ON billing.postings
    REFERENCING NEW TABLE AS new_postings
    FOR EACH STATEMENT EXECUTE FUNCTION billing.postings_queue_add();
