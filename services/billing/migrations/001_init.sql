-- keelson-billing, schema "billing": customers, plans, test clocks,
-- subscriptions and their history, usage, invoices and their lines, pending
-- proration items, payments, credit notes, the ledger postings queue, the
-- idempotency keys of billing's writes and the event outbox, per tenant
-- (services/billing/billing.h).
--
-- Amounts are int8 minor units of the row's currency (services/billing/
-- model.h). Times are int8 Unix milliseconds, and for a customer on a test
-- clock they are the clock's time, not the wall clock's.
--
-- Roles, cluster-wide and NOLOGIN (created once, reused by every database
-- of the cluster; a deployment may create them beforehand):
--   keelson_billing_rt      what every transaction acting for a tenant runs
--                           as (services/core/ks_pg_login.h): it owns no
--                           table, so the row-level security policies below
--                           bind it to the tenant its transaction names
--                           (keelson.tenant_id).
--   keelson_billing_worker  the background work that must look across
--                           tenants before it can act for one: the
--                           scheduler's scan for due subscriptions, the
--                           ledger relay's claim of queued postings, the
--                           pruning of old idempotency keys. It reads the
--                           columns those need and nothing else; the work
--                           itself then runs as keelson_billing_rt, for the
--                           tenant (scheduler.c, relay.c).
-- The migration role must be able to create roles and grant membership
-- (CREATEROLE), or find both roles already there and be a member of both.

DO $$
BEGIN
    -- The exception, not IF NOT EXISTS alone: two databases of one cluster
    -- may run this file at the same moment, under different advisory locks.
    BEGIN
        CREATE ROLE keelson_billing_rt NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    BEGIN
        CREATE ROLE keelson_billing_worker NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;

GRANT keelson_billing_rt TO CURRENT_USER;
GRANT keelson_billing_worker TO CURRENT_USER;

-- The tenant a transaction acts for; NULL (no row matches) when unset.
CREATE FUNCTION billing.ctx_tenant() RETURNS uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT NULLIF(current_setting('keelson.tenant_id', true), '')::uuid $$;

CREATE FUNCTION billing.now_ms() RETURNS int8
    LANGUAGE sql VOLATILE PARALLEL SAFE
    AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8 $$;

-- ---- test clocks ---------------------------------------------------------------

CREATE TABLE billing.test_clocks (
    tenant_id   uuid  NOT NULL,
    id          uuid  NOT NULL DEFAULT gen_random_uuid(),
    name        text  NOT NULL DEFAULT '',
    frozen_ms   int8  NOT NULL,
    created_ms  int8  NOT NULL DEFAULT billing.now_ms(),
    PRIMARY KEY (tenant_id, id)
);

-- ---- customers -----------------------------------------------------------------

CREATE TABLE billing.customers (
    tenant_id               uuid    NOT NULL,
    id                      uuid    NOT NULL DEFAULT gen_random_uuid(),
    email                   text    NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    name                    text    NOT NULL DEFAULT '',
    currency                text    NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    tax_rate_bp             int4    NOT NULL DEFAULT 0 CHECK (tax_rate_bp BETWEEN 0 AND 10000),
    tax_exempt              bool    NOT NULL DEFAULT false,
    metadata                jsonb   NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    default_payment_method  text    NOT NULL DEFAULT '',
    archived                bool    NOT NULL DEFAULT false,
    -- Credit the customer holds; never negative (what it owes is receivable).
    credit_balance          int8    NOT NULL DEFAULT 0 CHECK (credit_balance >= 0),
    test_clock_id           uuid,
    created_ms              int8    NOT NULL,
    updated_ms              int8    NOT NULL,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, test_clock_id) REFERENCES billing.test_clocks (tenant_id, id)
);

-- ListCustomers: newest first, and by address.
CREATE INDEX customers_by_created ON billing.customers (tenant_id, created_ms DESC, id DESC);
CREATE INDEX customers_by_email ON billing.customers (tenant_id, lower(email), created_ms DESC, id DESC);

