/*
 * TLS on the gateway's port (services/gateway/tls.c), on gateways of the
 * test's own with certificates made here by the openssl tool (EC P-256,
 * self-signed for 127.0.0.1):
 *
 * - ALPN: a client offering h2 gets HTTP/2, one offering only http/1.1
 *   gets HTTP/1.1; both are served; cleartext on the TLS port is not;
 * - the protocol floor: with KEELSON_GATEWAY_TLS_MIN_VERSION=1.3 a client
 *   that stops at TLS 1.2 is refused, and the default (1.2) serves it;
 * - SIGHUP: new connections get the new certificate, a connection opened
 *   before goes on serving; a reload from a broken key is refused and the
 *   certificate in use stays.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "it_support.h"

#define WHOAMI    "/keelson.auth.v1.AuthService/WhoAmI"
#define TOKEN_MAX 512
#define PATH_LEN  700
#define DIR_LEN   512
#define WAIT_MS   5000

static it_stack g_stack;
static it_gateway g_gw;
static char g_dir[DIR_LEN];
static char g_token[TOKEN_MAX];
static char g_user_id[64];
static char g_url[300]; /* https://127.0.0.1:port */

static void path_of(char *out, const char *name)
{
        snprintf(out, PATH_LEN, "%s/%s", g_dir, name);
}

/* A self-signed certificate for 127.0.0.1 and its key: NAME-cert.pem, NAME-key.pem. */
static int make_cert(const char *name)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
                 "-subj /CN=keelson-test-%s -addext subjectAltName=IP:127.0.0.1 "
                 "-keyout %s/%s-key.pem -out %s/%s-cert.pem >/dev/null 2>&1",
                 name, g_dir, name, g_dir, name);
        return system(cmd) == 0 ? 0 : -1;
}

static int copy_file(const char *from, const char *to)
{
        char cmd[2 * PATH_LEN + 16];
        snprintf(cmd, sizeof(cmd), "cp %s %s", from, to);
        return system(cmd) == 0 ? 0 : -1;
}

/* The certificate the gateway serves (cert.pem, key.pem) becomes NAME's. */
static int serve_cert(const char *name)
{
        char from[PATH_LEN], to[PATH_LEN], n[64];
        snprintf(n, sizeof(n), "%s-cert.pem", name);
        path_of(from, n);
        path_of(to, "cert.pem");
        if (copy_file(from, to) != 0) {
                return -1;
        }
        snprintf(n, sizeof(n), "%s-key.pem", name);
        path_of(from, n);
        path_of(to, "key.pem");
        return copy_file(from, to);
}

static int start_gateway(it_gateway *gw, const char *min_version)
{
        char cert[PATH_LEN + 32], key[PATH_LEN + 32], minv[64], p[PATH_LEN];
        path_of(p, "cert.pem");
        snprintf(cert, sizeof(cert), "KEELSON_GATEWAY_TLS_CERT=%s", p);
        path_of(p, "key.pem");
        snprintf(key, sizeof(key), "KEELSON_GATEWAY_TLS_KEY=%s", p);
        snprintf(minv, sizeof(minv), "KEELSON_GATEWAY_TLS_MIN_VERSION=%s", min_version);
        const char *env[] = {cert, key, minv, NULL};
        return it_gateway_start(&g_stack, env, 1, gw);
}

static int setup(void **state)
{
        (void)state;
        snprintf(g_dir, sizeof(g_dir), "%s/keelson-tls-XXXXXX",
                 getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
        if (mkdtemp(g_dir) == NULL || make_cert("a") != 0 || make_cert("b") != 0 ||
            serve_cert("a") != 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != 0 ||
            it_stack_load(&g_stack) != 0 ||
            it_new_session(g_stack.gateway_url, "tls", g_token, NULL, g_user_id) != 0 ||
            start_gateway(&g_gw, "1.2") != 0) {
                return -1;
        }
        const char *colon = strrchr(g_gw.url, ':');
        snprintf(g_url, sizeof(g_url), "https://127.0.0.1:%s", colon + 1);
        return 0;
}

static int teardown(void **state)
{
        (void)state;
        it_gateway_stop(&g_gw);
        char cmd[PATH_LEN + 16];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
        if (system(cmd) != 0) {
                fprintf(stderr, "could not remove %s\n", g_dir);
        }
        curl_global_cleanup();
        return 0;
}

typedef struct reply {
        CURLcode rc;
        long status, version, connects;
        char body[2048];
        size_t len;
} reply;

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
        reply *r = arg;
        size_t len = size * n, room = sizeof(r->body) - 1 - r->len;
        memcpy(r->body + r->len, p, len < room ? len : room);
        r->len += len < room ? len : room;
        r->body[r->len] = '\0';
        return len;
}

typedef struct client {
        CURL *h;
        struct curl_slist *headers;
        char auth[TOKEN_MAX + 32];
} client;

/* A handle for WhoAmI at url, trusting the certificate NAME-cert.pem. */
static void client_new(client *c, const char *url, const char *trust, long version)
{
        char full[400], ca[PATH_LEN], n[64];
        memset(c, 0, sizeof(*c));
        c->h = curl_easy_init();
        assert_non_null(c->h);
        snprintf(full, sizeof(full), "%s%s", url, WHOAMI);
        snprintf(n, sizeof(n), "%s-cert.pem", trust);
        path_of(ca, n);
        snprintf(c->auth, sizeof(c->auth), "Authorization: Bearer %s", g_token);
        c->headers = curl_slist_append(NULL, "Content-Type: application/json");
        c->headers = curl_slist_append(c->headers, c->auth);
        curl_easy_setopt(c->h, CURLOPT_URL, full);
        curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, "{}");
        curl_easy_setopt(c->h, CURLOPT_HTTP_VERSION, version);
        curl_easy_setopt(c->h, CURLOPT_CAINFO, ca);
        curl_easy_setopt(c->h, CURLOPT_CAPATH, NULL);
        curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(c->h, CURLOPT_TIMEOUT_MS, 10000L);
}

