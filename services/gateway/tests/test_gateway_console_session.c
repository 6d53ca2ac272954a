/*
 * The admin console's session cookie (services/gateway/console_session.c):
 * parsing the Cookie fields, the CSRF rule, the Set-Cookie value and its
 * attributes; and, over a real front on a loopback port, which token a
 * request is authenticated with and what a console's Login and Logout
 * reply carries (the token in the cookie, blanked in the message).
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "connect.h"
#include "console_session.h"
#include "front.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_clock.h"
#include "raw_http.h"

#define TOKEN  "OhOY3-GWrjFpEyweQhBEbPpEe-Eul7ULCZShUHsOJJY"
#define COOKIE GW_SESSION_COOKIE "=" TOKEN
#define ORIGIN "http://127.0.0.1:8080"
#define HOST   "127.0.0.1:8080"

/* ---- pure ------------------------------------------------------------------------- */

static int find(const char *line, const char **tok, size_t *len)
{
        const char *lines[1] = {line};
        return gw_console_cookie(lines, 1, tok, len);
}

static void test_cookie_parsing(void **state)
{
        const char *tok = NULL;
        size_t len = 0;
        (void)state;
        assert_int_equal(find(COOKIE, &tok, &len), 1);
        assert_int_equal(len, strlen(TOKEN));
        assert_memory_equal(tok, TOKEN, len);
        assert_int_equal(find("a=b; " COOKIE "; c=d", &tok, &len), 1);
        assert_memory_equal(tok, TOKEN, len);
        assert_int_equal(find("a=b;" COOKIE "  ", &tok, &len), 1);
        assert_int_equal(len, strlen(TOKEN));

        /* absent: other cookies, look-alike names */
        assert_int_equal(find("a=b; c=d", &tok, &len), 0);
        assert_int_equal(find("", &tok, &len), 0);
        assert_int_equal(find("keelson_session=" TOKEN, &tok, &len), 0);
        assert_int_equal(find("__Host-keelson_sessionx=" TOKEN, &tok, &len), 0);
        assert_int_equal(find("x__Host-keelson_session=" TOKEN, &tok, &len), 0);

        /* refused: twice, empty, not a token */
        assert_int_equal(find(COOKIE "; " COOKIE, &tok, &len), -1);
        assert_null(tok);
        assert_int_equal(find(GW_SESSION_COOKIE "=", &tok, &len), -1);
        assert_int_equal(find(GW_SESSION_COOKIE, &tok, &len), -1);
        assert_int_equal(find(GW_SESSION_COOKIE "=\"" TOKEN "\"", &tok, &len), -1);
        assert_int_equal(find(GW_SESSION_COOKIE "=abc def", &tok, &len), -1);
        assert_int_equal(find(GW_SESSION_COOKIE "=a+b/c=", &tok, &len), -1);

        /* the same cookie in two fields (HTTP/2 splits Cookie) is also twice */
        const char *two[2] = {"a=b", COOKIE};
        assert_int_equal(gw_console_cookie(two, 2, &tok, &len), 1);
        const char *dup[2] = {COOKIE, COOKIE};
        assert_int_equal(gw_console_cookie(dup, 2, &tok, &len), -1);

        /* longer than any token */
        char big[GW_TOKEN_MAX + 64];
        int n = snprintf(big, sizeof(big), "%s=", GW_SESSION_COOKIE);
        memset(big + n, 'a', GW_TOKEN_MAX + 1);
        big[n + GW_TOKEN_MAX + 1] = '\0';
        assert_int_equal(find(big, &tok, &len), -1);
}

