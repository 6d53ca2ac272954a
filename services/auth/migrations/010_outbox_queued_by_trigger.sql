-- keelson-auth, schema "auth": an event is queued by a trigger on the
-- outbox, whoever inserts it (services/core/ks_outbox.h).
--
-- 009_outbox_queue.sql had each writer insert the event's id into
-- auth.outbox_queue itself. A replica of the release before it, still
-- running while a new one migrates (a rolling upgrade), inserts events
-- without queuing them, and nothing would ever publish those. Now a
-- statement trigger queues every row inserted into the outbox, from any
-- writer; the writers only insert the event. ON CONFLICT DO NOTHING keeps a
-- writer that still queues its own ids (auth.request_password_reset of
-- 009, a hand-written insert) working.
--
-- The function runs as the role that inserts (it is not SECURITY DEFINER):
-- keelson_auth_rt and keelson_auth_lookup already hold INSERT on the queue (009).

CREATE FUNCTION auth.outbox_queue_add() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO auth.outbox_queue (id) SELECT id FROM new_events ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_queued AFTER INSERT ON auth.outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION auth.outbox_queue_add();
