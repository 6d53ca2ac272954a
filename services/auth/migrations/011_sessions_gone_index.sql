-- keelson-auth, schema "auth": housekeeping finds stale sessions by index.
--
-- auth.housekeeping (003_housekeeping.sql) deletes the sessions whose
-- coalesce(revoked_at, expires_at) is past the keep period. The index 003
-- made is on expires_at alone, which that condition cannot use: every pass
-- of every replica read the whole table, stale sessions or not. The index
-- is now on the expression the function compares. A revocation then
-- updates an index; it is rare beside the reads of a session.

CREATE INDEX sessions_gone_idx ON auth.sessions ((coalesce(revoked_at, expires_at)));
DROP INDEX auth.sessions_expires_idx;
