/*
 * ks_redis_url: the one KEELSON_REDIS_URL grammar (ks_redis_url.h). Every
 * accepted form parses to the parts redis-cli would use, every refused one
 * says why without repeating the password, and the connection it describes
 * really authenticates and selects its database on a redis-server this test
 * starts (with a password and an ACL user) on a free loopback port.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ks_code.h"
#include "ks_redis_url.h"

#define START_WAIT_MS 10000
#define TIMEOUT_MS    2000
#define PASSWORD      "s3cr:t@ %pw"
#define ACL_USER      "svc"
#define ACL_PASSWORD  "acl-pw"

typedef struct good {
        const char *url;
        const char *host;
        int port;
        const char *user, *password;
        int db;
} good;

static void test_accepts(void **state)
{
        (void)state;
        static const good cases[] = {
            {"redis://127.0.0.1:6380", "127.0.0.1", 6380, "", "", 0},
            {"redis://cache.internal", "cache.internal", 6379, "", "", 0},
            {"REDIS://Cache_1-a.internal/", "Cache_1-a.internal", 6379, "", "", 0},
            {"redis://h/7", "h", 6379, "", "", 7},
            {"redis://h:1/65535", "h", 1, "", "", 65535},
            {"redis://[::1]", "::1", 6379, "", "", 0},
            {"redis://[::ffff:10.0.0.1]:7000/2", "::ffff:10.0.0.1", 7000, "", "", 2},
            {"redis://:pw@h", "h", 6379, "", "pw", 0},
            {"redis://pw@h", "h", 6379, "", "pw", 0}, /* the password alone, as redis-cli */
            {"redis://gw:pw@h/", "h", 6379, "gw", "pw", 0},
            /* Credentials end at the last '@'; a user ends at the first ':'. */
            {"redis://:s3cr@t@[::1]:7000/2", "::1", 7000, "", "s3cr@t", 2},
            {"redis://u:a:b@h", "h", 6379, "u", "a:b", 0},
            /* Percent-decoding, either case of hex. */
            {"redis://us%65r:p%40ss%3a%2F%25@h", "h", 6379, "user", "p@ss:/%", 0},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const good *c = &cases[i];
                ks_redis_url u;
                char err[KS_REDIS_ERR_MAX] = "";
                if (ks_redis_url_parse(c->url, &u, err, sizeof(err)) != 0) {
                        fail_msg("%s: refused: %s", c->url, err);
                }
                assert_string_equal(u.host, c->host);
                assert_int_equal(u.port, c->port);
                assert_string_equal(u.user, c->user);
                assert_string_equal(u.password, c->password);
                assert_int_equal(u.db, c->db);
        }
}

typedef struct bad {
        const char *url;
        const char *why; /* a part of the message */
} bad;