-- ---- plans ---------------------------------------------------------------------

-- A plan's versions: a price never changes, a new price is a new version
-- (a new row, a new id); exactly one version of a code is the latest.
CREATE TABLE billing.plans (
    tenant_id       uuid  NOT NULL,
    id              uuid  NOT NULL DEFAULT gen_random_uuid(),
    code            text  NOT NULL CHECK (code ~ '^[A-Za-z0-9._-]{1,64}$'),
    version         int4  NOT NULL CHECK (version >= 1),
    latest          bool  NOT NULL,
    name            text  NOT NULL DEFAULT '',
    currency        text  NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    interval_unit   int2  NOT NULL CHECK (interval_unit BETWEEN 1 AND 4),
    interval_count  int4  NOT NULL CHECK (interval_count >= 1),
    trial_days      int4  NOT NULL DEFAULT 0 CHECK (trial_days BETWEEN 0 AND 730),
    price_model     int2  NOT NULL CHECK (price_model BETWEEN 1 AND 3),
    price_amount    int8  NOT NULL CHECK (price_amount >= 0),
    -- GRADUATED: [{"up_to": n, "unit_amount": n, "flat_amount": n}, ...]; else [].
    tiers           jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tiers) = 'array'),
    archived        bool  NOT NULL DEFAULT false,
    created_ms      int8  NOT NULL DEFAULT billing.now_ms(),
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, code, version)
);

CREATE UNIQUE INDEX plans_latest ON billing.plans (tenant_id, code) WHERE latest;
-- ListPlans: the latest versions, newest first.
CREATE INDEX plans_latest_by_created ON billing.plans (tenant_id, created_ms DESC, id DESC) WHERE latest;

-- ---- subscriptions -------------------------------------------------------------

-- state: services/billing/model.h bl_sub_state (0 trialing, 1 active,
-- 2 past_due, 3 paused, 4 canceled). The current period is
-- [period_start_ms, period_end_ms); period_n is its index from the anchor
-- (-1 for a first, partial period before the anchor). next_action_ms is
-- when the scheduler (or the test clock) must look at it next: the trial's
-- end, the period's end, or a dunning retry of one of its invoices; NULL
-- when nothing is due (canceled, paused).
CREATE TABLE billing.subscriptions (
    tenant_id             uuid  NOT NULL,
    id                    uuid  NOT NULL DEFAULT gen_random_uuid(),
    customer_id           uuid  NOT NULL,
    plan_id               uuid  NOT NULL,
    quantity              int8  NOT NULL CHECK (quantity BETWEEN 1 AND 1000000),
    state                 int2  NOT NULL CHECK (state BETWEEN 0 AND 4),
    currency              text  NOT NULL,
    anchor_ms             int8  NOT NULL,
    period_n              int8  NOT NULL,
    period_start_ms       int8  NOT NULL,
    period_end_ms         int8  NOT NULL CHECK (period_end_ms > period_start_ms),
    trial_end_ms          int8  NOT NULL DEFAULT 0,
    cancel_at_period_end  bool  NOT NULL DEFAULT false,
    canceled_ms           int8  NOT NULL DEFAULT 0,
    paused_ms             int8  NOT NULL DEFAULT 0,
    test_clock_id         uuid,
    next_action_ms        int8,
    latest_invoice_id     uuid,
    history_seq           int4  NOT NULL DEFAULT 0,
    created_ms            int8  NOT NULL,
    updated_ms            int8  NOT NULL,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, customer_id) REFERENCES billing.customers (tenant_id, id),
    FOREIGN KEY (tenant_id, plan_id) REFERENCES billing.plans (tenant_id, id)
);

CREATE INDEX subscriptions_by_created ON billing.subscriptions (tenant_id, created_ms DESC, id DESC);
CREATE INDEX subscriptions_by_customer
    ON billing.subscriptions (tenant_id, customer_id, created_ms DESC, id DESC);
