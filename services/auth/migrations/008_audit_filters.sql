-- keelson-auth, schema "auth": indexes for ListAudit's order and filters.
--
-- ListAudit shows a tenant's log newest first by occurred_at, then id, and
-- filters it by action, by the user who wrote a row and by a time window.
-- With the tenant's id index alone (audit_log_tenant_id_idx) a filter that
-- matches few rows reads the whole log to fill a page, or to find there is
-- none, and a window sorts every row in it. Each query of ListAudit
-- (services/auth/audit.c) has an index that ends in (occurred_at, id): the
-- window and the page's cursor are one range of it, read in order, and the
-- scan stops at the end of the page.
--
--   the whole log  (tenant_id, occurred_at, id)
--   by action      (tenant_id, action, occurred_at, id)
--   by actor       (tenant_id, actor_user_id, occurred_at, id), partial:
--                  rows written with an API key have no user to look up.
--
-- The id index served the list's former order only: dropped, as every row
-- written updates every index. Plain CREATE INDEX, as the migrations run in
-- a transaction: audit writes (every admin write) wait while the indexes
-- are built.
CREATE INDEX audit_log_tenant_at_idx ON auth.audit_log (tenant_id, occurred_at, id);
CREATE INDEX audit_log_action_at_idx ON auth.audit_log (tenant_id, action, occurred_at, id);
CREATE INDEX audit_log_actor_at_idx ON auth.audit_log (tenant_id, actor_user_id, occurred_at, id)
    WHERE actor_user_id IS NOT NULL;
DROP INDEX auth.audit_log_tenant_id_idx;