static void test_refuses_with_a_reason(void **state)
{
        (void)state;
        static const bad cases[] = {
            {"", "expected redis://[[user]:password@]host[:port][/db]"},
            {"127.0.0.1:6379", "expected redis://"}, /* summary took this; no longer */
            {"http://h", "expected redis://"},
            {"rediss://h", "TLS"},
            {"redis://", "no host"},
            {"redis://:6379", "no host"},
            {"redis://pw@", "no host"},
            {"redis://h:", "port"},
            {"redis://h:0", "port"},
            {"redis://h:65536", "port"},
            {"redis://h:123456", "port"},
            {"redis://h:-1", "port"},
            {"redis://h:80x", "unexpected characters"},
            {"redis://h/x", "database"},
            {"redis://h/65536", "database"},
            {"redis://h/1/2", "unexpected characters"},
            {"redis://h?timeout=1", "options after '?'"},
            {"redis://h/0?db=1", "options after '?'"},
            {"redis://ho st", "unexpected characters"},
            {"redis://[::1", "brackets"},
            {"redis://[]", "brackets"},
            {"redis://[10.0.0.1]", "not an IPv6 address"},
            {"redis://[::1]x", "unexpected characters"},
            {"redis://user:@h", "a user needs a password"},
            {"redis://:@h", "password before '@' is empty"},
            {"redis://@h", "password before '@' is empty"},
            {"redis://:p%4@h", "two hex digits"},
            {"redis://:p%zz@h", "two hex digits"},
            {"redis://:p%@h", "two hex digits"},
            {"redis://:p%00w@h", "%00"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                ks_redis_url u;
                char err[KS_REDIS_ERR_MAX] = "";
                memset(&u, 0x5a, sizeof(u));
                if (ks_redis_url_parse(cases[i].url, &u, err, sizeof(err)) == 0) {
                        fail_msg("%s: accepted", cases[i].url);
                }
                if (strstr(err, cases[i].why) == NULL) {
                        fail_msg("%s: \"%s\" does not say \"%s\"", cases[i].url, err, cases[i].why);
                }
                assert_true(u.host[0] == '\0' && u.password[0] == '\0' && u.port == 0);
        }
}

static void test_limits(void **state)
{
        (void)state;
        char url[KS_REDIS_URL_MAX + 64], err[KS_REDIS_ERR_MAX];
        ks_redis_url u;

        /* A host of exactly KS_REDIS_HOST_MAX bytes fits; one more does not. */
        snprintf(url, sizeof(url), "redis://%0*d", KS_REDIS_HOST_MAX, 0);
        assert_int_equal(ks_redis_url_parse(url, &u, err, sizeof(err)), 0);
        assert_int_equal(strlen(u.host), KS_REDIS_HOST_MAX);
        snprintf(url, sizeof(url), "redis://%0*d", KS_REDIS_HOST_MAX + 1, 0);
        assert_int_equal(ks_redis_url_parse(url, &u, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "too long"));

        /* A password of KS_REDIS_PASSWORD_MAX decoded bytes fits, even written as %xx. */
        int n = snprintf(url, sizeof(url), "redis://:");
        for (int i = 0; i < KS_REDIS_PASSWORD_MAX; i++) {
                n += snprintf(url + n, sizeof(url) - (size_t)n, i % 2 ? "%%41" : "b");
        }
        snprintf(url + n, sizeof(url) - (size_t)n, "@h");
        assert_int_equal(ks_redis_url_parse(url, &u, err, sizeof(err)), 0);
        assert_int_equal(strlen(u.password), KS_REDIS_PASSWORD_MAX);
        n = snprintf(url, sizeof(url), "redis://:%0*d@h", KS_REDIS_PASSWORD_MAX + 1, 0);
        assert_int_equal(ks_redis_url_parse(url, &u, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "too long"));

        /* The whole URL is bounded before anything else is read. */
        memset(url, 'a', KS_REDIS_URL_MAX + 1);
        url[KS_REDIS_URL_MAX + 1] = '\0';
        assert_int_equal(ks_redis_url_parse(url, &u, err, sizeof(err)), -1);
        assert_non_null(strstr(err, "longer than"));
        /* A NULL or short err buffer is fine. */
        assert_int_equal(ks_redis_url_parse("redis://", &u, NULL, 0), -1);
        assert_int_equal(ks_redis_url_parse("redis://", &u, err, 4), -1);
        assert_int_equal(strlen(err), 3);
}

static void test_errors_never_show_the_password(void **state)
{
        (void)state;
        static const char *const urls[] = {
            "redis://:hunter2@",     "redis://:hunter2@h:0", "redis://u:hunter2@h/x",
            "redis://:hunter2%zz@h", "redis://:hunter2@h?x", "rediss://:hunter2@h",
        };
        for (size_t i = 0; i < sizeof(urls) / sizeof(urls[0]); i++) {
                ks_redis_url u;
                char err[KS_REDIS_ERR_MAX];
                assert_int_equal(ks_redis_url_parse(urls[i], &u, err, sizeof(err)), -1);
                assert_null(strstr(err, "hunter2"));
        }
}

/* ---- the connection, against a redis-server of this test's own ----------- */

typedef struct server {
        pid_t pid;
        int port;
} server;

static int free_port(void)
{
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int port = -1;

        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
                port = ntohs(sa.sin_port);
        }
        if (fd >= 0) {
                close(fd);
        }
        return port;
}

static pid_t spawn_redis(int port)
{
        char port_s[16];
        snprintf(port_s, sizeof(port_s), "%d", port);
        pid_t pid = fork();
        if (pid == 0) {
                int devnull = open("/dev/null", O_RDWR);
                if (devnull >= 0) {
                        dup2(devnull, STDIN_FILENO);
                        dup2(devnull, STDOUT_FILENO);
                        dup2(devnull, STDERR_FILENO);
                }
                execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
                       "--save", "", "--appendonly", "no", "--daemonize", "no", "--requirepass",
                       PASSWORD, "--user", ACL_USER, "on", ">" ACL_PASSWORD, "~*", "+@all",
                       (char *)NULL);
                _exit(127);
        }
        return pid;
}

