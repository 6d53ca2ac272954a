/*
 * it_support: the stack's addresses from $KEELSON_IT_STACK/env (written by
 * deploy/local/stack.sh start), a small libcurl client and a libpq
 * connection. Every transfer is bounded: 30 s in total, 10 s to connect,
 * IT_BODY_MAX bytes of response body.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "it_support.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <sys/wait.h>

#include "ks_code.h"
#include "ks_topology.h"

#define IT_ENV_LINE_MAX      1024
#define IT_BODY_MAX          (16u * 1024u * 1024u)
#define IT_HEADERS_MAX       (64u * 1024u)
#define IT_TIMEOUT_S         30L
#define IT_CONNECT_TIMEOUT_S 10L

/* ---- the env file ------------------------------------------------------- */

static int copy_str(char *dst, size_t dst_len, const char *src)
{
        size_t n = strlen(src);

        if (n >= dst_len) {
                return -1;
        }
        memcpy(dst, src, n + 1);
        return 0;
}

/* An integer in [lo, hi] ended by NUL or ',' (a list's next entry). */
static int parse_ranged(const char *s, int *out, long lo, long hi)
{
        char *end = NULL;
        long v = strtol(s, &end, 10);

        if (end == s || (*end != '\0' && *end != ',') || v < lo || v > hi) {
                return -1;
        }
        *out = (int)v;
        return 0;
}

static int parse_port(const char *s, int *out)
{
        return parse_ranged(s, out, 1, 65535);
}

static int parse_pid(const char *s, int *out)
{
        return parse_ranged(s, out, 2, 4194304);
}

/* "1,2,3" into out[]; returns the count, or -1 when malformed or too many. */
static int parse_list(const char *s, int *out, int max, int (*parse)(const char *, int *))
{
        int n = 0;

        while (*s != '\0') {
                if (n == max || parse(s, &out[n]) != 0) {
                        return -1;
                }
                n++;
                s = strchr(s, ',');
                if (s == NULL) {
                        break;
                }
                s++;
        }
        return n;
}

/* "http://a,http://b" into s->gateway_urls. */
static int parse_url_list(it_stack *s, const char *val)
{
        int n = 0;

        while (*val != '\0') {
                size_t len = strcspn(val, ",");
                if (n == IT_REPLICAS_MAX || len == 0 || len >= sizeof(s->gateway_urls[0])) {
                        return -1;
                }
                memcpy(s->gateway_urls[n], val, len);
                s->gateway_urls[n][len] = '\0';
                n++;
                val += len;
                if (*val == ',') {
                        val++;
                }
        }
        s->n_gateways = n;
        return n > 0 ? 0 : -1;
}

/* The string settings of the env file: where each goes in an it_stack. */
static const struct {
        const char *key;
        size_t offset, size;
} env_strings[] = {
#define IT_ENV_STR(key, field)                                                                     \
        {                                                                                          \
                key, offsetof(it_stack, field), sizeof(((it_stack *)0)->field)                     \
        }
    IT_ENV_STR("KEELSON_IT_PG_DSN", pg_dsn),
    IT_ENV_STR("KEELSON_IT_REDIS_URL", redis_url),
    IT_ENV_STR("KEELSON_IT_BROKER_URL", broker_url),
    IT_ENV_STR("KEELSON_IT_GATEWAY_URL", gateway_url),
    IT_ENV_STR("KEELSON_IT_BIN", bin_dir),
    IT_ENV_STR("KEELSON_IT_STACK_SH", stack_sh),
    IT_ENV_STR("KEELSON_IT_SERVICE_PG_DSN", service_pg_dsn),
#undef IT_ENV_STR
};

/* A list of one number per auth replica: every such list agrees on their count. */
static int auth_list(it_stack *s, const char *val, int *out)
{
        int n = parse_list(val, out, IT_REPLICAS_MAX, out == s->auth_pids ? parse_pid : parse_port);

        if (n < 1 || (s->n_auth != 0 && s->n_auth != n)) {
                return -1;
        }
        s->n_auth = n;
        return 0;
}

static int apply_env_line(it_stack *s, const char *key, const char *val)
{
        for (size_t i = 0; i < sizeof(env_strings) / sizeof(env_strings[0]); i++) {
                if (strcmp(key, env_strings[i].key) == 0) {
                        return copy_str((char *)s + env_strings[i].offset, env_strings[i].size,
                                        val);
                }
        }
        if (strcmp(key, "KEELSON_IT_BROKER_HEALTH_PORT") == 0) {
                return parse_port(val, &s->broker_health_port);
        } else if (strcmp(key, "KEELSON_IT_GATEWAY_PID") == 0) {
                return parse_pid(val, &s->gateway_pid);
        } else if (strcmp(key, "KEELSON_IT_AUTH_HEALTH_PORTS") == 0) {
                return auth_list(s, val, s->auth_health_ports);
        } else if (strcmp(key, "KEELSON_IT_AUTH_PIDS") == 0) {
                return auth_list(s, val, s->auth_pids);
        } else if (strcmp(key, "KEELSON_IT_GATEWAY_URLS") == 0) {
                return parse_url_list(s, val);
        } else if (strcmp(key, "KEELSON_IT_GATEWAY_ADMIN_PORTS") == 0) {
                int ports[IT_REPLICAS_MAX];
                int n = parse_list(val, ports, IT_REPLICAS_MAX, parse_port);
                for (int i = 0; i < n; i++) {
                        snprintf(s->gateway_admin_urls[i], sizeof(s->gateway_admin_urls[i]),
                                 "http://127.0.0.1:%d", ports[i]);
                }
                return n < 1 ? -1 : 0;
        } else if (strcmp(key, "KEELSON_IT_GATEWAY_PIDS") == 0) {
                return parse_list(val, s->gateway_pids, IT_REPLICAS_MAX, parse_pid) < 1 ? -1 : 0;
        }
        return 0; /* a line for someone else */
}

