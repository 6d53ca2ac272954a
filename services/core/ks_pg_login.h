/*
 * ks_pg_login: how a service's pool logs in to PostgreSQL.
 *
 * Two roles meet here. The owner (KEELSON_PG_DSN) owns the service's tables
 * and runs its migrations. The pool must not be able to act as that owner:
 * row-level security binds only roles that neither own a table nor bypass
 * security. So the pool logs in with its own DSN (KEELSON_<SVC>_PG_LOGIN_DSN),
 * as a login role that owns nothing and is a member of the service's
 * runtime role, and every connection switches to the runtime role from its
 * first statement ("-c role=<role>" among its startup options). A RESET
 * ROLE in a statement returns to the runtime role, and a SET ROLE NONE to
 * the login role, which holds no privilege at all: never to the owner.
 *
 * Without a login DSN the pool logs in as the owner and switches to the
 * runtime role the same way: isolation still holds for every statement the
 * service sends, but one that said SET ROLE NONE would act as the owner. The
 * service then warns at start; with a login DSN that turns out to be
 * privileged, it refuses to start.
 */
#ifndef KS_PG_LOGIN_H
#define KS_PG_LOGIN_H

#include "ks_code.h"

#include <stdbool.h>
#include <stddef.h>

#include "ks_pg.h"

/*
 * The pool's connection string: dsn with "-c role=<role>" appended to its
 * options (any options the dsn has stay first). dsn_var and role_var name
 * the variables in error messages, which never quote the dsn (it may hold a
 * password). Returns 0 and *out (malloc'ed: explicit_bzero then free it), or
 * -1 and a message in err.
 */
int ks_pg_role_conninfo(const char *dsn, const char *dsn_var, const char *role,
                        const char *role_var, char **out, char *err, size_t err_len) KS_MUST_CHECK;

/*
 * Whether the pool's login role (session_user) could step out of row-level
 * security: a superuser, a BYPASSRLS role, or the owner of a table of
 * schema. KS_OK and *privileged, or the ks_code of the failure.
 */
int ks_pg_login_privileged(ks_pg_pool *pool, const char *schema, bool *privileged) KS_MUST_CHECK;

/*
 * The start-up rule above: with a login DSN configured (login_dsn_set), a
 * privileged login is an error (-1, logged, naming login_var); without one,
 * a warning. Returns 0 when the service may go on.
 */
int ks_pg_login_check(ks_pg_pool *pool, const char *schema, bool login_dsn_set,
                      const char *login_var) KS_MUST_CHECK;

/* Where a service's pool logs in, and what it checks: the rule above. */
typedef struct ks_pg_login_spec {
        const char *owner_dsn; /* KEELSON_PG_DSN */
        const char *login_dsn; /* KEELSON_<SVC>_PG_LOGIN_DSN; "" for none: the owner's */
        const char *login_var; /* its name */
        const char *role;      /* the runtime role */
        const char *role_var;  /* the variable that names it, for messages */
        const char *schema;    /* whose tables the login must not own */
} ks_pg_login_spec;

/*
 * The service's pool: opts with its dsn made by ks_pg_role_conninfo from
 * the login DSN (or the owner's), the connection string wiped once the pool
 * has it, then ks_pg_login_check. Returns KS_OK and *out;
 * KS_INVALID_ARGUMENT when the DSN cannot take the role (the reason in err,
 * nothing logged: the caller says it as it says configuration errors);
 * KS_PERMISSION_DENIED when the login may step out of row-level security,
 * another code when the pool cannot be made (both logged).
 */
int ks_pg_login_pool_new(ks_pg_pool **out, ks_pg_pool_options opts, const ks_pg_login_spec *spec,
                         char *err, size_t err_len) KS_MUST_CHECK;

#endif
