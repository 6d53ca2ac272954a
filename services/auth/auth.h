/*
 * keelson-auth internals: the service state every handler shares, the
 * handlers of keelson.auth.v1.AuthService, and the pure input rules
 * (validate.c) that the unit tests exercise without a database.
 */
#ifndef AUTH_H
#define AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_crypto.h"
#include "ks_metrics.h"
#include "ks_pg.h"
#include "ks_rpc.h"

/* ---- limits (bytes unless said otherwise) ------------------------------ */

#define AUTH_EMAIL_BYTES_MAX    254  /* RFC 5321 path limit, after trimming */
#define AUTH_PASSWORD_CHARS_MIN 8    /* UTF-8 code points */
#define AUTH_PASSWORD_BYTES_MAX 1024 /* bounds the work one request can ask scrypt for */
#define AUTH_NAME_CHARS_MAX     200  /* tenant and display names, code points */
#define AUTH_NAME_BYTES_MAX     (AUTH_NAME_CHARS_MAX * 4)
#define AUTH_TOKEN_BYTES        32  /* random bytes behind a session token */
#define AUTH_TOKEN_LEN          43  /* base64url of 32 bytes, unpadded */
#define AUTH_TOKEN_BYTES_MAX    512 /* longer bearer strings are refused unread */
#define AUTH_UUID_LEN           36
#define AUTH_ERR_MAX            128 /* validation messages */

/* Every reply to a failed Login, whatever failed: nothing tells them apart. */
#define AUTH_LOGIN_FAILED_MSG "invalid email or password"
/* Every database failure: the detail is in the log under the request id. */
#define AUTH_INTERNAL_MSG "internal error"

/* ---- service state ----------------------------------------------------- */

typedef struct auth_service {
        ks_pg_pool *pool;
        ks_scrypt_params scrypt;               /* configured hashing parameters */
        char dummy_hash[KS_PASSWORD_HASH_MAX]; /* verified for unknown emails */
        int64_t session_ttl_s;
        ks_counter *logins_ok;     /* keelson_auth_logins_total{result="ok"} */
        ks_counter *logins_failed; /* keelson_auth_logins_total{result="failed"} */
} auth_service;

/* The method table served by this binary (handlers in signup/login/sessions.c). */
extern const ks_method auth_methods[];
extern const size_t auth_methods_n;

int auth_signup(ks_call *call);
int auth_login(ks_call *call);
int auth_logout(ks_call *call);
int auth_whoami(ks_call *call);
int auth_resolve_context(ks_call *call);

/* ---- sessions.c: shared with login.c ----------------------------------- */

typedef struct auth_session {
        char token[AUTH_TOKEN_LEN + 1]; /* shown to the client once, never stored */
        char session_id[AUTH_UUID_LEN + 1];
        char tenant_id[AUTH_UUID_LEN + 1];
        char role[16];
        int64_t expires_at_unix_ms;
} auth_session;

/*
 * Creates a session for user_id in tenant_id (or, when tenant_id is NULL,
 * in the user's oldest membership), in one statement that also proves the
 * membership exists. Returns KS_OK and fills *out; KS_NOT_FOUND when the
 * user is no member of that tenant; another code on a database failure.
 */
int auth_session_create(auth_service *svc, PGconn *conn, const char *request_id,
                        const char *user_id, const char *tenant_id, auth_session *out);

/* Text form of a bytea parameter holding SHA-256(token): "\x" + 64 hex. */
#define AUTH_SHA256_PARAM_LEN (2 + 2 * KS_SHA256_BYTES + 1)
void auth_token_hash_param(const char *token, size_t len, char out[AUTH_SHA256_PARAM_LEN]);

/* ---- db.c -------------------------------------------------------------- */

/*
 * Maps a database failure to the reply: UNAVAILABLE and ABORTED keep their
 * code (the client may retry), anything else becomes INTERNAL; the message
 * says nothing about the database (the detail is logged under the request
 * id). Returns the code, for "return auth_db_fail(call, rc);".
 */
int auth_db_fail(ks_call *call, int code);

/* Acquires a connection, runs one statement (see ks_pg_exec), releases. */
int auth_db_exec_once(auth_service *svc, const char *request_id, const char *sql, int n_params,
                      const char *const *params, PGresult **out);

/* Copies the text of one result field into out, cut to out_len - 1 bytes. */
void auth_copy_field(const PGresult *res, int row, int col, char *out, size_t out_len);

/* ---- validate.c: pure functions, no I/O -------------------------------- */

/*
 * Trims ASCII whitespace and lower-cases ASCII letters (non-ASCII bytes are
 * kept as they are: lower-casing them needs Unicode tables, and two spellings
 * of one address outside ASCII are rare enough to leave to a later rule).
 * Returns 0, or -1 when the result does not fit in out (out_len bytes,
 * NUL included).
 */
int auth_email_normalize(const char *in, char *out, size_t out_len);

/*
 * Validates an already normalised address: at most 254 bytes, valid UTF-8,
 * no space or control character, exactly one '@', a non-empty local part,
 * and a domain that contains a dot with no empty label. Returns KS_OK, or
 * KS_INVALID_ARGUMENT with a message naming the field in err.
 */
int auth_email_validate(const char *email, char *err, size_t err_len);

/*
 * Password rules of SignUp: valid UTF-8, at least 8 code points, at most
 * 1024 bytes. Returns KS_OK or KS_INVALID_ARGUMENT with a message in err.
 */
int auth_password_validate(const char *password, char *err, size_t err_len);

/*
 * A tenant or display name: trimmed of ASCII whitespace into out, valid
 * UTF-8, no control character, at most 200 code points. field names the
 * field in the message. Empty is valid (the caller picks a default).
 */
int auth_name_normalize(const char *field, const char *in, char *out, size_t out_len, char *err,
                        size_t err_len);

/*
 * "<local part>'s workspace" for a normalised email, the local part cut at
 * a code point boundary so that the whole fits in 200 code points.
 */
void auth_default_tenant_name(const char *email, char *out, size_t out_len);

/* Code points in s when it is valid UTF-8 (no overlongs, no surrogates), else -1. */
long auth_utf8_count(const char *s, size_t len);

/* True for the 36-character text form of a uuid (hex digits, dashes at 8-13-18-23). */
bool auth_uuid_valid(const char *s);

#endif
