/*
 * console_session.c: the admin console's session, kept where page scripts
 * cannot read it (docs/security.md, "The admin console").
 *
 * A console request is one with `X-Keelson-Console: 1`. A cross-site form
 * cannot set that header, and a cross-origin fetch that sets it needs a
 * CORS preflight the gateway never grants (OPTIONS: 405), so only the
 * console's own pages send it.
 *
 * - A reply of a console request that carries a session token (Login,
 *   SwitchTenant, AcceptInvitation: a `session_token` field) has it moved
 *   into the cookie `__Host-keelson_session` (HttpOnly, Secure,
 *   SameSite=Strict, Path=/, Max-Age until the session expires) and blanked
 *   in the JSON body. The cookie is set only when the request passes the
 *   CSRF rule below; the body loses the token in every case.
 * - Logout by a console request clears the cookie (Max-Age=0) as well as
 *   ending the session in auth.
 * - The caller's token is the `Authorization: Bearer` one when that header
 *   is present (the cookie is then ignored). Without it, the cookie's token
 *   is used only when the CSRF rule holds: `X-Keelson-Console: 1`; an
 *   `Origin` header, when present, naming the gateway's own host (the
 *   request's Host, or HTTP/2's :authority) over http or https and not
 *   "null"; a `Sec-Fetch-Site` header, when present, of `same-origin`; a
 *   JSON body (application/json), so that the reply is one whose tokens
 *   this module blanks. The cookie must appear once: two cookies of that
 *   name (or a malformed value) are refused, never guessed between.
 *
 * The pure functions (cookie parsing, the CSRF rule, Set-Cookie) are what
 * the unit tests call; the others read a gw_req.
 */
#ifndef GW_CONSOLE_SESSION_H
#define GW_CONSOLE_SESSION_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "front.h"

#define GW_SESSION_COOKIE       "__Host-keelson_session"
#define GW_CONSOLE_HEADER       "X-Keelson-Console"
#define GW_COOKIE_LINES_MAX     16  /* Cookie fields read (HTTP/2 splits them) */
#define GW_SET_COOKIE_MAX       640 /* a Set-Cookie value: name, token, attributes */
#define GW_CONSOLE_LOGOUT       "keelson.auth.v1.AuthService/Logout"
#define GW_SESSION_TOKEN_FIELD  "session_token"
#define GW_SESSION_EXPIRY_FIELD "expires_at_unix_ms"

/* Why no caller token was found (gw_console_caller_token); 0 is success. */
typedef enum gw_console_refusal {
        GW_CONSOLE_OK = 0,
        GW_CONSOLE_NO_TOKEN = -1,    /* neither a bearer token nor the cookie */
        GW_CONSOLE_BAD_BEARER = -2,  /* an Authorization header that is not a bearer token */
        GW_CONSOLE_BAD_COOKIE = -3,  /* the cookie twice, or a value that is not a token */
        GW_CONSOLE_NOT_CONSOLE = -4, /* the cookie without X-Keelson-Console: 1 */
        GW_CONSOLE_CROSS_SITE = -5,  /* Origin or Sec-Fetch-Site from another site */
        GW_CONSOLE_NOT_JSON = -6,    /* the cookie with a body that is not JSON */
} gw_console_refusal;

/* True when the X-Keelson-Console value marks a console request ("1"). */
bool gw_console_marked(const char *value);
/*
 * The session cookie's value among n Cookie field values (each
 * "a=b; c=d"). Returns 1 with *tok, *len pointing into a line; 0 when no
 * line has the cookie; -1 when it appears twice or its value is not 1 to
 * GW_TOKEN_MAX base64url characters.
 */
int gw_console_cookie(const char *const *lines, size_t n, const char **tok, size_t *len);
/*
 * The CSRF rule for a request that would be authenticated by the cookie
 * (the header values, each NULL when absent). Returns GW_CONSOLE_OK,
 * GW_CONSOLE_NOT_CONSOLE or GW_CONSOLE_CROSS_SITE.
 */
int gw_console_csrf(const char *console, const char *origin, const char *host,
                    const char *fetch_site);
/*
 * Writes the Set-Cookie value for token (NULL: the clearing one, Max-Age=0)
 * valid max_age_s seconds (at least 1). Returns its length, or -1 when it
 * does not fit in cap or the token is not a cookie-safe token.
 */
int gw_console_set_cookie(char *out, size_t cap, const char *token, int64_t max_age_s);

/*
 * The caller's token of req: the bearer token, else the cookie under the
 * rule above. Returns GW_CONSOLE_OK with *tok, *len pointing into req, or
 * a gw_console_refusal.
 */
int gw_console_caller_token(const gw_req *req, const char **tok, size_t *len);
/* The message a refusal is answered with (401 unauthenticated). */
const char *gw_console_refusal_message(int refusal);
/*
 * A successful JSON reply of method (the envelope's name), before it is
 * serialised: for a console request, a session token in msg goes to the
 * cookie (when the CSRF rule holds) and is blanked in msg, and Logout
 * clears the cookie. Other requests, and msg NULL, are left alone.
 */
void gw_console_reply(gw_req *req, const char *method, ProtobufCMessage *msg);

#endif
