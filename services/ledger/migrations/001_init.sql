-- keelson-ledger, schema "ledger": accounts, transfers and their state, per
-- tenant, with TigerBeetle's contract (services/ledger/ledger.h).
--
-- Storage forms. 128-bit ids and user_data_128 are uuid: 16 bytes, compared
-- as unsigned big-endian numbers, so ORDER BY id is numeric order. Amounts
-- and balances are numeric(39,0) (TigerBeetle's u128). user_data_64 is the
-- int8 with the same 64 bits; other unsigned 32-bit fields are int8.
-- Timestamps are int8 nanoseconds since the Unix epoch, assigned per tenant
-- from ledger.clocks: unique and strictly increasing across accounts,
-- transfers and expiries.
--
-- No foreign keys between these tables: the service reads and locks every
-- row a batch refers to before it writes, and a foreign key would add a
-- lookup and a KEY SHARE lock per row to the hot path.
--
-- Roles, cluster-wide and NOLOGIN (created once, reused by every database
-- of the cluster; a deployment may create them beforehand):
--   keelson_ledger_rt       what every transaction of the service runs as
--                           (SET LOCAL ROLE, services/ledger/db.c): not the
--                           owner of any table, so row-level security
--                           applies; it holds only the grants below.
--   keelson_ledger_sweeper  the expiry sweeper's first step, which must find
--                           the tenants that have pending transfers due
--                           before it can act for one: it may read three
--                           columns of ledger.pending_transfers, nothing else.
-- The migration role must be able to create roles and grant membership
-- (CREATEROLE), or find both roles already there and be a member of both.

DO $$
BEGIN
    -- The exception, not IF NOT EXISTS alone: two databases of one cluster
    -- may run this file at the same moment, under different advisory locks.
    BEGIN
        CREATE ROLE keelson_ledger_rt NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        CREATE ROLE keelson_ledger_sweeper NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

GRANT keelson_ledger_rt TO CURRENT_USER;
GRANT keelson_ledger_sweeper TO CURRENT_USER;

-- The tenant a transaction acts for. An empty setting reads as '' once set
-- in a session: NULLIF makes it NULL, which no row matches.
CREATE FUNCTION ledger.ctx_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('keelson.tenant_id', true), '')::uuid $$;

-- One row per tenant: the last timestamp handed out. Every writer of a
-- tenant locks it first (INSERT .. ON CONFLICT DO UPDATE), which makes the
-- tenant's timestamps follow commit order and orders every lock after it.
CREATE TABLE ledger.clocks (
    tenant_id  uuid PRIMARY KEY,
    last_ns    int8 NOT NULL CHECK (last_ns > 0)
);

CREATE TABLE ledger.accounts (
    tenant_id        uuid          NOT NULL,
    id               uuid          NOT NULL,
    debits_pending   numeric(39,0) NOT NULL DEFAULT 0 CHECK (debits_pending >= 0),
    debits_posted    numeric(39,0) NOT NULL DEFAULT 0 CHECK (debits_posted >= 0),
    credits_pending  numeric(39,0) NOT NULL DEFAULT 0 CHECK (credits_pending >= 0),
    credits_posted   numeric(39,0) NOT NULL DEFAULT 0 CHECK (credits_posted >= 0),
    user_data_128    uuid          NOT NULL,
    user_data_64     int8          NOT NULL,
    user_data_32     int8          NOT NULL,
    ledger           int8          NOT NULL CHECK (ledger > 0),
    code             int4          NOT NULL CHECK (code BETWEEN 1 AND 65535),
    flags            int4          NOT NULL,
    timestamp        int8          NOT NULL,
    PRIMARY KEY (tenant_id, id)
) WITH (fillfactor = 70);

-- fillfactor: every transfer rewrites two account rows; room left on each
-- page lets the new version stay there (a HOT update), so the indexes,
-- whose columns never change, are not touched at all.

-- GetTrialBalance: a ledger's accounts by id.
CREATE INDEX accounts_ledger_idx ON ledger.accounts (tenant_id, ledger, id);