static int read_env_file(it_stack *s, FILE *f, const char *path)
{
        char line[IT_ENV_LINE_MAX];
        char *eq;
        size_t len;

        while (fgets(line, sizeof(line), f) != NULL) {
                len = strlen(line);
                if (len > 0 && line[len - 1] == '\n') {
                        line[--len] = '\0';
                }
                eq = strchr(line, '=');
                if (len == 0 || line[0] == '#' || eq == NULL) {
                        continue;
                }
                *eq = '\0';
                if (apply_env_line(s, line, eq + 1) != 0) {
                        fprintf(stderr, "it_support: %s: bad value for %s\n", path, line);
                        return -1;
                }
        }
        return 0;
}

static int stack_complete(const it_stack *s)
{
        return s->pg_dsn[0] != '\0' && s->redis_url[0] != '\0' && s->broker_url[0] != '\0' &&
               s->gateway_url[0] != '\0' && s->broker_health_port > 0 && s->n_auth > 0 &&
               s->gateway_pid > 0 && s->gateway_admin_urls[0][0] != '\0';
}

int it_stack_load(it_stack *s)
{
        const char *dir = getenv("KEELSON_IT_STACK");
        char path[600];
        FILE *f;
        int rc;

        memset(s, 0, sizeof(*s));
        if (dir == NULL || dir[0] == '\0' || copy_str(s->dir, sizeof(s->dir), dir) != 0) {
                fprintf(stderr, "it_support: KEELSON_IT_STACK is not set (run through ctest)\n");
                return -1;
        }
        snprintf(path, sizeof(path), "%s/env", dir);
        f = fopen(path, "r");
        if (f == NULL) {
                fprintf(stderr, "it_support: cannot open %s: did the stack start?\n", path);
                return -1;
        }
        rc = read_env_file(s, f, path);
        fclose(f);
        if (rc == 0 && !stack_complete(s)) {
                fprintf(stderr, "it_support: %s lacks a KEELSON_IT_ variable\n", path);
                rc = -1;
        }
        if (rc == 0 && s->n_gateways == 0) { /* a stack from before gateway replicas */
                s->n_gateways = 1;
                memcpy(s->gateway_urls[0], s->gateway_url, sizeof(s->gateway_urls[0]));
                s->gateway_pids[0] = s->gateway_pid;
        }
        return rc;
}

/* ---- HTTP --------------------------------------------------------------- */

typedef struct buf {
        char *data;
        size_t len;
        size_t max;
} buf;

static int buf_append(buf *b, const char *p, size_t n)
{
        char *grown;

        if (n > b->max - b->len) {
                return -1;
        }
        grown = realloc(b->data, b->len + n + 1);
        if (grown == NULL) {
                return -1;
        }
        b->data = grown;
        memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
        size_t n = size * nmemb;

        return buf_append(arg, p, n) == 0 ? n : 0;
}

/* Keeps the header block of the last response only (not a "100 Continue"). */
static size_t on_header(char *p, size_t size, size_t nmemb, void *arg)
{
        buf *b = arg;
        size_t n = size * nmemb;

        if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
                b->len = 0;
        }
        return buf_append(b, p, n) == 0 ? n : 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static __thread int tl_accept_gzip; /* set by it_connect around one transfer */

static void curl_init_once(void)
{
        curl_global_init(CURL_GLOBAL_DEFAULT);
}

static struct curl_slist *request_headers(const char *content_type, const char *const *headers)
{
        struct curl_slist *list = NULL, *next;
        char line[256];

        /* "Content-Type:" with no value makes curl send none at all. */
        if (content_type == NULL) {
                snprintf(line, sizeof(line), "Content-Type:");
        } else {
                snprintf(line, sizeof(line), "Content-Type: %s", content_type);
        }
        list = curl_slist_append(list, line);
        for (size_t i = 0; list != NULL && headers != NULL && headers[i] != NULL; i++) {
                next = curl_slist_append(list, headers[i]);
                if (next == NULL) {
                        curl_slist_free_all(list);
                        return NULL;
                }
                list = next;
        }
        return list;
}

