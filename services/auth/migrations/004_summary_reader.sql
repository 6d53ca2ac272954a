-- keelson-auth, schema "auth": the read-only door of the admin-summary
-- service (keelson-summary).
--
-- Why here. The summary service owns no tables: it counts auth's users,
-- memberships, invitations and API keys for one tenant. A service never
-- touches another service's tables on its own terms, so auth, the owner,
-- decides exactly what may be read and how: this migration is auth's, and
-- keelson-summary only uses what it grants.
--
-- What. A NOLOGIN role keelson_summary_rt (cluster-wide, like the roles of
-- 002_tenancy.sql; a deployment may create it beforehand) with SELECT on
-- exactly the columns the counts need, and row-level security policies that
-- bind it to the tenant its transaction names with
-- set_config('keelson.tenant_id', ..., true), the same setting auth's own
-- runtime role uses (auth.ctx_tenant()). The tables already FORCE row-level
-- security, so without a setting the role reads nothing, and with one it
-- reads that tenant's rows only. No write of any kind is granted.
--
-- The summary pool logs in as the migration role and SETs this role through
-- the connection's startup options: the migration role must be a member.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'keelson_summary_rt') THEN
        CREATE ROLE keelson_summary_rt NOLOGIN;
    END IF;
END
$$;

GRANT keelson_summary_rt TO CURRENT_USER;
GRANT USAGE ON SCHEMA auth TO keelson_summary_rt;
GRANT EXECUTE ON FUNCTION auth.ctx_tenant() TO keelson_summary_rt;

-- Only the columns the counts read: no email, no hash, no token digest.
GRANT SELECT (tenant_id, user_id, role) ON auth.memberships TO keelson_summary_rt;
GRANT SELECT (id, locked_until) ON auth.users TO keelson_summary_rt;
GRANT SELECT (tenant_id, expires_at, accepted_at, revoked_at) ON auth.invitations
    TO keelson_summary_rt;
GRANT SELECT (tenant_id, expires_at, revoked_at) ON auth.api_keys TO keelson_summary_rt;

CREATE POLICY summary_rt ON auth.memberships FOR SELECT TO keelson_summary_rt
    USING (tenant_id = auth.ctx_tenant());
CREATE POLICY summary_rt ON auth.invitations FOR SELECT TO keelson_summary_rt
    USING (tenant_id = auth.ctx_tenant());
CREATE POLICY summary_rt ON auth.api_keys FOR SELECT TO keelson_summary_rt
    USING (tenant_id = auth.ctx_tenant());
-- A user row is visible while the user is a member of the tenant.
CREATE POLICY summary_rt ON auth.users FOR SELECT TO keelson_summary_rt
    USING (EXISTS (SELECT 1 FROM auth.memberships m
                    WHERE m.user_id = users.id AND m.tenant_id = auth.ctx_tenant()));