static void test_csrf_rule(void **state)
{
        (void)state;
        assert_int_equal(gw_console_csrf("1", ORIGIN, HOST, "same-origin"), GW_CONSOLE_OK);
        assert_int_equal(gw_console_csrf("1", NULL, HOST, NULL), GW_CONSOLE_OK);
        assert_int_equal(gw_console_csrf("1", "https://127.0.0.1:8080", HOST, NULL), GW_CONSOLE_OK);
        assert_int_equal(
            gw_console_csrf("1", "HTTP://Console.Example.com", "console.example.com", NULL),
            GW_CONSOLE_OK);

        /* the header is what a cross-site form cannot send */
        assert_int_equal(gw_console_csrf(NULL, ORIGIN, HOST, "same-origin"),
                         GW_CONSOLE_NOT_CONSOLE);
        assert_int_equal(gw_console_csrf("0", ORIGIN, HOST, NULL), GW_CONSOLE_NOT_CONSOLE);
        assert_int_equal(gw_console_csrf("true", ORIGIN, HOST, NULL), GW_CONSOLE_NOT_CONSOLE);

        /* another origin, an opaque one, another port, another scheme, no Host to compare */
        static const char *const origins[] = {"http://evil.example",    "null",
                                              "http://127.0.0.1:8081",  "ftp://127.0.0.1:8080",
                                              "http://127.0.0.1:8080/", "127.0.0.1:8080"};
        for (size_t i = 0; i < sizeof(origins) / sizeof(origins[0]); i++) {
                assert_int_equal(gw_console_csrf("1", origins[i], HOST, NULL),
                                 GW_CONSOLE_CROSS_SITE);
        }
        assert_int_equal(gw_console_csrf("1", ORIGIN, NULL, NULL), GW_CONSOLE_CROSS_SITE);
        assert_int_equal(gw_console_csrf("1", ORIGIN, HOST, "cross-site"), GW_CONSOLE_CROSS_SITE);
        assert_int_equal(gw_console_csrf("1", ORIGIN, HOST, "same-site"), GW_CONSOLE_CROSS_SITE);
        assert_int_equal(gw_console_csrf("1", NULL, HOST, "none"), GW_CONSOLE_CROSS_SITE);
}

static void test_set_cookie_attributes(void **state)
{
        char out[GW_SET_COOKIE_MAX];
        (void)state;
        int n = gw_console_set_cookie(out, sizeof(out), TOKEN, 3600);
        assert_true(n > 0);
        assert_int_equal((size_t)n, strlen(out));
        assert_string_equal(out,
                            COOKIE "; Max-Age=3600; Path=/; HttpOnly; Secure; SameSite=Strict");

        /* an expiry already past still sets a cookie the browser keeps a moment */
        assert_true(gw_console_set_cookie(out, sizeof(out), TOKEN, -5) > 0);
        assert_non_null(strstr(out, "; Max-Age=1;"));

        /* clearing */
        assert_true(gw_console_set_cookie(out, sizeof(out), NULL, 0) > 0);
        assert_string_equal(out, GW_SESSION_COOKIE
                            "=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Strict");

        /* never a value that could end the attribute list early, never truncated */
        assert_int_equal(gw_console_set_cookie(out, sizeof(out), "a; Domain=evil", 60), -1);
        assert_int_equal(gw_console_set_cookie(out, sizeof(out), "", 60), -1);
        assert_int_equal(gw_console_set_cookie(out, 20, TOKEN, 60), -1);
}

static void test_refusal_messages(void **state)
{
        (void)state;
        assert_string_equal(gw_console_refusal_message(GW_CONSOLE_NO_TOKEN),
                            "missing bearer token");
        assert_string_equal(gw_console_refusal_message(GW_CONSOLE_BAD_BEARER),
                            "missing bearer token");
        assert_non_null(
            strstr(gw_console_refusal_message(GW_CONSOLE_NOT_CONSOLE), "X-Keelson-Console: 1"));
        assert_non_null(strstr(gw_console_refusal_message(GW_CONSOLE_CROSS_SITE), "origin"));
}

/* ---- over a front ----------------------------------------------------------------- */

static struct event_base *base;
static gw_front *front;
static pthread_t thread;
static int port;