static void fill_response(CURL *c, buf *body, buf *hdrs, it_http_response *out)
{
        char *ct = NULL;

        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
        if (curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct != NULL) {
                snprintf(out->content_type, sizeof(out->content_type), "%s", ct);
        }
        if (body->data == NULL) {
                body->data = calloc(1, 1);
        }
        if (hdrs->data == NULL) {
                hdrs->data = calloc(1, 1);
        }
        out->body = body->data;
        out->body_len = body->len;
        out->headers = hdrs->data;
}

/* One transfer; body == NULL means GET. */
static int transfer(const char *base_url, const char *path, const char *content_type,
                    const void *body, size_t body_len, const char *const *headers,
                    it_http_response *out)
{
        buf rbody = {NULL, 0, IT_BODY_MAX}, rhdrs = {NULL, 0, IT_HEADERS_MAX};
        struct curl_slist *list = NULL;
        char url[1024];
        CURLcode rc;
        CURL *c;

        memset(out, 0, sizeof(*out));
        pthread_once(&curl_once, curl_init_once);
        if (snprintf(url, sizeof(url), "%s%s", base_url, path) >= (int)sizeof(url) ||
            (c = curl_easy_init()) == NULL) {
                return -1;
        }
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, IT_TIMEOUT_S);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, IT_CONNECT_TIMEOUT_S);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &rbody);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, &rhdrs);
        if (tl_accept_gzip) {
                curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "gzip");
        }
        if (body != NULL) {
                list = request_headers(content_type, headers);
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        }
        rc = curl_easy_perform(c);
        if (rc == CURLE_OK) {
                fill_response(c, &rbody, &rhdrs, out);
        } else {
                fprintf(stderr, "it_support: %s: %s\n", url, curl_easy_strerror(rc));
                free(rbody.data);
                free(rhdrs.data);
        }
        curl_slist_free_all(list);
        curl_easy_cleanup(c);
        return rc == CURLE_OK && out->body != NULL && out->headers != NULL ? 0 : -1;
}

int it_http_post(const char *base_url, const char *path, const char *content_type, const void *body,
                 size_t body_len, const char *const *headers, it_http_response *out)
{
        /* An empty body is still a POST: libcurl needs a non-NULL pointer. */
        return transfer(base_url, path, content_type, body != NULL ? body : "", body_len, headers,
                        out);
}

int it_http_get(const char *base_url, const char *path, it_http_response *out)
{
        return transfer(base_url, path, NULL, NULL, 0, NULL, out);
}

void it_http_response_free(it_http_response *r)
{
        if (r == NULL) {
                return;
        }
        free(r->body);
        free(r->headers);
        r->body = NULL;
        r->headers = NULL;
}

int it_http_header(const it_http_response *r, const char *name, char *out, size_t out_len)
{
        size_t name_len = strlen(name), n;
        const char *line = r->headers, *end, *v;

        while (line != NULL && *line != '\0') {
                end = strstr(line, "\r\n");
                if (end == NULL) {
                        end = line + strlen(line);
                }
                if ((size_t)(end - line) > name_len && line[name_len] == ':' &&
                    strncasecmp(line, name, name_len) == 0) {
                        for (v = line + name_len + 1; v < end && (*v == ' ' || *v == '\t'); v++) {
                        }
                        n = (size_t)(end - v);
                        if (n >= out_len) {
                                return -1;
                        }
                        memcpy(out, v, n);
                        out[n] = '\0';
                        return 0;
                }
                line = *end != '\0' ? end + 2 : NULL;
        }
        return -1;
}

/* ---- PostgreSQL and test data ------------------------------------------- */

PGconn *it_pg_connect(const it_stack *s)
{
        PGconn *c = PQconnectdb(s->pg_dsn);

        if (c == NULL || PQstatus(c) != CONNECTION_OK) {
                fprintf(stderr, "it_support: cannot connect to the stack's PostgreSQL: %s\n",
                        c ? PQerrorMessage(c) : "out of memory");
                PQfinish(c);
                return NULL;
        }
        return c;
}

void it_unique_email(const char *prefix, char *out, size_t out_len)
{
        unsigned char r[8] = {0};
        struct timespec ts;
        FILE *f = fopen("/dev/urandom", "rb");
        size_t got = 0;

        if (f != NULL) {
                got = fread(r, 1, sizeof(r), f);
                fclose(f);
        }
        if (got != sizeof(r)) {
                /* No /dev/urandom: the clock and the pid are unique enough. */
                clock_gettime(CLOCK_REALTIME, &ts);
                snprintf(out, out_len, "%s-%lx%lx%x@example.test", prefix, (long)ts.tv_sec,
                         ts.tv_nsec, (unsigned)getpid());
                return;
        }
        snprintf(out, out_len, "%s-%02x%02x%02x%02x%02x%02x%02x%02x@example.test", prefix, r[0],
                 r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
}

/* ---- gateway tests ------------------------------------------------------- */

#define IT_GATEWAY_START_MS 15000
#define IT_GATEWAY_STOP_MS  10000

void it_sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

        nanosleep(&ts, NULL);
}

