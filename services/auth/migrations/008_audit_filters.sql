-- keelson-auth, schema "auth": indexes for ListAudit's filters.
--
-- ListAudit filters a tenant's log by action, by the user who wrote a row
-- and by a time window, newest first by id. With the tenant's index alone
-- (audit_log_tenant_id_idx) a filter that matches few rows reads the whole
-- log to fill a page, or to find that there is none. Each filter that leads
-- a query (services/auth/audit.c) has an index of its own:
--
--   by action   (tenant_id, action, id DESC): the page is the index order;
--   by actor    (tenant_id, actor_user_id, id DESC), partial: rows written
--               with an API key have no user and are never looked up so;
--   by window   (tenant_id, occurred_at): the window's rows, then sorted by
--               id (occurred_at is the writing transaction's start, which
--               ids follow only roughly, so the window cannot be an id range).
--
-- Plain CREATE INDEX, as the migrations run in a transaction: audit writes
-- (every admin write) wait while the indexes are built.
CREATE INDEX audit_log_action_idx ON auth.audit_log (tenant_id, action, id DESC);
CREATE INDEX audit_log_actor_idx ON auth.audit_log (tenant_id, actor_user_id, id DESC)
    WHERE actor_user_id IS NOT NULL;
CREATE INDEX audit_log_occurred_idx ON auth.audit_log (tenant_id, occurred_at);
