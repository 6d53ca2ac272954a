-- keelson-auth, schema "auth": the admin summary's contract,
-- auth.tenant_summary(tenant uuid).
--
-- Why. Until now keelson-summary read auth's tables itself (through the
-- column grants and policies of 004_summary_reader.sql), so its SQL knew
-- auth's table shapes, down to the partial index of 006: an auth migration
-- could break the summary. From here on the summary calls one function that
-- auth owns, and auth keeps that function's columns and meaning whatever its
-- tables become. The columns are pinned by auth's own test
-- (tests/integration/test_auth_summary_contract.c) and documented in
-- docs/architecture.md ("Boundaries between services").
--
-- tenant_summary(tenant) returns one row, every column a bigint count:
--   active              members whose login is not locked
--   locked              members whose login is locked now
--   owners, admins, members, viewers   members by role
--   pending_invitations open invitations: not accepted, not revoked, not expired
--   active_api_keys     API keys neither revoked nor expired
--
-- Who sees what. The function runs as keelson_auth_summary (SECURITY
-- DEFINER), a NOLOGIN role that inherits the column grants and row-level
-- security policies that 004 gave keelson_summary_rt; keelson_summary_rt
-- keeps only EXECUTE on the function. The policies still bind every row to
-- the tenant the caller's transaction names with
-- set_config('keelson.tenant_id', ..., true) (auth.ctx_tenant()), and the
-- function also filters by its argument: asked about another tenant than
-- the one set, it counts nothing. search_path is fixed, so no object of the
-- caller's can stand in for auth's.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'keelson_auth_summary') THEN
        CREATE ROLE keelson_auth_summary NOLOGIN;
    END IF;
END
$$;

GRANT keelson_auth_summary TO CURRENT_USER;
GRANT USAGE ON SCHEMA auth TO keelson_auth_summary;
GRANT EXECUTE ON FUNCTION auth.ctx_tenant() TO keelson_auth_summary;

GRANT SELECT (tenant_id, user_id, role) ON auth.memberships TO keelson_auth_summary;
GRANT SELECT (id, locked_until) ON auth.users TO keelson_auth_summary;
GRANT SELECT (tenant_id, expires_at, accepted_at, revoked_at) ON auth.invitations
    TO keelson_auth_summary;
GRANT SELECT (tenant_id, expires_at, revoked_at) ON auth.api_keys TO keelson_auth_summary;

ALTER POLICY summary_rt ON auth.memberships TO keelson_auth_summary;
ALTER POLICY summary_rt ON auth.invitations TO keelson_auth_summary;
ALTER POLICY summary_rt ON auth.api_keys TO keelson_auth_summary;
ALTER POLICY summary_rt ON auth.users TO keelson_auth_summary;

REVOKE SELECT (tenant_id, user_id, role) ON auth.memberships FROM keelson_summary_rt;
REVOKE SELECT (id, locked_until) ON auth.users FROM keelson_summary_rt;
REVOKE SELECT (tenant_id, expires_at, accepted_at, revoked_at) ON auth.invitations
    FROM keelson_summary_rt;
REVOKE SELECT (tenant_id, expires_at, revoked_at) ON auth.api_keys FROM keelson_summary_rt;

-- Roles come from memberships alone. The locked members are read from the
-- other end: the users with a lock time in the future, through the partial
-- index of 006, each checked against the tenant's membership key (5 ms for
-- a tenant of 10,000 members, where joining every member's user row cost
-- 27 ms). PL/pgSQL rather than SQL: a SECURITY DEFINER SQL function is
-- planned again at every call (about 1 ms here), while PL/pgSQL keeps the
-- statement's plan for the connection's life.
CREATE FUNCTION auth.tenant_summary(tenant uuid)
RETURNS TABLE (active bigint, locked bigint, owners bigint, admins bigint, members bigint,
               viewers bigint, pending_invitations bigint, active_api_keys bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT m.members - l.locked, l.locked, m.owners, m.admins, m.members_role, m.viewers,
           i.pending, k.keys
      FROM (SELECT count(*) AS members,
                   count(*) FILTER (WHERE role = 'owner') AS owners,
                   count(*) FILTER (WHERE role = 'admin') AS admins,
                   count(*) FILTER (WHERE role = 'member') AS members_role,
                   count(*) FILTER (WHERE role = 'viewer') AS viewers
              FROM auth.memberships WHERE tenant_id = tenant) m,
           (SELECT count(*) AS locked FROM auth.users u
             WHERE u.locked_until > now()
               AND EXISTS (SELECT 1 FROM auth.memberships mm
                            WHERE mm.tenant_id = tenant AND mm.user_id = u.id)) l,
           (SELECT count(*) AS pending FROM auth.invitations
             WHERE tenant_id = tenant AND accepted_at IS NULL AND revoked_at IS NULL
               AND expires_at > now()) i,
           (SELECT count(*) AS keys FROM auth.api_keys
             WHERE tenant_id = tenant AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > now())) k;
END
$$;

-- The owner needs CREATE on the schema at the moment it takes the function
-- over, and never after.
GRANT CREATE ON SCHEMA auth TO keelson_auth_summary;
ALTER FUNCTION auth.tenant_summary(uuid) OWNER TO keelson_auth_summary;
REVOKE CREATE ON SCHEMA auth FROM keelson_auth_summary;

REVOKE ALL ON FUNCTION auth.tenant_summary(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION auth.tenant_summary(uuid) TO keelson_summary_rt;