/* /token: "rc=<refusal> tok=<token>"; /login and /logout: a console reply made of a message. */
static void on_request(gw_req *r, void *arg)
{
        (void)arg;
        char body[GW_TOKEN_MAX + 64];
        int n = 0;
        const char *path = gw_req_path(r);
        if (strcmp(path, "/token") == 0) {
                const char *tok = NULL;
                size_t len = 0;
                int rc = gw_console_caller_token(r, &tok, &len);
                n = snprintf(body, sizeof(body), "rc=%d tok=%.*s", rc, (int)len,
                             tok != NULL ? tok : "");
        } else if (strcmp(path, "/login") == 0) {
                Keelson__Auth__V1__LoginResponse m = KEELSON__AUTH__V1__LOGIN_RESPONSE__INIT;
                char token[] = TOKEN;
                m.session_token = token;
                m.expires_at_unix_ms = ks_now_ms() + 7200 * 1000;
                gw_console_reply(r, "keelson.auth.v1.AuthService/Login", &m.base);
                n = snprintf(body, sizeof(body), "body-token=[%s]", m.session_token);
        } else {
                Keelson__Auth__V1__LogoutResponse m = KEELSON__AUTH__V1__LOGOUT_RESPONSE__INIT;
                gw_console_reply(r, GW_CONSOLE_LOGOUT, &m.base);
                n = snprintf(body, sizeof(body), "logged out");
        }
        gw_req_reply(r, 200, "text/plain", body, (size_t)n);
}

static void *loop_main(void *arg)
{
        (void)arg;
        event_base_loop(base, EVLOOP_NO_EXIT_ON_EMPTY);
        return NULL;
}

static int setup(void **state)
{
        (void)state;
        static const gw_front_limits lim = {
            .head_max = 8192,
            .body_max = 1024,
            .request_ms = 5000,
            .idle_ms = 5000,
            .conns_max = 16,
            .conns_per_ip_max = 16,
            .h2_streams_max = 16,
        };
        if (evthread_use_pthreads() != 0 || (base = event_base_new()) == NULL ||
            gw_front_new(&front, base, "127.0.0.1", 0, &lim, on_request, NULL) != 0) {
                return -1;
        }
        port = gw_front_port(front);
        return pthread_create(&thread, NULL, loop_main, NULL);
}

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
        gw_front_free(front);
        front = NULL;
        event_base_loopbreak(base);
}

static int teardown(void **state)
{
        (void)state;
        event_base_once(base, -1, EV_TIMEOUT, stop_cb, NULL, NULL);
        pthread_join(thread, NULL);
        event_base_free(base);
        return 0;
}

static void post(const char *path, const char *headers, raw_reply *r)
{
        char req[2048];
        snprintf(req, sizeof(req),
                 "POST %s HTTP/1.1\r\nHost: " HOST "\r\n%sContent-Length: 2\r\n"
                 "Connection: close\r\n\r\n{}",
                 path, headers);
        raw_exchange(port, req, 1, r);
}

static void assert_token_rc(const char *headers, int rc, const char *tok)
{
        raw_reply r;
        char want[GW_TOKEN_MAX + 64];
        post("/token", headers, &r);
        assert_int_equal(raw_status(&r), 200);
        snprintf(want, sizeof(want), "rc=%d tok=%s", rc, tok);
        assert_non_null(strstr(r.text, want));
}

#define JSON    "Content-Type: application/json\r\n"
#define CONSOLE "X-Keelson-Console: 1\r\n"
#define CK      "Cookie: " COOKIE "\r\n"