-- The scheduler's scan, across tenants, of subscriptions on real time.
CREATE INDEX subscriptions_due ON billing.subscriptions (next_action_ms)
    WHERE test_clock_id IS NULL AND next_action_ms IS NOT NULL;
-- A test clock's advance: its subscriptions in the order their actions fall due.
CREATE INDEX subscriptions_clock_due ON billing.subscriptions (tenant_id, test_clock_id, next_action_ms)
    WHERE test_clock_id IS NOT NULL;

-- Every state change, renewal and plan change of a subscription, in order.
-- from_state -1: the creation.
CREATE TABLE billing.subscription_history (
    tenant_id        uuid  NOT NULL,
    subscription_id  uuid  NOT NULL,
    seq              int4  NOT NULL,
    from_state       int2  NOT NULL,
    to_state         int2  NOT NULL,
    event            text  NOT NULL,
    at_ms            int8  NOT NULL,
    invoice_id       uuid,
    detail           text  NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, subscription_id, seq)
);

-- Usage of metered subscriptions; the client's event id makes a resend
-- change nothing.
CREATE TABLE billing.usage_events (
    tenant_id        uuid  NOT NULL,
    subscription_id  uuid  NOT NULL,
    event_id         text  NOT NULL CHECK (length(event_id) BETWEEN 1 AND 128),
    quantity         int8  NOT NULL CHECK (quantity >= 0),
    ts_ms            int8  NOT NULL,
    PRIMARY KEY (tenant_id, subscription_id, event_id)
);

CREATE INDEX usage_by_time ON billing.usage_events (tenant_id, subscription_id, ts_ms) INCLUDE (quantity);

-- ---- invoices ------------------------------------------------------------------

-- state: model.h bl_inv_state (0 draft, 1 open, 2 paid, 3 void,
-- 4 uncollectible). amount_due = total - balance_applied (0 when the total is
-- a credit); what is left to pay is amount_due - amount_paid -
-- amount_credited. next_attempt_ms: the next automatic retry of a failed
-- charge (dunning), NULL when none is planned.
CREATE TABLE billing.invoices (
    tenant_id         uuid  NOT NULL,
    id                uuid  NOT NULL DEFAULT gen_random_uuid(),
    customer_id       uuid  NOT NULL,
    subscription_id   uuid,
    number            text,
    state             int2  NOT NULL CHECK (state BETWEEN 0 AND 4),
    billing_reason    text  NOT NULL,
    currency          text  NOT NULL,
    description       text  NOT NULL DEFAULT '',
    subtotal          int8  NOT NULL DEFAULT 0,
    tax               int8  NOT NULL DEFAULT 0,
    total             int8  NOT NULL DEFAULT 0,
    balance_applied   int8  NOT NULL DEFAULT 0 CHECK (balance_applied >= 0),
    amount_due        int8  NOT NULL DEFAULT 0 CHECK (amount_due >= 0),
    amount_paid       int8  NOT NULL DEFAULT 0 CHECK (amount_paid >= 0),
    amount_credited   int8  NOT NULL DEFAULT 0 CHECK (amount_credited >= 0),
    n_lines           int4  NOT NULL DEFAULT 0,
    period_start_ms   int8  NOT NULL DEFAULT 0,
    period_end_ms     int8  NOT NULL DEFAULT 0,
    auto_charge       bool  NOT NULL DEFAULT false,
    attempt_count     int4  NOT NULL DEFAULT 0,
    next_attempt_ms   int8,
    created_ms        int8  NOT NULL,
    finalized_ms      int8  NOT NULL DEFAULT 0,
    paid_ms           int8  NOT NULL DEFAULT 0,
    voided_ms         int8  NOT NULL DEFAULT 0,
    uncollectible_ms  int8  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, number),
    -- What is paid never exceeds what was due; credit notes never exceed the
    -- total (on an open invoice they reduce what is left to pay, on a paid
    -- one they go to the customer's credit balance).
    CHECK (amount_paid <= amount_due),
    CHECK (amount_credited <= GREATEST(total, 0)),
    FOREIGN KEY (tenant_id, customer_id) REFERENCES billing.customers (tenant_id, id)
);