static int run_and_wait(const char *const argv[])
{
        int status = 0;
        pid_t pid = fork();

        if (pid < 0) {
                return -1;
        }
        if (pid == 0) {
                execv(argv[0], (char *const *)argv);
                _exit(127);
        }
        if (waitpid(pid, &status, 0) != pid) {
                return -1;
        }
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int it_stack_redis(const it_stack *s, int up)
{
        const char *argv[] = {s->stack_sh, up ? "redis-start" : "redis-stop", "--dir", s->dir,
                              NULL};

        if (s->stack_sh[0] == '\0') {
                fprintf(stderr, "it_support: the stack's env names no stack.sh\n");
                return -1;
        }
        return run_and_wait(argv);
}

/* In a forked child: stdout and stderr to log_path (truncated); exits 126 when it cannot. */
static void child_log_to(const char *log_path)
{
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        if (fd < 0) {
                _exit(126);
        }
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
}

/* In a forked child: env's NAME=value entries over what is set, then exec bin_dir/binary. */
static void child_exec(const char *const *env, const char *bin_dir, const char *binary)
{
        char bin[600];

        for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
                putenv((char *)env[i]); /* the child's own copy of the environment */
        }
        snprintf(bin, sizeof(bin), "%s/%s", bin_dir, binary);
        execl(bin, bin, (char *)NULL);
        _exit(127);
}

/* The value of field (an integer) in the first log line that holds msg_field, or -1. */
static int logged_int(const char *log_path, const char *msg_field, const char *field)
{
        char line[IT_ENV_LINE_MAX * 8];
        const char *p;
        FILE *f = fopen(log_path, "r");
        int port = -1;

        while (f != NULL && port < 0 && fgets(line, sizeof(line), f) != NULL) {
                if (strstr(line, msg_field) != NULL && (p = strstr(line, field)) != NULL) {
                        port = atoi(p + strlen(field));
                }
        }
        if (f != NULL) {
                fclose(f);
        }
        return port;
}

/* In the child: the environment, stdout/stderr to the log, then exec. */
static void exec_gateway(const it_stack *s, const char *const *env, const char *log_path)
{
        child_log_to(log_path);
        setenv("KEELSON_GATEWAY_HOST", "127.0.0.1", 1);
        setenv("KEELSON_GATEWAY_PORT", "0", 1);
        setenv("KEELSON_GATEWAY_ADMIN_HOST", "127.0.0.1", 1);
        setenv("KEELSON_GATEWAY_ADMIN_PORT", "0", 1);
        setenv("KEELSON_BROKER_URL", s->broker_url, 1);
        setenv("KEELSON_REDIS_URL", s->redis_url, 1);
        /* Rate-limit buckets of its own (our pid is unique) unless env says otherwise. */
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "it-%d:", (int)getpid());
        setenv("KEELSON_GATEWAY_REDIS_PREFIX", prefix, 1);
        child_exec(env, s->bin_dir, "keelson-gateway");
}

static int wait_listening(it_gateway *g)
{
        int status;

        for (int waited = 0; waited < IT_GATEWAY_START_MS; waited += 20) {
                const char *msg = "\"msg\":\"gateway listening\"";
                int port = logged_int(g->log_path, msg, "\"port\":");
                int admin = logged_int(g->log_path, msg, "\"admin_port\":");
                if (port > 0 && admin > 0) {
                        snprintf(g->url, sizeof(g->url), "http://127.0.0.1:%d", port);
                        snprintf(g->admin_url, sizeof(g->admin_url), "http://127.0.0.1:%d", admin);
                        return 0;
                }
                if (waitpid(g->pid, &status, WNOHANG) == g->pid) {
                        fprintf(stderr, "it_support: the gateway exited at start, see %s\n",
                                g->log_path);
                        g->pid = 0;
                        return -1;
                }
                it_sleep_ms(20);
        }
        fprintf(stderr, "it_support: the gateway did not listen, see %s\n", g->log_path);
        return -1;
}

/* 1 when base_url's /readyz answers 200, else 0. */
static int is_ready(const char *base_url)
{
        it_http_response r;
        long status;

        if (it_http_get(base_url, "/readyz", &r) != 0) {
                return 0;
        }
        status = r.status;
        it_http_response_free(&r);
        return status == 200;
}

static int wait_ready(const it_gateway *g)
{
        for (int waited = 0; waited < IT_GATEWAY_START_MS; waited += 50) {
                if (is_ready(g->admin_url)) {
                        return 0;
                }
                it_sleep_ms(50);
        }
        fprintf(stderr, "it_support: %s never became ready\n", g->admin_url);
        return -1;
}

static void exec_service(const it_stack *s, const char *binary, const char *prefix,
                         const char *const *env, const char *log_path);

/*
 * Forks bin_dir/binary, a gateway (prefix NULL) or a service, logging to
 * <stack>/logs/it-<binary>-<pid>-<n>.log (log_path, IT_LOG_PATH_MAX bytes).
 * Returns 0 with *pid set, or -1 with *pid 0.
 */
