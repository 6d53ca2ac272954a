-- keelson-auth, schema "auth": tenant isolation in the database, and the
-- tables of invitations, password resets, API keys, the audit log, request
-- deduplication and the outbox.
--
-- Roles. Two NOLOGIN roles, cluster-wide (created once, reused by every
-- database of the cluster; a deployment may create them beforehand):
--   keelson_auth_rt      what the service's pool runs as (SET ROLE through the
--                        connection's startup options, see services/auth/db.c).
--                        Not the owner of any table, so row-level security
--                        applies to it; it holds only the grants below.
--   keelson_auth_lookup  owns the SECURITY DEFINER functions at the end of
--                        this file: the few steps that cannot know the tenant
--                        yet (a token or an email is all they have). It may
--                        read every row of the tables those steps read, and
--                        write only the columns they write.
-- The migration role (the owner of the tables) must be able to create roles
-- and grant membership (CREATEROLE), or find both roles already there and be
-- a member of keelson_auth_rt.
--
-- Row-level security is ENABLED and FORCED on every table of the schema but
-- the outbox and schema_migrations. A transaction of the service says whom it
-- acts for with set_config('keelson.tenant_id', ..., true) and
-- set_config('keelson.user_id', ..., true); policies compare rows with
-- auth.ctx_tenant() and auth.ctx_user(). Without a setting a policy matches
-- nothing: a query that forgets its WHERE tenant_id returns only the
-- tenant's rows, and one that forgets to set the tenant returns none.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'keelson_auth_rt') THEN
        CREATE ROLE keelson_auth_rt NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'keelson_auth_lookup') THEN
        CREATE ROLE keelson_auth_lookup NOLOGIN;
    END IF;
END
$$;

-- The pool's connections log in as the migration role and SET ROLE to the
-- runtime role: that needs membership. Membership in the lookup role is
-- granted only while this file gives it the functions, and taken back at
-- the end (a member would also match the lookup role's policies).
GRANT keelson_auth_rt TO CURRENT_USER;
GRANT keelson_auth_lookup TO CURRENT_USER;

-- An empty setting reads as '' once set in a session: NULLIF makes it NULL,
-- which no row matches.
CREATE FUNCTION auth.ctx_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('keelson.tenant_id', true), '')::uuid $$;

CREATE FUNCTION auth.ctx_user() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('keelson.user_id', true), '')::uuid $$;

-- ---- users: lockout and reset throttling -----------------------------------

-- failed_logins counts the failures since failed_since (the window start);
-- locked_until refuses every login until then. reset_* bound the reset mails
-- one address can cause per window.
ALTER TABLE auth.users
    ADD COLUMN failed_logins           int         NOT NULL DEFAULT 0 CHECK (failed_logins >= 0),
    ADD COLUMN failed_since            timestamptz NULL,
    ADD COLUMN locked_until            timestamptz NULL,
    ADD COLUMN reset_window_started_at timestamptz NULL,
    ADD COLUMN reset_requests          int         NOT NULL DEFAULT 0 CHECK (reset_requests >= 0);

CREATE INDEX sessions_tenant_user_idx ON auth.sessions (tenant_id, user_id);
CREATE INDEX memberships_tenant_created_idx ON auth.memberships (tenant_id, created_at, user_id);

-- ---- invitations -----------------------------------------------------------

-- At most one open invitation per address and tenant: inviting again
-- replaces it (the old token stops working). Only the token's SHA-256 is kept.
CREATE TABLE auth.invitations (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id             uuid        NOT NULL REFERENCES auth.tenants (id),
    email                 text        NOT NULL CHECK (octet_length(email) BETWEEN 3 AND 254),
    role                  text        NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    token_sha256          bytea       NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    invited_by_user_id    uuid        NULL,
    invited_by_api_key_id uuid        NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    expires_at            timestamptz NOT NULL,
    accepted_at           timestamptz NULL,
    accepted_user_id      uuid        NULL,
    revoked_at            timestamptz NULL,
    CHECK (expires_at > created_at)
);

CREATE UNIQUE INDEX invitations_open_idx ON auth.invitations (tenant_id, email)
    WHERE accepted_at IS NULL AND revoked_at IS NULL;
CREATE INDEX invitations_tenant_created_idx ON auth.invitations (tenant_id, created_at, id);

