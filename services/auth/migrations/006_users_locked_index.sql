-- keelson-auth, schema "auth": an index of locked users for the admin summary.
--
-- The users whose login is locked, or was until a while ago (a successful
-- login clears locked_until): what the admin summary counts as locked. The
-- summary counts a tenant's members by role from memberships alone, and
-- reads users only for the locked ones, through this index, instead of
-- joining every member's user row (27 ms for a tenant of 10,000 members
-- among 100,000 users; 5 ms this way). Partial: the index holds only the
-- rows that have a lock time, a small share of the users.
CREATE INDEX users_locked_idx ON auth.users (locked_until) WHERE locked_until IS NOT NULL;