-- No period is ever invoiced twice: one creation or renewal invoice per
-- subscription and period start, whoever (which replica, which clock) makes it.
CREATE UNIQUE INDEX invoices_one_per_period ON billing.invoices (tenant_id, subscription_id, period_start_ms)
    WHERE billing_reason IN ('subscription_create', 'subscription_cycle');
CREATE INDEX invoices_by_created ON billing.invoices (tenant_id, created_ms DESC, id DESC);
CREATE INDEX invoices_by_customer ON billing.invoices (tenant_id, customer_id, created_ms DESC, id DESC);
CREATE INDEX invoices_by_subscription ON billing.invoices (tenant_id, subscription_id, created_ms DESC, id DESC)
    WHERE subscription_id IS NOT NULL;
-- Open invoices of a subscription (dunning, past_due) and the summary's amounts.
CREATE INDEX invoices_open ON billing.invoices (tenant_id, subscription_id) WHERE state = 1;

CREATE TABLE billing.invoice_lines (
    tenant_id        uuid  NOT NULL,
    invoice_id       uuid  NOT NULL,
    line_no          int4  NOT NULL CHECK (line_no >= 1),
    kind             text  NOT NULL,
    description      text  NOT NULL DEFAULT '',
    quantity         int8  NOT NULL DEFAULT 1,
    unit_amount      int8  NOT NULL DEFAULT 0,
    amount           int8  NOT NULL,
    tax              int8  NOT NULL DEFAULT 0,
    taxable          bool  NOT NULL DEFAULT true,
    period_start_ms  int8  NOT NULL DEFAULT 0,
    period_end_ms    int8  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, invoice_id, line_no)
);

-- Proration lines of ChangeSubscription (create_prorations) waiting for the
-- subscription's next invoice; invoice_id is set when one takes them.
CREATE TABLE billing.pending_items (
    tenant_id        uuid  NOT NULL,
    id               uuid  NOT NULL DEFAULT gen_random_uuid(),
    subscription_id  uuid  NOT NULL,
    kind             text  NOT NULL,
    description      text  NOT NULL DEFAULT '',
    quantity         int8  NOT NULL DEFAULT 1,
    unit_amount      int8  NOT NULL DEFAULT 0,
    amount           int8  NOT NULL,
    taxable          bool  NOT NULL DEFAULT true,
    period_start_ms  int8  NOT NULL DEFAULT 0,
    period_end_ms    int8  NOT NULL DEFAULT 0,
    created_ms       int8  NOT NULL,
    invoice_id       uuid,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX pending_items_waiting ON billing.pending_items (tenant_id, subscription_id, created_ms)
    WHERE invoice_id IS NULL;

-- status 1 succeeded, 2 failed. method: card (the provider) | out_of_band.
CREATE TABLE billing.payments (
    tenant_id       uuid  NOT NULL,
    id              uuid  NOT NULL DEFAULT gen_random_uuid(),
    invoice_id      uuid  NOT NULL,
    customer_id     uuid  NOT NULL,
    amount          int8  NOT NULL CHECK (amount >= 0),
    status          int2  NOT NULL CHECK (status IN (1, 2)),
    method          text  NOT NULL,
    payment_method  text  NOT NULL DEFAULT '',
    failure_code    text  NOT NULL DEFAULT '',
    reference       text  NOT NULL DEFAULT '',
    created_ms      int8  NOT NULL,
    PRIMARY KEY (tenant_id, id)
);

CREATE INDEX payments_by_invoice ON billing.payments (tenant_id, invoice_id, created_ms);

CREATE TABLE billing.credit_notes (
    tenant_id    uuid  NOT NULL,
    id           uuid  NOT NULL DEFAULT gen_random_uuid(),
    number       text  NOT NULL,
    invoice_id   uuid  NOT NULL,
    customer_id  uuid  NOT NULL,
    currency     text  NOT NULL,
    amount       int8  NOT NULL CHECK (amount > 0),
    subtotal     int8  NOT NULL,
    tax          int8  NOT NULL,
    reason       text  NOT NULL DEFAULT '',
    credited_to  text  NOT NULL,
    created_ms   int8  NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, number),
    CHECK (subtotal + tax = amount)
);