#define IT_LOG_PATH_MAX 600
_Static_assert(sizeof(((it_gateway *)0)->log_path) == IT_LOG_PATH_MAX &&
                   sizeof(((it_service *)0)->log_path) == IT_LOG_PATH_MAX,
               "spawn writes whole log paths");
static int spawn(const it_stack *s, const char *binary, const char *prefix, const char *const *env,
                 int *pid, char *log_path)
{
        static int counter;

        snprintf(log_path, IT_LOG_PATH_MAX, "%s/logs/it-%s-%d-%d.log", s->dir, binary,
                 (int)getpid(), ++counter);
        *pid = fork();
        if (*pid < 0) {
                *pid = 0;
                return -1;
        }
        if (*pid == 0 && prefix == NULL) {
                exec_gateway(s, env, log_path);
        } else if (*pid == 0) {
                exec_service(s, binary, prefix, env, log_path);
        }
        return 0;
}

int it_gateway_start(const it_stack *s, const char *const *env, int wait_ready_too, it_gateway *out)
{
        memset(out, 0, sizeof(out[0]));
        if (s->bin_dir[0] == '\0') {
                fprintf(stderr, "it_support: the stack's env names no build folder\n");
                return -1;
        }
        if (spawn(s, "keelson-gateway", NULL, env, &out->pid, out->log_path) != 0) {
                return -1;
        }
        if (wait_listening(out) != 0 || (wait_ready_too && wait_ready(out) != 0)) {
                it_gateway_stop(out);
                return -1;
        }
        return 0;
}

void it_gateway_stop(it_gateway *g)
{
        int status;

        if (g->pid <= 0) {
                return;
        }
        kill(g->pid, SIGTERM);
        for (int waited = 0; waited < IT_GATEWAY_STOP_MS; waited += 20) {
                if (waitpid(g->pid, &status, WNOHANG) == g->pid) {
                        g->pid = 0;
                        return;
                }
                it_sleep_ms(20);
        }
        kill(g->pid, SIGKILL);
        waitpid(g->pid, &status, 0);
        g->pid = 0;
}

int it_metric(const char *base_url, const char *series, double *out)
{
        it_http_response r;
        size_t n = strlen(series);
        const char *line;
        int rc = -1;

        if (it_http_get(base_url, "/metrics", &r) != 0) {
                return -1;
        }
        for (line = r.body; line != NULL && *line != '\0';) {
                if (strncmp(line, series, n) == 0 && line[n] == ' ') {
                        *out = strtod(line + n + 1, NULL);
                        rc = 0;
                        break;
                }
                line = strchr(line, '\n');
                line = line != NULL ? line + 1 : NULL;
        }
        it_http_response_free(&r);
        return rc;
}

void it_random_ip(char *out, size_t out_len)
{
        unsigned char r[3] = {0};
        FILE *f = fopen("/dev/urandom", "rb");

        if (f == NULL || fread(r, 1, sizeof(r), f) != sizeof(r)) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                r[0] = (unsigned char)ts.tv_nsec;
                r[1] = (unsigned char)(ts.tv_nsec >> 8);
                r[2] = (unsigned char)getpid();
        }
        if (f != NULL) {
                fclose(f);
        }
        snprintf(out, out_len, "198.%d.%d.%d", 18 + (r[0] & 1), r[1], r[2] == 0 ? 1 : r[2]);
}

#define IT_AUTH_PATH       "/keelson.auth.v1.AuthService/"
#define IT_HEADERS_EXTRA   6
#define IT_PASSWORD        "correct horse battery staple"
#define IT_TOKEN_BYTES_MAX 512
#define IT_ID_BYTES_MAX    64

int it_connect(const char *base_url, const char *path, const void *body, size_t body_len,
               const it_request *req, it_http_response *out)
{
        static const it_request none = {0};
        char auth[IT_TOKEN_BYTES_MAX + 32], rid[192];
        const char *all[IT_HEADERS_EXTRA + 3] = {NULL};
        int n = 0, rc;

        req = req != NULL ? req : &none;
        if (req->token != NULL) {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", req->token);
                all[n++] = auth;
        }
        if (req->request_id != NULL) {
                snprintf(rid, sizeof(rid), "X-Request-Id: %s", req->request_id);
                all[n++] = rid;
        }
        for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL; i++) {
                if (i == IT_HEADERS_EXTRA) {
                        fprintf(stderr, "it_support: more than %d extra headers\n",
                                IT_HEADERS_EXTRA);
                        return -1;
                }
                all[n++] = req->headers[i];
        }
        tl_accept_gzip = req->gzip;
        rc = it_http_post(base_url, path,
                          req->content_type != NULL ? req->content_type : "application/json", body,
                          body_len, all, out);
        tl_accept_gzip = 0;
        return rc;
}

void it_post_json(const char *base_url, const char *path, const char *json, const char *token,
                  it_http_response *out)
{
        it_request req = {.token = token};

        if (it_connect(base_url, path, json, strlen(json), &req, out) != 0) {
                fail_msg("%s%s: no HTTP reply", base_url, path);
        }
}

