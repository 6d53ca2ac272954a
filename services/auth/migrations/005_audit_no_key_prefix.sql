-- keelson-auth, schema "auth": the audit log holds no part of any secret.
--
-- api_key.created rows used to carry the key's "prefix" (its first 12
-- characters: "ks_live_" and 4 characters of the secret). ListApiKeys still
-- shows it, as the holders' hint for telling keys apart; the audit log names
-- a key by its id and name only. This removes the prefix from the rows
-- written before.
--
-- The table forces row-level security and its policies name the runtime
-- roles only, so the owner sees no row while it is forced: lifted for this
-- one statement, inside the migration's transaction (its lock keeps every
-- other session out until the commit restores it).

ALTER TABLE auth.audit_log NO FORCE ROW LEVEL SECURITY;

UPDATE auth.audit_log SET detail = detail - 'prefix'
 WHERE action = 'api_key.created' AND detail ? 'prefix';

ALTER TABLE auth.audit_log FORCE ROW LEVEL SECURITY;
