-- keelson-billing, schema "billing": an event is queued by a trigger on the
-- outbox, whoever inserts it (services/core/ks_outbox.h).
--
-- 005_outbox_queue.sql had each writer insert the event's id into
-- billing.outbox_queue itself. A replica of the release before it, still
-- running while a new one migrates (a rolling upgrade), inserts events
-- without queuing them, and nothing would ever publish those. Now a
-- statement trigger queues every row inserted into the outbox, from any
-- writer; the writers only insert the event. ON CONFLICT DO NOTHING keeps a
-- writer that still queues its own ids (a hand-written insert) working.
--
-- The function runs as the role that inserts (it is not SECURITY DEFINER):
-- keelson_billing_rt already holds INSERT on the queue (005).

CREATE FUNCTION billing.outbox_queue_add() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO billing.outbox_queue (id) SELECT id FROM new_events ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_queued AFTER INSERT ON billing.outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION billing.outbox_queue_add();