static ks_redis_url url_of(const server *s, const char *creds, int db)
{
        char url[256], err[KS_REDIS_ERR_MAX];
        ks_redis_url u;
        snprintf(url, sizeof(url), "redis://%s127.0.0.1:%d/%d", creds, s->port, db);
        if (ks_redis_url_parse(url, &u, err, sizeof(err)) != 0) {
                fail_msg("%s: %s", url, err);
        }
        return u;
}

static int setup(void **state)
{
        server *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        s->port = free_port();
        assert_true(s->port > 0);
        s->pid = spawn_redis(s->port);
        assert_true(s->pid > 0);
        /* The password, percent-encoded: ':' '@' ' ' '%' are not URL-safe as they are. */
        ks_redis_url u = url_of(s, ":s3cr%3At%40%20%25pw@", 0);
        redisContext *c = NULL;
        char err[KS_REDIS_ERR_MAX];
        for (int waited = 0; waited < START_WAIT_MS && c == NULL; waited += 50) {
                if (ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)) != KS_OK) {
                        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
                }
        }
        if (c == NULL) {
                kill(s->pid, SIGKILL);
                waitpid(s->pid, NULL, 0);
                fail_msg("redis-server did not answer on port %d: %s", s->port, err);
        }
        redisFree(c);
        *state = s;
        return 0;
}

static int teardown(void **state)
{
        server *s = *state;
        if (s == NULL) {
                return 0; /* setup failed and stopped its server */
        }
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
        free(s);
        return 0;
}

static long long client_db(redisContext *c)
{
        /* CLIENT INFO says "... db=N ...": the database this connection selected. */
        redisReply *r = redisCommand(c, "CLIENT INFO");
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        const char *db = strstr(r->str, " db=");
        assert_non_null(db);
        long long v = strtoll(db + 4, NULL, 10);
        freeReplyObject(r);
        return v;
}

static void test_connect_authenticates_and_selects(void **state)
{
        server *s = *state;
        redisContext *c = NULL;
        char err[KS_REDIS_ERR_MAX];

        ks_redis_url u = url_of(s, ":s3cr%3At%40%20%25pw@", 5);
        assert_int_equal(ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)), KS_OK);
        assert_int_equal(client_db(c), 5);
        redisFree(c);

        /* A Redis 6 ACL user. */
        u = url_of(s, ACL_USER ":" ACL_PASSWORD "@", 3);
        assert_int_equal(ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)), KS_OK);
        redisReply *r = redisCommand(c, "ACL WHOAMI");
        assert_non_null(r);
        assert_string_equal(r->str, ACL_USER);
        freeReplyObject(r);
        assert_int_equal(client_db(c), 3);
        redisFree(c);
}

static void test_connect_reports_what_failed(void **state)
{
        server *s = *state;
        redisContext *c = (redisContext *)state;
        char err[KS_REDIS_ERR_MAX];

        ks_redis_url u = url_of(s, ":wrong-password@", 0);
        assert_int_equal(ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)),
                         KS_FAILED_PRECONDITION);
        assert_null(c);
        assert_non_null(strstr(err, "AUTH"));
        assert_null(strstr(err, "wrong-password"));

        /* No password: the server refuses the first command that needs one (SELECT). */
        u = url_of(s, "", 1);
        assert_int_equal(ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)),
                         KS_FAILED_PRECONDITION);
        assert_non_null(strstr(err, "SELECT"));
        assert_non_null(strstr(err, "NOAUTH"));

        /* A database the server does not have (16 by default). */
        u = url_of(s, ":s3cr%3At%40%20%25pw@", 16);
        assert_int_equal(ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)),
                         KS_FAILED_PRECONDITION);
        assert_non_null(strstr(err, "SELECT"));

        /* Nobody listening. */
        server gone = {.port = free_port()};
        u = url_of(&gone, "", 0);
        assert_int_equal(ks_redis_url_connect(&u, TIMEOUT_MS, &c, err, sizeof(err)),
                         KS_UNAVAILABLE);
        assert_non_null(strstr(err, "connect"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_accepts),
            cmocka_unit_test(test_refuses_with_a_reason),
            cmocka_unit_test(test_limits),
            cmocka_unit_test(test_errors_never_show_the_password),
            cmocka_unit_test(test_connect_authenticates_and_selects),
            cmocka_unit_test(test_connect_reports_what_failed),
        };
        /* The parser tests need no server; the group's setup starts it for the last two. */
        return cmocka_run_group_tests(tests, setup, teardown);
}