static void client_call(client *c, reply *r)
{
        memset(r, 0, sizeof(*r));
        curl_easy_setopt(c->h, CURLOPT_WRITEDATA, r);
        r->rc = curl_easy_perform(c->h);
        curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &r->status);
        curl_easy_getinfo(c->h, CURLINFO_HTTP_VERSION, &r->version);
        curl_easy_getinfo(c->h, CURLINFO_NUM_CONNECTS, &r->connects);
}

static void client_free(client *c)
{
        curl_easy_cleanup(c->h);
        curl_slist_free_all(c->headers);
}

static void whoami(const char *url, const char *trust, long version, reply *r)
{
        client c;
        client_new(&c, url, trust, version);
        client_call(&c, r);
        client_free(&c);
}

static void test_alpn_h2_and_http1(void **state)
{
        (void)state;
        reply r;
        whoami(g_url, "a", CURL_HTTP_VERSION_2TLS, &r); /* offers h2 and http/1.1 */
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.version, CURL_HTTP_VERSION_2_0);
        assert_non_null(strstr(r.body, g_user_id));

        whoami(g_url, "a", CURL_HTTP_VERSION_1_1, &r); /* offers http/1.1 only */
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.version, CURL_HTTP_VERSION_1_1);
        assert_non_null(strstr(r.body, g_user_id));

        /* Cleartext to the TLS port: no HTTP answer. */
        char plain[300];
        const char *colon = strrchr(g_gw.url, ':');
        snprintf(plain, sizeof(plain), "http://127.0.0.1:%s", colon + 1);
        whoami(plain, "a", CURL_HTTP_VERSION_1_1, &r);
        assert_true(r.rc != CURLE_OK || r.status != 200);

        /* A certificate the client does not trust: refused by the client. */
        whoami(g_url, "b", CURL_HTTP_VERSION_2TLS, &r);
        assert_int_equal(r.rc, CURLE_PEER_FAILED_VERIFICATION);
}

static void test_protocol_floor(void **state)
{
        (void)state;
        it_gateway strict;
        assert_int_equal(start_gateway(&strict, "1.3"), 0);
        const char *colon = strrchr(strict.url, ':');
        char url[300];
        snprintf(url, sizeof(url), "https://127.0.0.1:%s", colon + 1);
        client c;
        reply r;
        client_new(&c, url, "a", CURL_HTTP_VERSION_2TLS);
        curl_easy_setopt(c.h, CURLOPT_SSLVERSION,
                         (long)(CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2));
        client_call(&c, &r);
        assert_int_equal(r.rc, CURLE_SSL_CONNECT_ERROR);
        client_free(&c);
        it_gateway_stop(&strict);

        /* The default floor, 1.2, serves the same client. */
        client_new(&c, g_url, "a", CURL_HTTP_VERSION_2TLS);
        curl_easy_setopt(c.h, CURLOPT_SSLVERSION,
                         (long)(CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2));
        client_call(&c, &r);
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
        client_free(&c);

        /* A gateway with a certificate but no key does not start. */
        char cert[PATH_LEN + 32], p[PATH_LEN];
        path_of(p, "cert.pem");
        snprintf(cert, sizeof(cert), "KEELSON_GATEWAY_TLS_CERT=%s", p);
        const char *env[] = {cert, NULL};
        it_gateway broken;
        assert_int_equal(it_gateway_start(&g_stack, env, 0, &broken), -1);
}

/* Waits for the gateway's log to hold n lines with needle. */
static void wait_log(const char *needle, int n)
{
        const char *needles[] = {needle};
        for (int waited = 0; it_file_lines_with(g_gw.log_path, needles, 1) < n; waited += 50) {
                assert_true(waited < WAIT_MS);
                it_sleep_ms(50);
        }
}

static void test_sighup_reload(void **state)
{
        (void)state;
        reply r;
        client before;
        client_new(&before, g_url, "a", CURL_HTTP_VERSION_2TLS);
        client_call(&before, &r);
        assert_int_equal(r.status, 200);

        /* Certificate b on disk, then SIGHUP: new connections get it. */
        assert_int_equal(serve_cert("b"), 0);
        assert_int_equal(kill(g_gw.pid, SIGHUP), 0);
        wait_log("TLS certificate reloaded", 1);
        whoami(g_url, "b", CURL_HTTP_VERSION_2TLS, &r);
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
        whoami(g_url, "a", CURL_HTTP_VERSION_2TLS, &r);
        assert_int_equal(r.rc, CURLE_PEER_FAILED_VERIFICATION);

        /* The connection opened before the reload goes on serving. */
        client_call(&before, &r);
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
        assert_int_equal(r.connects, 0);
        client_free(&before);

        /* A broken key: the reload is refused and certificate b stays. */
        char key[PATH_LEN];
        path_of(key, "key.pem");
        FILE *f = fopen(key, "w");
        assert_non_null(f);
        fputs("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n", f);
        fclose(f);
        assert_int_equal(kill(g_gw.pid, SIGHUP), 0);
        wait_log("TLS reload failed", 1);
        whoami(g_url, "b", CURL_HTTP_VERSION_2TLS, &r);
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 200);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_alpn_h2_and_http1),
            cmocka_unit_test(test_protocol_floor),
            cmocka_unit_test(test_sighup_reload),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