void it_assert_refused(const it_http_response *r, const char *what, const char *code,
                       const char *message)
{
        json_t *j = json_loadb(r->body, r->body_len, 0, NULL);
        const char *got_code = json_string_value(json_object_get(j, "code"));
        const char *got_message = json_string_value(json_object_get(j, "message"));

        if (r->status == 200 || got_code == NULL || strcmp(got_code, code) != 0 ||
            (message != NULL && (got_message == NULL || strcmp(got_message, message) != 0))) {
                fail_msg("%s: expected %s%s%s, got HTTP %ld: %.400s", what, code,
                         message != NULL ? " " : "", message != NULL ? message : "", r->status,
                         r->body);
        }
        json_decref(j);
}

long it_post_json_status(const char *base_url, const char *path, const char *json,
                         const char *token)
{
        it_http_response r;
        long status;

        it_post_json(base_url, path, json, token, &r);
        status = r.status;
        it_http_response_free(&r);
        return status;
}

uint8_t *it_pack(const ProtobufCMessage *m, size_t *len)
{
        uint8_t *packed;

        *len = protobuf_c_message_get_packed_size(m);
        packed = malloc(*len > 0 ? *len : 1);
        assert_non_null(packed);
        assert_int_equal(protobuf_c_message_pack(m, packed), *len);
        return packed;
}

int it_auth_call(const char *base_url, const char *method, const char *json, const char *token,
                 const char *const *headers, it_http_response *out)
{
        it_request req = {.token = token, .headers = headers};
        char path[160];

        snprintf(path, sizeof(path), IT_AUTH_PATH "%s", method);
        return it_connect(base_url, path, json, strlen(json), &req, out);
}

/* Copies the string field key of a JSON reply into out (out_len bytes). */
static int json_field(const it_http_response *r, const char *key, char *out, size_t out_len)
{
        json_t *j = json_loadb(r->body, r->body_len, 0, NULL);
        json_t *v = j != NULL ? json_object_get(j, key) : NULL;
        int rc = -1;

        if (json_is_string(v) && strlen(json_string_value(v)) < out_len) {
                snprintf(out, out_len, "%s", json_string_value(v));
                rc = 0;
        }
        json_decref(j);
        return rc;
}

int it_new_session(const char *base_url, const char *email_prefix, char *token, char *tenant_id,
                   char *user_id)
{
        char email[128], body[512];
        it_http_response r;
        int rc;

        it_unique_email(email_prefix, email, sizeof(email));
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" IT_PASSWORD "\",\"tenantName\":\"%s\"}", email,
                 email_prefix);
        if (it_auth_call(base_url, "SignUp", body, NULL, NULL, &r) != 0 || r.status != 200) {
                fprintf(stderr, "it_support: SignUp answered %ld: %s\n", r.status,
                        r.body != NULL ? r.body : "");
                it_http_response_free(&r);
                return -1;
        }
        it_http_response_free(&r);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" IT_PASSWORD "\"}", email);
        if (it_auth_call(base_url, "Login", body, NULL, NULL, &r) != 0 || r.status != 200) {
                fprintf(stderr, "it_support: Login answered %ld: %s\n", r.status,
                        r.body != NULL ? r.body : "");
                it_http_response_free(&r);
                return -1;
        }
        rc = json_field(&r, "sessionToken", token, IT_TOKEN_BYTES_MAX);
        if (rc == 0 && tenant_id != NULL) {
                rc = json_field(&r, "tenantId", tenant_id, IT_ID_BYTES_MAX);
        }
        if (rc == 0 && user_id != NULL) {
                rc = json_field(&r, "userId", user_id, IT_ID_BYTES_MAX);
        }
        it_http_response_free(&r);
        return rc;
}

long it_header_long(const it_http_response *r, const char *name)
{
        char v[32], *end = NULL;
        long n;

        if (it_http_header(r, name, v, sizeof(v)) != 0) {
                return -1;
        }
        n = strtol(v, &end, 10);
        return end != v && *end == '\0' ? n : -1;
}

/* ---- more service replicas ----------------------------------------------- */

/* In the child: the environment, stdout/stderr to the log, then exec. */
static void exec_service(const it_stack *s, const char *binary, const char *prefix,
                         const char *const *env, const char *log_path)
{
        char name[128];

        child_log_to(log_path);
        setenv("KEELSON_PG_DSN", s->service_pg_dsn, 1);
        setenv("KEELSON_BROKER_URL", s->broker_url, 1);
        setenv("KEELSON_REDIS_URL", s->redis_url, 1);
        snprintf(name, sizeof(name), "%s_HTTP_HOST", prefix);
        setenv(name, "127.0.0.1", 1);
        snprintf(name, sizeof(name), "%s_HTTP_PORT", prefix);
        setenv(name, "0", 1);
        child_exec(env, s->bin_dir, binary);
}