-- Immutable: the runtime role may insert and read, never update or delete.
-- pending_id and the ids a post or void inherited are stored resolved.
CREATE TABLE ledger.transfers (
    tenant_id          uuid          NOT NULL,
    id                 uuid          NOT NULL,
    debit_account_id   uuid          NOT NULL,
    credit_account_id  uuid          NOT NULL,
    amount             numeric(39,0) NOT NULL CHECK (amount >= 0),
    pending_id         uuid          NOT NULL,
    user_data_128      uuid          NOT NULL,
    user_data_64       int8          NOT NULL,
    user_data_32       int8          NOT NULL,
    timeout            int8          NOT NULL,
    ledger             int8          NOT NULL,
    code               int4          NOT NULL,
    flags              int4          NOT NULL,
    timestamp          int8          NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- GetAccountTransfers: one account's transfers by timestamp, per side.
CREATE INDEX transfers_debit_idx ON ledger.transfers (tenant_id, debit_account_id, timestamp);
CREATE INDEX transfers_credit_idx ON ledger.transfers (tenant_id, credit_account_id, timestamp);

-- The one mutable fact about a transfer: what became of a pending one
-- (1 pending, 2 posted, 3 voided, 4 expired). expires_at_ns is 0 when the
-- pending transfer has no timeout.
CREATE TABLE ledger.pending_transfers (
    tenant_id      uuid  NOT NULL,
    id             uuid  NOT NULL,
    status         int2  NOT NULL CHECK (status BETWEEN 1 AND 4),
    expires_at_ns  int8  NOT NULL CHECK (expires_at_ns >= 0),
    PRIMARY KEY (tenant_id, id)
);

-- The sweeper: due pending transfers, across tenants and within one.
CREATE INDEX pending_due_idx ON ledger.pending_transfers (expires_at_ns, tenant_id)
    WHERE status = 1 AND expires_at_ns > 0;
CREATE INDEX pending_tenant_due_idx ON ledger.pending_transfers (tenant_id, expires_at_ns)
    WHERE status = 1 AND expires_at_ns > 0;

-- Ids whose transfer failed for a transient reason (exceeds_credits, ...):
-- a retry of the id answers id_already_failed, forever.
CREATE TABLE ledger.transfers_failed (
    tenant_id  uuid  NOT NULL,
    id         uuid  NOT NULL,
    result     int4  NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

-- Balances of accounts with the history flag after each transfer (or
-- expiry) that changed them. side: 1 the account was debited, 2 credited.
CREATE TABLE ledger.account_balances (
    tenant_id        uuid          NOT NULL,
    account_id       uuid          NOT NULL,
    timestamp        int8          NOT NULL,
    transfer_id      uuid          NOT NULL,
    side             int2          NOT NULL CHECK (side IN (1, 2)),
    debits_pending   numeric(39,0) NOT NULL,
    debits_posted    numeric(39,0) NOT NULL,
    credits_pending  numeric(39,0) NOT NULL,
    credits_posted   numeric(39,0) NOT NULL,
    PRIMARY KEY (tenant_id, account_id, timestamp)
);

-- ---- row-level security ------------------------------------------------------

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['clocks', 'accounts', 'transfers', 'pending_transfers',
                             'transfers_failed', 'account_balances']
    LOOP
        EXECUTE format('ALTER TABLE ledger.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE ledger.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rt ON ledger.%I TO keelson_ledger_rt'
                       ' USING (tenant_id = ledger.ctx_tenant())'
                       ' WITH CHECK (tenant_id = ledger.ctx_tenant())', t);
    END LOOP;
END
$$;

CREATE POLICY sweeper ON ledger.pending_transfers FOR SELECT TO keelson_ledger_sweeper
    USING (true);

-- ---- grants --------------------------------------------------------------------

GRANT USAGE ON SCHEMA ledger TO keelson_ledger_rt, keelson_ledger_sweeper;
GRANT EXECUTE ON FUNCTION ledger.ctx_tenant() TO keelson_ledger_rt;

GRANT SELECT, INSERT, UPDATE ON ledger.clocks TO keelson_ledger_rt;
GRANT SELECT, INSERT ON ledger.accounts TO keelson_ledger_rt;
GRANT UPDATE (debits_pending, debits_posted, credits_pending, credits_posted, flags)
    ON ledger.accounts TO keelson_ledger_rt;
GRANT SELECT, INSERT ON ledger.transfers TO keelson_ledger_rt;
GRANT SELECT, INSERT ON ledger.pending_transfers TO keelson_ledger_rt;
GRANT UPDATE (status) ON ledger.pending_transfers TO keelson_ledger_rt;
GRANT SELECT, INSERT ON ledger.transfers_failed TO keelson_ledger_rt;
GRANT SELECT, INSERT ON ledger.account_balances TO keelson_ledger_rt;

GRANT SELECT (tenant_id, status, expires_at_ns) ON ledger.pending_transfers
    TO keelson_ledger_sweeper;
