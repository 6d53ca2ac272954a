/*
 * The admin console's static files (services/gateway/console.c): which
 * paths are console paths and what each names, the content types, entity
 * tags, and, over a real front on a loopback port, the replies a browser
 * gets: status, Content-Type, ETag and 304, HEAD, 405, the redirect and
 * every security header.
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
#include "console.h"
#include "front.h"
#include "raw_http.h"

/* ---- pure ------------------------------------------------------------------------- */

static void test_console_paths(void **state)
{
        (void)state;
        assert_true(gw_console_path("/console"));
        assert_true(gw_console_path("/console/"));
        assert_true(gw_console_path("/console/app.js"));
        assert_false(gw_console_path("/consoles"));
        assert_false(gw_console_path("/console.js"));
        assert_false(gw_console_path("/keelson.auth.v1.AuthService/Login"));
        assert_false(gw_console_path("/"));
        assert_false(gw_console_path(NULL));
}

static void test_what_a_path_names(void **state)
{
        const gw_console_file *f = NULL;
        (void)state;
        assert_int_equal(gw_console_find("/console", &f), GW_CONSOLE_REDIRECT);
        assert_null(f);

        /* the root and every page are index.html */
        static const char *const pages[] = {"/console/", "/console/members", "/console/keys/",
                                            "/console/a/b/c"};
        for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
                assert_int_equal(gw_console_find(pages[i], &f), GW_CONSOLE_FILE);
                assert_string_equal(f->name, GW_CONSOLE_INDEX);
        }
        assert_int_equal(gw_console_find("/console/app.js", &f), GW_CONSOLE_FILE);
        assert_string_equal(f->name, "app.js");
        assert_int_equal(gw_console_find("/console/console.css", &f), GW_CONSOLE_FILE);
        assert_int_equal(gw_console_find("/console/index.html", &f), GW_CONSOLE_FILE);

        /* a file that is not embedded, or any path that tries to get out or hide */
        static const char *const missing[] = {
            "/console/nope.js",           "/console/x/app.js", "/console/../etc/passwd",
            "/console/./app.js",          "/console//app.js",  "/console/.env",
            "/console/app.js/",           "/console/app%2ejs", "/console/a b",
            "/console/app.js\\",          "/console/%2e%2e/x", "/console/members/..",
            "/console/a/b/c/d/e/f/g/h/i",
        };
        for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
                assert_int_equal(gw_console_find(missing[i], &f), GW_CONSOLE_MISSING);
                assert_null(f);
        }
        assert_int_equal(gw_console_find("/keelson.auth.v1.AuthService/Login", &f),
                         GW_CONSOLE_MISSING);
}

static void test_content_types(void **state)
{
        (void)state;
        assert_string_equal(gw_console_content_type("index.html"), "text/html; charset=utf-8");
        assert_string_equal(gw_console_content_type("app.js"), "text/javascript; charset=utf-8");
        assert_string_equal(gw_console_content_type("x.MJS"), "text/javascript; charset=utf-8");
        assert_string_equal(gw_console_content_type("console.css"), "text/css; charset=utf-8");
        assert_string_equal(gw_console_content_type("favicon.svg"), "image/svg+xml");
        assert_string_equal(gw_console_content_type("a.png"), "image/png");
        assert_string_equal(gw_console_content_type("data.bin"), "application/octet-stream");
        assert_string_equal(gw_console_content_type("README"), "application/octet-stream");
        assert_string_equal(gw_console_content_type(NULL), "application/octet-stream");
}

static void test_every_embedded_file(void **state)
{
        (void)state;
        assert_true(gw_console_files_count >= 3);
        for (size_t i = 0; i < gw_console_files_count; i++) {
                const gw_console_file *f = &gw_console_files[i];
                assert_true(f->len > 0);
                assert_int_equal(strlen(f->etag), 34); /* quotes and 32 hex digits */
                assert_int_equal(f->etag[0], '"');
                /* a type the browser runs or renders, never a guess */
                assert_string_not_equal(gw_console_content_type(f->name),
                                        "application/octet-stream");
                char path[256];
                snprintf(path, sizeof(path), "/console/%s", f->name);
                const gw_console_file *found = NULL;
                assert_int_equal(gw_console_find(path, &found), GW_CONSOLE_FILE);
                assert_ptr_equal(found, f);
        }
}

static void test_etag_match(void **state)
{
        const char *etag = "\"0123456789abcdef0123456789abcdef\"";
        (void)state;
        assert_true(gw_console_etag_match(etag, etag));
        assert_true(gw_console_etag_match("*", etag));
        assert_true(gw_console_etag_match("W/\"0123456789abcdef0123456789abcdef\"", etag));
        assert_true(gw_console_etag_match("\"x\", \"0123456789abcdef0123456789abcdef\"", etag));
        assert_false(gw_console_etag_match("\"x\"", etag));
        assert_false(
            gw_console_etag_match("0123456789abcdef0123456789abcdef", etag)); /* no quotes */
        assert_false(
            gw_console_etag_match("\"0123456789abcdef0123456789abcde", etag)); /* unterminated */
        assert_false(gw_console_etag_match("", etag));
        assert_false(gw_console_etag_match(NULL, etag));
}

/* ---- served over a front ---------------------------------------------------------- */

static struct event_base *base;
static gw_front *front;
static pthread_t thread;
static int port;