/* Waits for the health port, then for /readyz 200, while the process lives. */
static int service_wait_ready(it_service *p)
{
        char url[64];
        int status;

        for (int waited = 0; waited < IT_GATEWAY_START_MS; waited += 50) {
                if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
                        fprintf(stderr, "it_support: the service exited at start, see %s\n",
                                p->log_path);
                        p->pid = 0;
                        return -1;
                }
                if (p->health_port <= 0) {
                        p->health_port = logged_int(
                            p->log_path, "\"msg\":\"health listener started\"", "\"port\":");
                }
                if (p->health_port > 0) {
                        snprintf(url, sizeof(url), "http://127.0.0.1:%d", p->health_port);
                        if (is_ready(url)) {
                                return 0;
                        }
                }
                it_sleep_ms(50);
        }
        fprintf(stderr, "it_support: the service never became ready, see %s\n", p->log_path);
        return -1;
}

int it_service_start(const it_stack *s, const char *binary, const char *prefix,
                     const char *const *env, it_service *out)
{
        memset(out, 0, sizeof(out[0]));
        if (s->bin_dir[0] == '\0' || s->service_pg_dsn[0] == '\0') {
                fprintf(stderr,
                        "it_support: the stack's env names no build folder or service DSN\n");
                return -1;
        }
        if (spawn(s, binary, prefix, env, &out->pid, out->log_path) != 0) {
                return -1;
        }
        if (service_wait_ready(out) != 0) {
                it_service_stop(out);
                return -1;
        }
        return 0;
}

void it_service_stop(it_service *p)
{
        it_gateway g = {0};

        g.pid = p->pid; /* the same signals and waits as for a gateway */
        it_gateway_stop(&g);
        p->pid = 0;
}

/*
 * A broker's base port, as deploy/local/stack.sh --free-ports picks them:
 * below Linux's ephemeral range, base .. base + 41 below 32000.
 */
#define IT_PORT_LOW    15000
#define IT_PORT_SPAN   16900
#define IT_PORT_TRIES  20
#define IT_CONNECT_MAX 500 /* 10 ms waits for an RPC client's dial */

static void random_base(char *base, size_t base_len)
{
        snprintf(base, base_len, "tcp://127.0.0.1:%d", IT_PORT_LOW + rand() % IT_PORT_SPAN);
}

int it_broker_start(const it_stack *s, char *base, size_t base_len)
{
        char bin[600], env_broker[128];

        snprintf(bin, sizeof(bin), "%s/keelson-broker", s->bin_dir);
        for (int attempt = 0; attempt < 10; attempt++) {
                random_base(base, base_len);
                snprintf(env_broker, sizeof(env_broker), "KEELSON_BROKER_URL=%s", base);
                pid_t pid = fork();
                if (pid < 0) {
                        return -1;
                }
                if (pid == 0) {
                        char *argv[] = {bin, NULL};
                        char *envp[] = {env_broker, "KEELSON_BROKER_HTTP_PORT=0", NULL};
                        execve(bin, argv, envp);
                        _exit(127);
                }
                it_sleep_ms(300);
                if (waitpid(pid, NULL, WNOHANG) == 0) {
                        return pid;
                }
                /* it exited: a port of its span was taken, another base */
        }
        return -1;
}

int it_stack_env(const char *key, char *out, size_t out_len)
{
        char path[600], line[1024];
        const char *dir = getenv("KEELSON_IT_STACK");
        size_t klen = strlen(key);
        FILE *f;

        out[0] = '\0';
        snprintf(path, sizeof(path), "%s/env", dir != NULL ? dir : ".");
        if ((f = fopen(path, "r")) == NULL) {
                return -1;
        }
        while (fgets(line, sizeof(line), f) != NULL) {
                if (strncmp(line, key, klen) == 0 && line[klen] == '=') {
                        snprintf(out, out_len, "%s", line + klen + 1);
                        out[strcspn(out, "\n")] = '\0';
                }
        }
        fclose(f);
        return out[0] != '\0' ? 0 : -1;
}

int it_stack_env_as(const char *key, const char *var, char *out, size_t out_len)
{
        char value[800];

        if (it_stack_env(key, value, sizeof(value)) != 0) {
                fprintf(stderr, "the stack's env has no %s\n", key);
                return -1;
        }
        snprintf(out, out_len, "%s=%s", var, value);
        return 0;
}

int it_stack_ports(const char *key, int *ports, int max)
{
        char list[1024];
        int n;

        if (it_stack_env(key, list, sizeof(list)) != 0) {
                return -1;
        }
        n = parse_list(list, ports, max, parse_port);
        return n;
}

int it_broker_in_process(ks_broker **out, char *base, size_t base_len)
{
        *out = NULL;
        for (int i = 0; i < IT_PORT_TRIES; i++) {
                random_base(base, base_len);
                if (ks_broker_start(out, base) == KS_OK) {
                        return 0;
                }
                *out = NULL;
        }
        fprintf(stderr, "it_support: no free ports for a broker\n");
        return -1;
}

