-- keelson-auth, schema "auth": deleting what nobody can use any more.
--
-- Expired and revoked sessions, used and expired reset tokens, and request
-- records past the deduplication horizon would otherwise grow without end.
-- One function, run by every replica every KEELSON_AUTH_HOUSEKEEPING_S
-- (replicas may overlap: deleting is idempotent). It spans tenants, so it is
-- a SECURITY DEFINER function of the lookup role (see 002_tenancy.sql), with
-- DELETE granted on exactly these tables. Each call deletes at most p_batch
-- rows per table, so its transactions and locks stay short; it returns how
-- many rows it deleted, and the service calls again while that is p_batch.
-- Invitations and the audit log are kept: they are the tenant's record.

GRANT keelson_auth_lookup TO CURRENT_USER;
GRANT CREATE ON SCHEMA auth TO keelson_auth_lookup;
GRANT DELETE ON auth.sessions, auth.password_resets, auth.requests TO keelson_auth_lookup;
GRANT SELECT ON auth.requests TO keelson_auth_lookup;
CREATE POLICY lookup ON auth.requests TO keelson_auth_lookup USING (true) WITH CHECK (true);

CREATE FUNCTION auth.housekeeping(p_session_keep_s int, p_request_keep_s int, p_batch int)
    RETURNS int
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    n     int;
    total int := 0;
BEGIN
    DELETE FROM auth.sessions WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM auth.sessions
         WHERE coalesce(revoked_at, expires_at) < now() - make_interval(secs => p_session_keep_s)
         LIMIT p_batch));
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM auth.password_resets WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM auth.password_resets
         WHERE expires_at < now() - make_interval(secs => p_session_keep_s)
         LIMIT p_batch));
    GET DIAGNOSTICS n = ROW_COUNT;
    total := total + n;
    DELETE FROM auth.requests WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM auth.requests
         WHERE created_at < now() - make_interval(secs => p_request_keep_s)
         LIMIT p_batch));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN total + n;
END
$$;

ALTER FUNCTION auth.housekeeping(int, int, int) OWNER TO keelson_auth_lookup;
REVOKE ALL ON FUNCTION auth.housekeeping(int, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION auth.housekeeping(int, int, int) TO keelson_auth_rt;

CREATE INDEX sessions_expires_idx ON auth.sessions (expires_at);

REVOKE CREATE ON SCHEMA auth FROM keelson_auth_lookup;
REVOKE keelson_auth_lookup FROM CURRENT_USER;
