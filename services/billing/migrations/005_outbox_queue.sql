-- keelson-billing, schema "billing": the outbox's unpublished events in a
-- queue of their own (services/core/ks_outbox.h).
--
-- Each event's id goes into billing.outbox_queue in the statement that
-- writes the event; the relay publishes the queued events and deletes their
-- ids. Before, it set published_at on each event row, which wrote a new
-- version of the row into every index of the outbox (the row left the
-- partial index of unpublished ids). The webhook service's feed reads the
-- outbox by (xid, id) and never looked at published_at. Events not yet
-- published when this runs stay queued. A replica of an older version still
-- running fails its relay's statements (published_at is gone) rather than
-- publishing every event again; it publishes nothing until it is replaced.

CREATE TABLE billing.outbox_queue (id int8 PRIMARY KEY);
INSERT INTO billing.outbox_queue (id) SELECT id FROM billing.outbox WHERE published_at IS NULL;
DROP INDEX billing.outbox_unpublished;
ALTER TABLE billing.outbox DROP COLUMN published_at;
GRANT INSERT ON billing.outbox_queue TO keelson_billing_rt;