int it_rpc_client(ks_rpc_client **out, const char *base, int service, int timeout_ms,
                  int wait_connected)
{
        char front[KS_URL_MAX];
        const char *urls[1] = {front};
        ks_rpc_client_options o = {urls, 1, 16, timeout_ms};

        *out = NULL;
        if (ks_broker_url(front, sizeof(front), base, service, KS_SIDE_FRONT) != 0 ||
            ks_rpc_client_new(out, &o) != KS_OK) {
                *out = NULL;
                return -1;
        }
        /* The dial completes in the background; calls fail fast until then. */
        for (int i = 0; wait_connected && i < IT_CONNECT_MAX && !ks_rpc_client_connected(*out);
             i++) {
                it_sleep_ms(10);
        }
        if (wait_connected && !ks_rpc_client_connected(*out)) {
                fprintf(stderr, "it_support: no connection to %s\n", front);
                ks_rpc_client_free(*out);
                *out = NULL;
                return -1;
        }
        return 0;
}

void it_pid_stop(int *pid, int sig)
{
        if (*pid > 0) {
                kill(*pid, sig);
                waitpid(*pid, NULL, 0);
                *pid = 0;
        }
}

/* ---- PostgreSQL ---------------------------------------------------------- */

PGresult *it_sql(PGconn *pg, const char *sql, int n, const char *const *params)
{
        PGresult *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
        ExecStatusType st = PQresultStatus(res);

        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
                fail_msg("SQL failed: %s (%s)", PQresultErrorMessage(res), sql);
        }
        return res;
}

long it_sql_long(PGconn *pg, const char *sql, int n, const char *const *params)
{
        PGresult *res = it_sql(pg, sql, n, params);
        long v;

        if (PQntuples(res) != 1 || PQnfields(res) != 1) {
                fail_msg("%s: %d rows of %d columns, not one value", sql, PQntuples(res),
                         PQnfields(res));
        }
        v = strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        return v;
}

void it_sql_run(const it_stack *s, const char *sql, int n, const char *const *params)
{
        PGconn *pg = it_pg_connect(s);

        assert_non_null(pg);
        PQclear(it_sql(pg, sql, n, params));
        PQfinish(pg);
}

/* ---- metrics ------------------------------------------------------------- */

double it_metric_of(const char *base_url, const char *series)
{
        double v = 0;

        if (it_metric(base_url, series, &v) != 0) {
                fail_msg("%s has no series %s", base_url, series);
        }
        return v;
}

double it_metric_at(int port, const char *series)
{
        char url[64];

        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        return it_metric_of(url, series);
}

double it_metric_sum_at(int port, const char *name, const char *needle)
{
        char url[64];
        size_t name_len = strlen(name);
        char *line, *eol, *v;
        it_http_response r;
        double sum = 0;

        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        if (it_http_get(url, "/metrics", &r) != 0 || r.status != 200) {
                fail_msg("%s/metrics answered nothing", url);
        }
        for (line = r.body; line != NULL && *line != '\0'; line = eol != NULL ? eol + 1 : NULL) {
                if ((eol = strchr(line, '\n')) != NULL) {
                        *eol = '\0'; /* the body is ours: one line at a time */
                }
                if (strncmp(line, name, name_len) != 0 ||
                    (line[name_len] != '{' && line[name_len] != ' ') ||
                    (needle != NULL && strstr(line, needle) == NULL)) {
                        continue;
                }
                /* The value is the last field of the line. */
                v = strrchr(line, ' ');
                sum += v != NULL ? strtod(v + 1, NULL) : 0;
        }
        it_http_response_free(&r);
        return sum;
}

/* ---- log files ----------------------------------------------------------- */

#define IT_FILE_BYTES_MAX (64L * 1024 * 1024)

char *it_read_file(const char *path)
{
        FILE *f = fopen(path, "r");
        char *s = NULL;
        long n;

        if (f == NULL) {
                return NULL;
        }
        if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || n > IT_FILE_BYTES_MAX ||
            fseek(f, 0, SEEK_SET) != 0 || (s = malloc((size_t)n + 1)) == NULL) {
                fclose(f);
                fail_msg("%s: cannot read it whole", path);
                return NULL;
        }
        n = (long)fread(s, 1, (size_t)n, f);
        s[n] = '\0';
        fclose(f);
        return s;
}

int it_file_lines_with(const char *path, const char *const *needles, int n)
{
        char *all = it_read_file(path), *line, *eol;
        int found = 0;

        for (line = all; line != NULL && *line != '\0'; line = eol != NULL ? eol + 1 : NULL) {
                int every = 1;
                if ((eol = strchr(line, '\n')) != NULL) {
                        *eol = '\0';
                }
                for (int k = 0; k < n && every; k++) {
                        every = strstr(line, needles[k]) != NULL;
                }
                found += every;
        }
        free(all);
        return found;
}

int it_file_contains(const char *path, const char *needle)
{
        char *all = it_read_file(path);
        int found = all != NULL && strstr(all, needle) != NULL;

        free(all);
        return found;
}
