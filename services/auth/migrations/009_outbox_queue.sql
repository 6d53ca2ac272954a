-- keelson-auth, schema "auth": the outbox's unpublished events in a queue of
-- their own (services/core/ks_outbox.h).
--
-- Each event's id goes into auth.outbox_queue in the statement that writes
-- the event; the relay publishes the queued events and deletes their ids.
-- Before, it set published_at on each event row, which wrote a new version
-- of the row into every index (the row left the partial index of unpublished
-- ids). Events not yet published when this runs stay queued. A replica of an
-- older version still running fails its relay's statements (published_at is
-- gone) rather than publishing every event again; it publishes nothing until
-- it is replaced.

CREATE TABLE auth.outbox_queue (id int8 PRIMARY KEY);
INSERT INTO auth.outbox_queue (id) SELECT id FROM auth.outbox WHERE published_at IS NULL;
DROP INDEX auth.outbox_unpublished_idx;
ALTER TABLE auth.outbox DROP COLUMN published_at;
GRANT INSERT ON auth.outbox_queue TO keelson_auth_rt, keelson_auth_lookup;

-- ForgotPassword's function queues its mail the same way (its body is
-- 002_tenancy.sql's but for the queue).
GRANT keelson_auth_lookup TO CURRENT_USER;
GRANT CREATE ON SCHEMA auth TO keelson_auth_lookup;
CREATE OR REPLACE FUNCTION auth.request_password_reset(p_email text, p_token_sha256 bytea,
                                            p_expires_at_ms bigint, p_event_id uuid,
                                            p_payload bytea, p_max int, p_window_s int)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    uid uuid;
    ws  timestamptz;
    n   int;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT u.id, u.reset_window_started_at, u.reset_requests INTO uid, ws, n
      FROM auth.users u WHERE u.email = p_email FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF ws IS NULL OR ws <= now() - make_interval(secs => p_window_s) THEN
        ws := now();
        n := 0;
    END IF;
    IF n >= p_max THEN
        RETURN;
    END IF;
    UPDATE auth.users SET reset_window_started_at = ws, reset_requests = n + 1 WHERE id = uid;
    INSERT INTO auth.password_resets (user_id, token_sha256, expires_at)
         VALUES (uid, p_token_sha256, to_timestamp(p_expires_at_ms / 1000.0));
    WITH v AS (SELECT nextval('auth.outbox_id_seq') AS id),
         ins AS (INSERT INTO auth.outbox (id, event_id, topic, tenant_id, payload)
                 SELECT id, p_event_id, 'auth.email', NULL, p_payload FROM v)
    INSERT INTO auth.outbox_queue (id) SELECT id FROM v;
    PERFORM pg_notify('auth_outbox', '');
END
$$;

REVOKE CREATE ON SCHEMA auth FROM keelson_auth_lookup;
REVOKE keelson_auth_lookup FROM CURRENT_USER;