-- ---- password resets -------------------------------------------------------

-- Users are global, and so are their reset tokens: no tenant_id. Only the
-- lookup functions touch this table; the runtime role has no grant on it.
CREATE TABLE auth.password_resets (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       uuid        NOT NULL REFERENCES auth.users (id),
    token_sha256  bytea       NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    used_at       timestamptz NULL,
    CHECK (expires_at > created_at)
);

CREATE INDEX password_resets_user_idx ON auth.password_resets (user_id);

-- ---- API keys --------------------------------------------------------------

-- A key belongs to its tenant, not to the user who made it (who is kept for
-- the record). prefix is the key's first characters, shown in lists so a
-- person can tell keys apart; it is not enough to use one.
CREATE TABLE auth.api_keys (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id             uuid        NOT NULL REFERENCES auth.tenants (id),
    name                  text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    role                  text        NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    token_sha256          bytea       NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    prefix                text        NOT NULL CHECK (octet_length(prefix) BETWEEN 1 AND 32),
    created_by_user_id    uuid        NULL,
    created_by_api_key_id uuid        NULL,
    created_at            timestamptz NOT NULL DEFAULT now(),
    expires_at            timestamptz NULL,
    revoked_at            timestamptz NULL,
    last_used_at          timestamptz NULL,
    CHECK (expires_at IS NULL OR expires_at > created_at)
);

CREATE INDEX api_keys_tenant_created_idx ON auth.api_keys (tenant_id, created_at, id);

-- ---- audit log -------------------------------------------------------------

-- Append-only: the runtime role may INSERT and SELECT, never UPDATE or
-- DELETE. detail never holds a secret (the service puts names, roles and
-- emails there, never a token, key or password).
CREATE TABLE auth.audit_log (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id         uuid        NOT NULL REFERENCES auth.tenants (id),
    occurred_at       timestamptz NOT NULL DEFAULT now(),
    actor_user_id     uuid        NULL,
    actor_api_key_id  uuid        NULL,
    action            text        NOT NULL CHECK (octet_length(action) BETWEEN 1 AND 64),
    target_type       text        NOT NULL CHECK (octet_length(target_type) BETWEEN 1 AND 32),
    target_id         text        NOT NULL CHECK (octet_length(target_id) <= 64),
    detail            jsonb       NOT NULL DEFAULT '{}',
    request_id        text        NOT NULL CHECK (octet_length(request_id) <= 128)
);

CREATE INDEX audit_log_tenant_id_idx ON auth.audit_log (tenant_id, id DESC);

-- ---- request deduplication -------------------------------------------------

-- A tenant admin write records its request id, a fingerprint of the request
-- and its reply in its own transaction: the same request received again
-- (nng may deliver one twice; a client may retry with the same X-Request-Id)
-- gets the stored reply and changes nothing.
CREATE TABLE auth.requests (
    tenant_id    uuid        NOT NULL REFERENCES auth.tenants (id),
    request_id   text        NOT NULL CHECK (octet_length(request_id) BETWEEN 1 AND 128),
    method       text        NOT NULL CHECK (octet_length(method) BETWEEN 1 AND 128),
    fingerprint  bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    reply        bytea       NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id)
);

CREATE INDEX requests_created_idx ON auth.requests (created_at);

-- ---- outbox ----------------------------------------------------------------

-- The transactional outbox of services/core/ks_outbox.h. Not a tenant table:
-- a queue the relay (connected as the owner) drains for every tenant. The
-- runtime role may only append to it; it cannot read any event back, so RLS
-- has nothing to hide here.
CREATE TABLE auth.outbox (
    id           bigserial   PRIMARY KEY,
    event_id     uuid        NOT NULL UNIQUE,
    topic        text        NOT NULL,
    tenant_id    uuid,
    payload      bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);

CREATE INDEX outbox_unpublished_idx ON auth.outbox (id) WHERE published_at IS NULL;

-- ---- row-level security ----------------------------------------------------

ALTER TABLE auth.tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE auth.tenants FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_rt ON auth.tenants TO keelson_auth_rt
    USING (id = auth.ctx_tenant()) WITH CHECK (id = auth.ctx_tenant());