static void test_which_token_authenticates(void **state)
{
        (void)state;
        /* a bearer token decides alone, cookie or not */
        assert_token_rc("Authorization: Bearer abc\r\n" CK, GW_CONSOLE_OK, "abc");
        assert_token_rc("Authorization: Basic abc\r\n" JSON CONSOLE CK, GW_CONSOLE_BAD_BEARER, "");
        /* the cookie, with the console's header, from its origin, with JSON */
        assert_token_rc(JSON CONSOLE CK, GW_CONSOLE_OK, TOKEN);
        assert_token_rc(JSON CONSOLE CK "Origin: " ORIGIN "\r\nSec-Fetch-Site: same-origin\r\n",
                        GW_CONSOLE_OK, TOKEN);
        assert_token_rc("Content-Type: application/json; charset=utf-8\r\n" CONSOLE
                        "Cookie: a=b\r\nCookie: " COOKIE "\r\n",
                        GW_CONSOLE_OK, TOKEN);
        /* and not otherwise */
        assert_token_rc(JSON, GW_CONSOLE_NO_TOKEN, "");
        assert_token_rc(JSON CK, GW_CONSOLE_NOT_CONSOLE, "");
        assert_token_rc(JSON CONSOLE CK "Origin: http://evil.example\r\n", GW_CONSOLE_CROSS_SITE,
                        "");
        assert_token_rc(JSON CONSOLE CK "Sec-Fetch-Site: cross-site\r\n", GW_CONSOLE_CROSS_SITE,
                        "");
        assert_token_rc("Content-Type: application/proto\r\n" CONSOLE CK, GW_CONSOLE_NOT_JSON, "");
        assert_token_rc(CONSOLE CK, GW_CONSOLE_NOT_JSON, "");
        assert_token_rc(JSON CONSOLE CK CK, GW_CONSOLE_BAD_COOKIE, "");
        assert_token_rc(JSON CONSOLE "Cookie: " GW_SESSION_COOKIE "=a;b\r\n", GW_CONSOLE_OK, "a");
        assert_token_rc(JSON CONSOLE "Cookie: " GW_SESSION_COOKIE "=a.b\r\n", GW_CONSOLE_BAD_COOKIE,
                        "");
}

static void test_login_reply_moves_the_token(void **state)
{
        raw_reply r;
        (void)state;
        /* a console's Login: the cookie, HttpOnly and the rest, and a blank token in the body */
        post("/login", CONSOLE "Origin: " ORIGIN "\r\n", &r);
        assert_int_equal(raw_status(&r), 200);
        const char *sc = strstr(r.text, "Set-Cookie: " COOKIE "; Max-Age=");
        assert_non_null(sc);
        const char *eol = strstr(sc, "\r\n");
        assert_non_null(strstr(sc, "; Path=/; HttpOnly; Secure; SameSite=Strict\r\n"));
        assert_true(strstr(sc, "; Path=/; HttpOnly; Secure; SameSite=Strict\r\n") < eol);
        long max_age = strtol(sc + strlen("Set-Cookie: " COOKIE "; Max-Age="), NULL, 10);
        assert_true(max_age > 3600 && max_age <= 7200);
        assert_non_null(strstr(r.text, "body-token=[]"));
        assert_null(strstr(strstr(r.text, "\r\n\r\n"), TOKEN));

        /* from another origin: no cookie, and still no token in the body */
        post("/login", CONSOLE "Origin: http://evil.example\r\n", &r);
        assert_null(strstr(r.text, "Set-Cookie"));
        assert_non_null(strstr(r.text, "body-token=[]"));

        /* not a console request: the reply is the API's, token and all */
        post("/login", "", &r);
        assert_null(strstr(r.text, "Set-Cookie"));
        assert_non_null(strstr(r.text, "body-token=[" TOKEN "]"));
}

static void test_logout_clears_the_cookie(void **state)
{
        raw_reply r;
        (void)state;
        post("/logout", CONSOLE CK, &r);
        assert_non_null(strstr(r.text,
                               "Set-Cookie: " GW_SESSION_COOKIE
                               "=; Max-Age=0; Path=/; HttpOnly; Secure; SameSite=Strict\r\n"));
        post("/logout", "Authorization: Bearer abc\r\n", &r);
        assert_null(strstr(r.text, "Set-Cookie"));
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_cookie_parsing),
            cmocka_unit_test(test_csrf_rule),
            cmocka_unit_test(test_set_cookie_attributes),
            cmocka_unit_test(test_refusal_messages),
            cmocka_unit_test_setup_teardown(test_which_token_authenticates, setup, teardown),
            cmocka_unit_test_setup_teardown(test_login_reply_moves_the_token, setup, teardown),
            cmocka_unit_test_setup_teardown(test_logout_clears_the_cookie, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