static void on_request(gw_req *r, void *arg)
{
        (void)arg;
        gw_console_serve(r, "test-request");
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

/* One request on its own connection, closed by the server after the reply. */
static void get(const char *method, const char *path, const char *extra, raw_reply *r)
{
        char req[1024];
        snprintf(req, sizeof(req),
                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sConnection: close\r\n\r\n", method, path,
                 extra != NULL ? extra : "");
        raw_exchange(port, req, 1, r);
}

static void assert_security_headers(const char *text)
{
        assert_non_null(strstr(text, "Content-Security-Policy: " GW_CONSOLE_CSP "\r\n"));
        assert_null(strstr(text, "unsafe-inline"));
        assert_null(strstr(text, "unsafe-eval"));
        assert_non_null(strstr(text, "default-src 'none'"));
        assert_non_null(strstr(text, "frame-ancestors 'none'"));
        assert_non_null(strstr(text, "X-Content-Type-Options: nosniff\r\n"));
        assert_non_null(strstr(text, "Referrer-Policy: no-referrer\r\n"));
        assert_non_null(strstr(text, "X-Frame-Options: DENY\r\n"));
}

static void test_index_and_pages(void **state)
{
        raw_reply r;
        (void)state;
        const gw_console_file *index = NULL;
        assert_int_equal(gw_console_find("/console/", &index), GW_CONSOLE_FILE);
        static const char *const paths[] = {"/console/", "/console/members", "/console/audit/"};
        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
                get("GET", paths[i], NULL, &r);
                assert_int_equal(raw_status(&r), 200);
                assert_non_null(strstr(r.text, "Content-Type: text/html; charset=utf-8\r\n"));
                assert_non_null(strstr(r.text, "Cache-Control: no-cache\r\n"));
                char etag[64];
                snprintf(etag, sizeof(etag), "ETag: %s\r\n", index->etag);
                assert_non_null(strstr(r.text, etag));
                assert_security_headers(r.text);
                assert_non_null(strstr(r.text, "<!doctype html>"));
        }
}

static void test_files_types_and_missing(void **state)
{
        raw_reply r;
        (void)state;
        get("HEAD", "/console/app.js", NULL, &r);
        assert_int_equal(raw_status(&r), 200);
        assert_non_null(strstr(r.text, "Content-Type: text/javascript; charset=utf-8\r\n"));
        assert_security_headers(r.text);
        const gw_console_file *f = NULL;
        assert_int_equal(gw_console_find("/console/app.js", &f), GW_CONSOLE_FILE);
        char len[64];
        snprintf(len, sizeof(len), "Content-Length: %zu\r\n", f->len);
        assert_non_null(strstr(r.text, len)); /* HEAD: the length, not the body */
        assert_non_null(strstr(r.text, "\r\n\r\n"));
        assert_string_equal(strstr(r.text, "\r\n\r\n"), "\r\n\r\n");

        get("GET", "/console/console.css", NULL, &r);
        assert_int_equal(raw_status(&r), 200);
        assert_non_null(strstr(r.text, "Content-Type: text/css; charset=utf-8\r\n"));

        get("GET", "/console/missing.js", NULL, &r);
        assert_int_equal(raw_status(&r), 404);
        assert_non_null(strstr(r.text, "\"code\":\"not_found\""));
        assert_security_headers(r.text);

        get("GET", "/console/../console/app.js", NULL, &r);
        assert_true(raw_status(&r) == 404 || raw_status(&r) == 400); /* the front, or us */
}

static void test_not_modified(void **state)
{
        raw_reply r;
        char inm[128];
        const gw_console_file *f = NULL;
        (void)state;
        assert_int_equal(gw_console_find("/console/app.js", &f), GW_CONSOLE_FILE);
        snprintf(inm, sizeof(inm), "If-None-Match: %s\r\n", f->etag);
        get("GET", "/console/app.js", inm, &r);
        assert_int_equal(raw_status(&r), 304);
        assert_null(strstr(r.text, "Content-Length"));
        assert_string_equal(strstr(r.text, "\r\n\r\n"), "\r\n\r\n"); /* no body */
        assert_security_headers(r.text);

        get("GET", "/console/app.js", "If-None-Match: \"stale\"\r\n", &r);
        assert_int_equal(raw_status(&r), 200);
}

static void test_redirect_and_methods(void **state)
{
        raw_reply r;
        (void)state;
        get("GET", "/console", NULL, &r);
        assert_int_equal(raw_status(&r), 308);
        assert_non_null(strstr(r.text, "Location: /console/\r\n"));

        get("POST", "/console/", "Content-Length: 0\r\n", &r);
        assert_int_equal(raw_status(&r), 405);
        assert_non_null(strstr(r.text, "Allow: GET, HEAD\r\n"));
        assert_security_headers(r.text);
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_console_paths),
            cmocka_unit_test(test_what_a_path_names),
            cmocka_unit_test(test_content_types),
            cmocka_unit_test(test_every_embedded_file),
            cmocka_unit_test(test_etag_match),
            cmocka_unit_test_setup_teardown(test_index_and_pages, setup, teardown),
            cmocka_unit_test_setup_teardown(test_files_types_and_missing, setup, teardown),
            cmocka_unit_test_setup_teardown(test_not_modified, setup, teardown),
            cmocka_unit_test_setup_teardown(test_redirect_and_methods, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
