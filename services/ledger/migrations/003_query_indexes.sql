-- Indexes for QueryAccounts and QueryTransfers (TigerBeetle's QueryFilter)
-- and for imported events, which must be dated after the tenant's latest
-- object of their kind and may not take another object's timestamp.
--
-- A query asks for the objects of one tenant whose non-zero filter fields
-- match, within a timestamp range, in timestamp order. Each filter field
-- has an index (field, tenant_id, timestamp): an equality on the field and
-- the tenant, then a range read in order, stopping at the limit. The
-- user_data indexes leave out the rows where the field is 0 (0 never
-- filters, so no query needs them): most rows carry no user data and cost
-- those indexes nothing. The statements repeat the index predicate
-- (services/ledger/queries.c) so that a generic plan can use them.
--
-- A query with no field, and the latest timestamp of a tenant, need
-- (tenant, timestamp). That index leads with the expression tenant_id::text,
-- not with the column, for the reason of 002_key_first_indexes.sql: a
-- lookup by (tenant_id, id) must always find the primary key, and an index
-- on an expression can only serve a condition written on that same
-- expression (tenant_id::text = ...), never tenant_id = ..., so the planner
-- cannot take it for a lookup by key.

CREATE INDEX transfers_timestamp_idx ON ledger.transfers ((tenant_id::text), timestamp);
CREATE INDEX transfers_ledger_idx ON ledger.transfers (ledger, tenant_id, timestamp);
CREATE INDEX transfers_code_idx ON ledger.transfers (code, tenant_id, timestamp);
CREATE INDEX transfers_user_data_128_idx ON ledger.transfers (user_data_128, tenant_id, timestamp)
    WHERE user_data_128 <> '00000000-0000-0000-0000-000000000000'::uuid;
CREATE INDEX transfers_user_data_64_idx ON ledger.transfers (user_data_64, tenant_id, timestamp)
    WHERE user_data_64 <> 0;
CREATE INDEX transfers_user_data_32_idx ON ledger.transfers (user_data_32, tenant_id, timestamp)
    WHERE user_data_32 <> 0;

CREATE INDEX accounts_timestamp_idx ON ledger.accounts ((tenant_id::text), timestamp);
CREATE INDEX accounts_ledger_ts_idx ON ledger.accounts (ledger, tenant_id, timestamp);
CREATE INDEX accounts_code_idx ON ledger.accounts (code, tenant_id, timestamp);
CREATE INDEX accounts_user_data_128_idx ON ledger.accounts (user_data_128, tenant_id, timestamp)
    WHERE user_data_128 <> '00000000-0000-0000-0000-000000000000'::uuid;
CREATE INDEX accounts_user_data_64_idx ON ledger.accounts (user_data_64, tenant_id, timestamp)
    WHERE user_data_64 <> 0;
CREATE INDEX accounts_user_data_32_idx ON ledger.accounts (user_data_32, tenant_id, timestamp)
    WHERE user_data_32 <> 0;