CREATE INDEX credit_notes_by_created ON billing.credit_notes (tenant_id, created_ms DESC, id DESC);
CREATE INDEX credit_notes_by_invoice ON billing.credit_notes (tenant_id, invoice_id, created_ms DESC, id DESC);

-- Per-tenant gapless numbers: kind 1 invoices (INV-), 2 credit notes (CN-).
-- The row is taken by the transaction that numbers, so a number is used
-- exactly when that transaction commits.
CREATE TABLE billing.counters (
    tenant_id  uuid  NOT NULL,
    kind       int2  NOT NULL CHECK (kind IN (1, 2)),
    last       int8  NOT NULL CHECK (last >= 0),
    PRIMARY KEY (tenant_id, kind)
);

-- ---- the ledger postings queue (services/billing/relay.c) ---------------------

-- One row per posting: a linked chain of ledger transfers (a packed
-- keelson.ledger.v1.CreateTransfersRequest) and the accounts it touches (a
-- packed CreateAccountsRequest), queued in the transaction of the write it
-- records. source_type: 1 invoice finalized, 2 payment, 3 credit note,
-- 4 invoice voided, 5 invoice marked uncollectible. The relay sends queued
-- rows to the ledger until it answers ok or exists, then sets posted_ms;
-- a chain the ledger refuses for good is marked failed (and reconciliation
-- reports it).
CREATE TABLE billing.postings (
    id           int8  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    uuid  NOT NULL,
    source_type  int2  NOT NULL CHECK (source_type BETWEEN 1 AND 5),
    source_id    uuid  NOT NULL,
    currency     text  NOT NULL,
    n_transfers  int4  NOT NULL CHECK (n_transfers BETWEEN 1 AND 16),
    transfers    bytea NOT NULL,
    accounts     bytea NOT NULL,
    created_ms   int8  NOT NULL DEFAULT billing.now_ms(),
    posted_ms    int8,
    attempts     int4  NOT NULL DEFAULT 0,
    failed       bool  NOT NULL DEFAULT false,
    last_error   text  NOT NULL DEFAULT '',
    UNIQUE (tenant_id, source_type, source_id)
);

CREATE INDEX postings_queued ON billing.postings (id) WHERE posted_ms IS NULL AND NOT failed;

-- ---- idempotency keys (services/billing/idempotency.c) -------------------------

-- The outcome of the first request with a key, replayed for 24 hours to the
-- same request. fingerprint is the SHA-256 of the method's full name and the
-- request as packed; code and message are the reply's, reply the packed
-- response.
CREATE TABLE billing.idempotency_keys (
    tenant_id    uuid   NOT NULL,
    key          text   NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    method       text   NOT NULL,
    fingerprint  bytea  NOT NULL,
    code         int4   NOT NULL,
    message      text   NOT NULL DEFAULT '',
    reply        bytea,
    created_ms   int8   NOT NULL DEFAULT billing.now_ms(),
    PRIMARY KEY (tenant_id, key)
);

CREATE INDEX idempotency_keys_by_age ON billing.idempotency_keys (created_ms);

-- ---- the event outbox (services/core/ks_outbox.h) -----------------------------

