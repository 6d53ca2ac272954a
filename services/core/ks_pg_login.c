/*
 * ks_pg_login: the pool's login and runtime role (ks_pg_login.h says why).
 */
#include "ks_pg_login.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_code.h"
#include "ks_log.h"

#define CONNINFO_MAX 4096
#define OPTIONS_MAX  512

static bool role_name_ok(const char *role)
{
        size_t n = strlen(role);

        return n >= 1 && n <= 63 && strspn(role, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* Appends "key='value' " with libpq's quoting (backslash before ' and \). */
static int append_kv(char *out, size_t *len, const char *key, const char *val)
{
        size_t n = *len;
        int w = snprintf(out + n, CONNINFO_MAX - n, "%s='", key);

        if (w < 0 || (size_t)w >= CONNINFO_MAX - n) {
                return -1;
        }
        n += (size_t)w;
        for (const char *p = val; *p != '\0'; p++) {
                if (n + 3 >= CONNINFO_MAX) {
                        return -1;
                }
                if (*p == '\'' || *p == '\\') {
                        out[n++] = '\\';
                }
                out[n++] = *p;
        }
        if (n + 3 >= CONNINFO_MAX) {
                return -1;
        }
        out[n++] = '\'';
        out[n++] = ' ';
        out[n] = '\0';
        *len = n;
        return 0;
}

int ks_pg_role_conninfo(const char *dsn, const char *dsn_var, const char *role,
                        const char *role_var, char **out, char *err, size_t err_len)
{
        PQconninfoOption *opts, *o;
        char *perr = NULL, options[OPTIONS_MAX] = "", buf[CONNINFO_MAX] = "";
        size_t len = 0;
        int rc = 0;

        *out = NULL;
        if (!role_name_ok(role)) {
                snprintf(err, err_len, "%s: expected [a-z0-9_]{1,63}", role_var);
                return -1;
        }
        if ((opts = PQconninfoParse(dsn, &perr)) == NULL) {
                /* perr may quote the DSN, which may hold a password: not repeated. */
                snprintf(err, err_len, "%s: not a valid connection string", dsn_var);
                PQfreemem(perr);
                return -1;
        }
        for (o = opts; o->keyword != NULL && rc == 0; o++) {
                if (o->val == NULL || o->val[0] == '\0') {
                        continue;
                }
                if (strcmp(o->keyword, "options") == 0) {
                        rc =
                            snprintf(options, sizeof(options), "%s ", o->val) < (int)sizeof(options)
                                ? 0
                                : -1;
                        continue;
                }
                rc = append_kv(buf, &len, o->keyword, o->val);
        }
        PQconninfoFree(opts);
        if (rc == 0 && strlen(options) + strlen(role) + 10 < sizeof(options)) {
                strcat(options, "-c role=");
                strcat(options, role);
                rc = append_kv(buf, &len, "options", options);
        } else {
                rc = -1;
        }
        explicit_bzero(options, sizeof(options));
        if (rc != 0 || (*out = strdup(buf)) == NULL) {
                snprintf(err, err_len, "%s: too long", dsn_var);
                rc = -1;
        }
        explicit_bzero(buf, sizeof(buf)); /* it may hold a password */
        return rc;
}

static const char sql_privileged[] =
    "SELECT r.rolsuper OR r.rolbypassrls OR EXISTS (SELECT 1 FROM pg_tables"
    "  WHERE schemaname = $1 AND tableowner = session_user)"
    " FROM pg_roles r WHERE r.rolname = session_user";

int ks_pg_login_privileged(ks_pg_pool *pool, const char *schema, bool *privileged)
{
        const char *params[1] = {schema};
        PGconn *conn = NULL;
        PGresult *res = NULL;
        int rc;

        *privileged = true;
        if ((rc = ks_pg_acquire(pool, &conn)) != KS_OK) {
                return rc;
        }
        rc = ks_pg_exec(conn, NULL, sql_privileged, 1, params, &res);
        if (rc == KS_OK) {
                if (PQntuples(res) == 1) {
                        *privileged = strcmp(PQgetvalue(res, 0, 0), "f") != 0;
                } else {
                        rc = KS_INTERNAL;
                }
        }
        PQclear(res);
        ks_pg_release(pool, conn);
        return rc;
}

int ks_pg_login_check(ks_pg_pool *pool, const char *schema, bool login_dsn_set,
                      const char *login_var)
{
        bool privileged = true;
        int rc = ks_pg_login_privileged(pool, schema, &privileged);

        if (rc != KS_OK) {
                ks_log_error(NULL, "cannot read the pool's login role", "{s:s}", "code",
                             ks_code_name(rc));
                return -1;
        }
        if (!privileged) {
                return 0;
        }
        if (login_dsn_set) {
                ks_log_error(NULL,
                             "the pool's login role could bypass row-level security (superuser,"
                             " BYPASSRLS, or owner of a table): use a role that owns nothing",
                             "{s:s, s:s}", "variable", login_var, "schema", schema);
                return -1;
        }
        ks_log_warn(NULL,
                    "the pool logs in as the owner of the tables; set a login role that owns"
                    " nothing, so that no statement can act as the owner",
                    "{s:s, s:s}", "variable", login_var, "schema", schema);
        return 0;
}

int ks_pg_login_pool_new(ks_pg_pool **out, ks_pg_pool_options opts, const ks_pg_login_spec *spec,
                         char *err, size_t err_len)
{
        bool login_set = spec->login_dsn[0] != '\0';
        char *conninfo = NULL;

        *out = NULL;
        if (ks_pg_role_conninfo(login_set ? spec->login_dsn : spec->owner_dsn,
                                login_set ? spec->login_var : "KEELSON_PG_DSN", spec->role,
                                spec->role_var, &conninfo, err, err_len) != 0) {
                return KS_INVALID_ARGUMENT;
        }
        opts.dsn = conninfo;
        int rc = ks_pg_pool_new(out, &opts);
        explicit_bzero(conninfo, strlen(conninfo)); /* it may hold a password */
        free(conninfo);
        if (rc != KS_OK) {
                ks_log_error(NULL, "cannot create the PostgreSQL pool", NULL);
                return rc;
        }
        return ks_pg_login_check(*out, spec->schema, login_set, spec->login_var) == 0
                   ? KS_OK
                   : KS_PERMISSION_DENIED;
}
