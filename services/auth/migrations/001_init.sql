-- keelson-auth, schema "auth": tenants, users, memberships and sessions.
--
-- Users are global (one login across tenants); everything a tenant owns
-- carries tenant_id, so that every tenant-scoped query can filter by it and
-- row-level security can be added without reshaping the tables.
-- Applied once under the migration lock; never edit it once applied: add a
-- new file instead.

CREATE TABLE auth.tenants (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- email is stored normalised (trimmed, ASCII lower-cased) by the service,
-- so the unique constraint is the lookup index and the duplicate guard.
CREATE TABLE auth.users (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    email          text        NOT NULL UNIQUE CHECK (octet_length(email) BETWEEN 3 AND 254),
    password_hash  text        NOT NULL CHECK (octet_length(password_hash) BETWEEN 1 AND 255),
    display_name   text        NOT NULL DEFAULT '' CHECK (char_length(display_name) <= 200),
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE auth.memberships (
    tenant_id   uuid        NOT NULL REFERENCES auth.tenants (id),
    user_id     uuid        NOT NULL REFERENCES auth.users (id),
    role        text        NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, user_id)
);

-- Login picks a user's oldest membership when no tenant is asked for.
CREATE INDEX memberships_user_created_idx ON auth.memberships (user_id, created_at);

-- Only the SHA-256 of a session token is stored. A session names its tenant;
-- it is not a foreign key to the membership on purpose: removing a member
-- must not need to delete their sessions first, and every read joins the
-- membership, so a removed member's sessions stop working at once.
CREATE TABLE auth.sessions (
    id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    token_sha256  bytea       NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    user_id       uuid        NOT NULL REFERENCES auth.users (id),
    tenant_id     uuid        NOT NULL REFERENCES auth.tenants (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz NULL,
    CHECK (expires_at > created_at)
);

CREATE INDEX sessions_user_idx ON auth.sessions (user_id);