CREATE TABLE billing.outbox (
    id           bigserial PRIMARY KEY,
    event_id     uuid NOT NULL UNIQUE,
    topic        text NOT NULL,
    tenant_id    uuid,
    payload      bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX outbox_unpublished ON billing.outbox (id) WHERE published_at IS NULL;

-- ---- row-level security ------------------------------------------------------

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['test_clocks', 'customers', 'plans', 'subscriptions',
                             'subscription_history', 'usage_events', 'invoices',
                             'invoice_lines', 'pending_items', 'payments', 'credit_notes',
                             'counters', 'postings', 'idempotency_keys']
    LOOP
        EXECUTE format('ALTER TABLE billing.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE billing.%I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_rt ON billing.%I TO keelson_billing_rt'
                       ' USING (tenant_id = billing.ctx_tenant())'
                       ' WITH CHECK (tenant_id = billing.ctx_tenant())', t);
    END LOOP;
END
$$;

-- The worker's look across tenants (see the roles above).
CREATE POLICY worker_due ON billing.subscriptions FOR SELECT TO keelson_billing_worker
    USING (true);
CREATE POLICY worker_claim ON billing.postings FOR SELECT TO keelson_billing_worker
    USING (true);
CREATE POLICY worker_mark ON billing.postings FOR UPDATE TO keelson_billing_worker
    USING (true) WITH CHECK (true);
CREATE POLICY worker_prune_read ON billing.idempotency_keys FOR SELECT TO keelson_billing_worker
    USING (true);
CREATE POLICY worker_prune ON billing.idempotency_keys FOR DELETE TO keelson_billing_worker
    USING (true);

-- ---- grants --------------------------------------------------------------------

GRANT USAGE ON SCHEMA billing TO keelson_billing_rt, keelson_billing_worker;
GRANT EXECUTE ON FUNCTION billing.ctx_tenant(), billing.now_ms()
    TO keelson_billing_rt, keelson_billing_worker;

GRANT SELECT, INSERT ON billing.test_clocks TO keelson_billing_rt;
GRANT UPDATE (frozen_ms) ON billing.test_clocks TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.customers TO keelson_billing_rt;
GRANT UPDATE (email, name, tax_rate_bp, tax_exempt, metadata, default_payment_method, archived,
              credit_balance, updated_ms) ON billing.customers TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.plans TO keelson_billing_rt;
GRANT UPDATE (latest, name, trial_days, archived) ON billing.plans TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.subscriptions TO keelson_billing_rt;
GRANT UPDATE (plan_id, quantity, state, anchor_ms, period_n, period_start_ms, period_end_ms,
              trial_end_ms, cancel_at_period_end, canceled_ms, paused_ms, next_action_ms,
              latest_invoice_id, history_seq, updated_ms) ON billing.subscriptions
    TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.subscription_history TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.usage_events TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.invoices TO keelson_billing_rt;
GRANT UPDATE (number, state, description, subtotal, tax, total, balance_applied, amount_due,
              amount_paid, amount_credited, n_lines, period_start_ms, period_end_ms, auto_charge,
              attempt_count, next_attempt_ms, finalized_ms, paid_ms, voided_ms, uncollectible_ms)
    ON billing.invoices TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.invoice_lines TO keelson_billing_rt;
-- AddInvoiceLines taxes a draft's lines again (their tax only).
GRANT UPDATE (tax) ON billing.invoice_lines TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.pending_items TO keelson_billing_rt;
GRANT UPDATE (invoice_id) ON billing.pending_items TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.payments TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.credit_notes TO keelson_billing_rt;
GRANT SELECT, INSERT, UPDATE ON billing.counters TO keelson_billing_rt;
GRANT SELECT, INSERT ON billing.postings TO keelson_billing_rt;
GRANT SELECT, INSERT, DELETE ON billing.idempotency_keys TO keelson_billing_rt;
-- The outbox has no tenant policy: ks_outbox_add inserts as the service.
GRANT INSERT ON billing.outbox TO keelson_billing_rt;
GRANT USAGE ON SEQUENCE billing.outbox_id_seq TO keelson_billing_rt;

GRANT SELECT (tenant_id, id, test_clock_id, next_action_ms) ON billing.subscriptions
    TO keelson_billing_worker;
GRANT SELECT, UPDATE (posted_ms, attempts, failed, last_error) ON billing.postings
    TO keelson_billing_worker;
GRANT SELECT (tenant_id, key, created_ms), DELETE ON billing.idempotency_keys
    TO keelson_billing_worker;