-- A user row is visible to its own user, and to the tenant it is a member
-- of (ListMembers shows emails); only its own user may write it.
ALTER TABLE auth.users ENABLE ROW LEVEL SECURITY;
ALTER TABLE auth.users FORCE ROW LEVEL SECURITY;
CREATE POLICY user_rt ON auth.users TO keelson_auth_rt
    USING (id = auth.ctx_user()
           OR EXISTS (SELECT 1 FROM auth.memberships m
                      WHERE m.user_id = users.id AND m.tenant_id = auth.ctx_tenant()))
    WITH CHECK (id = auth.ctx_user());

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['memberships', 'sessions', 'invitations', 'api_keys', 'audit_log',
                             'requests']
    LOOP
        EXECUTE format('ALTER TABLE auth.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE auth.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rt ON auth.%I TO keelson_auth_rt'
                       ' USING (tenant_id = auth.ctx_tenant())'
                       ' WITH CHECK (tenant_id = auth.ctx_tenant())', t);
    END LOOP;
    FOREACH t IN ARRAY ARRAY['tenants', 'users', 'memberships', 'sessions', 'invitations',
                             'api_keys', 'password_resets']
    LOOP
        EXECUTE format('CREATE POLICY lookup ON auth.%I TO keelson_auth_lookup'
                       ' USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;

ALTER TABLE auth.password_resets ENABLE ROW LEVEL SECURITY;
ALTER TABLE auth.password_resets FORCE ROW LEVEL SECURITY;

-- ---- grants ----------------------------------------------------------------

GRANT USAGE ON SCHEMA auth TO keelson_auth_rt, keelson_auth_lookup;

GRANT SELECT, INSERT ON auth.tenants TO keelson_auth_rt;
GRANT UPDATE (name) ON auth.tenants TO keelson_auth_rt;
GRANT SELECT, INSERT ON auth.users TO keelson_auth_rt;
GRANT UPDATE (password_hash, display_name, failed_logins, failed_since, locked_until)
    ON auth.users TO keelson_auth_rt;
GRANT SELECT, INSERT, DELETE ON auth.memberships TO keelson_auth_rt;
GRANT UPDATE (role) ON auth.memberships TO keelson_auth_rt;
GRANT SELECT, INSERT ON auth.sessions TO keelson_auth_rt;
GRANT UPDATE (revoked_at) ON auth.sessions TO keelson_auth_rt;
GRANT SELECT, INSERT ON auth.invitations TO keelson_auth_rt;
GRANT UPDATE (accepted_at, accepted_user_id, revoked_at) ON auth.invitations TO keelson_auth_rt;
GRANT SELECT, INSERT ON auth.api_keys TO keelson_auth_rt;
GRANT UPDATE (revoked_at) ON auth.api_keys TO keelson_auth_rt;
GRANT SELECT, INSERT ON auth.audit_log TO keelson_auth_rt;
GRANT SELECT, INSERT ON auth.requests TO keelson_auth_rt;
GRANT UPDATE (reply) ON auth.requests TO keelson_auth_rt;
GRANT INSERT ON auth.outbox TO keelson_auth_rt, keelson_auth_lookup;
GRANT USAGE ON SEQUENCE auth.outbox_id_seq TO keelson_auth_rt, keelson_auth_lookup;

GRANT SELECT ON auth.tenants, auth.users, auth.memberships, auth.sessions, auth.invitations,
    auth.api_keys, auth.password_resets TO keelson_auth_lookup;
GRANT UPDATE (failed_logins, failed_since, locked_until, reset_window_started_at, reset_requests)
    ON auth.users TO keelson_auth_lookup;
GRANT UPDATE (revoked_at) ON auth.sessions TO keelson_auth_lookup;
GRANT UPDATE (last_used_at) ON auth.api_keys TO keelson_auth_lookup;
GRANT INSERT ON auth.password_resets TO keelson_auth_lookup;
GRANT UPDATE (used_at) ON auth.password_resets TO keelson_auth_lookup;
-- The functions below are created by the migration role and handed over.
GRANT CREATE ON SCHEMA auth TO keelson_auth_lookup;

-- ---- lookups that cannot know the tenant yet --------------------------------
--
-- Each runs as keelson_auth_lookup, pins its search_path, qualifies every
-- name, and returns only what its one step needs. EXECUTE is revoked from
-- PUBLIC and granted to the runtime role alone.

-- ResolveContext, session tokens: the token is all there is; this is where
-- the tenant is learnt. The membership join makes a removed member's
-- sessions stop at once.
CREATE FUNCTION auth.resolve_session(p_token_sha256 bytea)
    RETURNS TABLE (session_id uuid, user_id uuid, tenant_id uuid, role text,
                   expires_at_ms bigint)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    SELECT s.id, s.user_id, s.tenant_id, m.role,
           floor(extract(epoch FROM s.expires_at) * 1000)::int8
      FROM auth.sessions s
      JOIN auth.memberships m ON m.tenant_id = s.tenant_id AND m.user_id = s.user_id
     WHERE s.token_sha256 = p_token_sha256 AND s.revoked_at IS NULL AND s.expires_at > now()
$$;

-- ResolveContext, API keys. last_used_at is written at most once a minute
-- per key, so a busy key costs no write per request.
CREATE FUNCTION auth.resolve_api_key(p_token_sha256 bytea)
    RETURNS TABLE (api_key_id uuid, tenant_id uuid, role text, expires_at_ms bigint)
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    WITH k AS (
        SELECT a.id, a.tenant_id, a.role, a.expires_at, a.last_used_at
          FROM auth.api_keys a
         WHERE a.token_sha256 = p_token_sha256 AND a.revoked_at IS NULL
           AND (a.expires_at IS NULL OR a.expires_at > now())
    ), touched AS (
        UPDATE auth.api_keys a SET last_used_at = now()
          FROM k
         WHERE a.id = k.id
           AND (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute')
    )
    SELECT k.id, k.tenant_id, k.role,
           coalesce(floor(extract(epoch FROM k.expires_at) * 1000)::int8, 0)
      FROM k
$$;

-- Login by email: the user, the stored hash (verified by the service, never
-- compared here) and whether a lockout is running.
CREATE FUNCTION auth.login_lookup(p_email text)
    RETURNS TABLE (user_id uuid, password_hash text, locked boolean)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    SELECT u.id, u.password_hash, coalesce(u.locked_until > now(), false)
      FROM auth.users u
     WHERE u.email = p_email
$$;

-- A failed password check. Counts failures in a window that starts at the
-- first one; the p_max-th locks the account for p_lock_s seconds and starts
-- the count again. Failures while locked are not counted: they must not
-- stretch the lock. Returns true when this failure locked the account.
CREATE FUNCTION auth.login_failed(p_user_id uuid, p_max int, p_window_s int, p_lock_s int)
    RETURNS boolean
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    n     int;
    since timestamptz;
BEGIN
    SELECT u.failed_logins, u.failed_since INTO n, since
      FROM auth.users u
     WHERE u.id = p_user_id AND (u.locked_until IS NULL OR u.locked_until <= now())
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF since IS NULL OR since <= now() - make_interval(secs => p_window_s) THEN
        n := 0;
        since := now();
    END IF;
    n := n + 1;
    IF n >= p_max THEN
        UPDATE auth.users
           SET failed_logins = 0, failed_since = NULL,
               locked_until = now() + make_interval(secs => p_lock_s)
         WHERE id = p_user_id;
        RETURN true;
    END IF;
    UPDATE auth.users SET failed_logins = n, failed_since = since WHERE id = p_user_id;
    RETURN false;
END
$$;

-- A successful password check resets the count (no write when it is zero).
CREATE FUNCTION auth.login_succeeded(p_user_id uuid)
    RETURNS void
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    UPDATE auth.users SET failed_logins = 0, failed_since = NULL
     WHERE id = p_user_id AND (failed_logins > 0 OR failed_since IS NOT NULL)
$$;

-- The tenants a user belongs to, oldest membership first: Login's default
-- tenant and ListTenants. A user's memberships span tenants by nature.
CREATE FUNCTION auth.user_tenants(p_user_id uuid)
    RETURNS TABLE (tenant_id uuid, tenant_name text, role text, joined_at_ms bigint)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    SELECT m.tenant_id, t.name, m.role, floor(extract(epoch FROM m.created_at) * 1000)::int8
      FROM auth.memberships m
      JOIN auth.tenants t ON t.id = m.tenant_id
     WHERE m.user_id = p_user_id
     ORDER BY m.created_at, m.tenant_id
     LIMIT 1000
$$;

-- AcceptInvitation: an open invitation by its token, with its tenant's name.
CREATE FUNCTION auth.invitation_lookup(p_token_sha256 bytea)
    RETURNS TABLE (invitation_id uuid, tenant_id uuid, email text, role text)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    SELECT i.id, i.tenant_id, i.email, i.role
      FROM auth.invitations i
     WHERE i.token_sha256 = p_token_sha256 AND i.accepted_at IS NULL
       AND i.revoked_at IS NULL AND i.expires_at > now()
$$;

-- ForgotPassword, in one statement that behaves alike for every address:
-- the service cannot tell, and so cannot leak, whether the address has an
-- account. For an account (within p_max requests per p_window_s) it stores
-- the token's hash and queues the mail (p_payload, an EmailRequested built
-- by the service) in the outbox, in the same transaction. Commits of this
-- transaction do not wait for the WAL flush, so that a write and no write
-- answer in the same time; a crash may lose the request, which the user
-- repeats.
CREATE FUNCTION auth.request_password_reset(p_email text, p_token_sha256 bytea,
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
    INSERT INTO auth.outbox (event_id, topic, tenant_id, payload)
         VALUES (p_event_id, 'auth.email', NULL, p_payload);
    PERFORM pg_notify('auth_outbox', '');
END
$$;

-- ResetPassword, before the new password is hashed: is the token worth it?
CREATE FUNCTION auth.password_reset_valid(p_token_sha256 bytea)
    RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    SELECT EXISTS (SELECT 1 FROM auth.password_resets r
                    WHERE r.token_sha256 = p_token_sha256 AND r.used_at IS NULL
                      AND r.expires_at > now())
$$;

-- ResetPassword: claims the token atomically (a second use finds it used),
-- closes the user's other open tokens, clears the lockout, and returns the
-- user; NULL when the token is unknown, used or expired.
CREATE FUNCTION auth.claim_password_reset(p_token_sha256 bytea)
    RETURNS uuid
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
DECLARE
    uid uuid;
BEGIN
    UPDATE auth.password_resets r SET used_at = now()
     WHERE r.token_sha256 = p_token_sha256 AND r.used_at IS NULL AND r.expires_at > now()
    RETURNING r.user_id INTO uid;
    IF uid IS NULL THEN
        RETURN NULL;
    END IF;
    UPDATE auth.password_resets SET used_at = now() WHERE user_id = uid AND used_at IS NULL;
    UPDATE auth.users SET failed_logins = 0, failed_since = NULL, locked_until = NULL
     WHERE id = uid;
    RETURN uid;
END
$$;

-- Revokes a user's sessions in every tenant (but p_keep_session_id, when
-- set) and returns their token hashes for auth.context_revoked. A user's
-- sessions span tenants: the user, not a tenant, is the scope here.
CREATE FUNCTION auth.revoke_user_sessions(p_user_id uuid, p_keep_session_id uuid)
    RETURNS SETOF bytea
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    AS $$
    UPDATE auth.sessions s SET revoked_at = now()
     WHERE s.user_id = p_user_id AND s.revoked_at IS NULL AND s.expires_at > now()
       AND (p_keep_session_id IS NULL OR s.id <> p_keep_session_id)
    RETURNING s.token_sha256
$$;

DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'auth.resolve_session(bytea)', 'auth.resolve_api_key(bytea)', 'auth.login_lookup(text)',
        'auth.login_failed(uuid, int, int, int)', 'auth.login_succeeded(uuid)',
        'auth.user_tenants(uuid)', 'auth.invitation_lookup(bytea)',
        'auth.request_password_reset(text, bytea, bigint, uuid, bytea, int, int)',
        'auth.password_reset_valid(bytea)', 'auth.claim_password_reset(bytea)',
        'auth.revoke_user_sessions(uuid, uuid)']
    LOOP
        EXECUTE format('ALTER FUNCTION %s OWNER TO keelson_auth_lookup', f);
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO keelson_auth_rt', f);
    END LOOP;
END
$$;

REVOKE CREATE ON SCHEMA auth FROM keelson_auth_lookup;
REVOKE keelson_auth_lookup FROM CURRENT_USER;
