/*
 * it_support: what every integration test needs to talk to the stack the
 * CTest fixture started (deploy/local/stack.sh start --free-ports): the
 * addresses it wrote to $KEELSON_IT_STACK/env, an HTTP client (libcurl) and
 * a PostgreSQL connection for asserting stored rows.
 */
#ifndef IT_SUPPORT_H
#define IT_SUPPORT_H

#include <libpq-fe.h>
#include <stddef.h>

#define IT_REPLICAS_MAX 8

typedef struct it_stack {
        char dir[512];         /* the stack folder */
        char pg_dsn[512];      /* superuser DSN of the throwaway cluster */
        char redis_url[256];   /* redis://127.0.0.1:port */
        char broker_url[256];  /* tcp://127.0.0.1:port (base) */
        char gateway_url[256]; /* http://127.0.0.1:port */
        int broker_health_port;
        int n_auth;
        int auth_health_ports[IT_REPLICAS_MAX];
        int auth_pids[IT_REPLICAS_MAX];
        int gateway_pid;
        /* every gateway replica (stack.sh --gateway-replicas); [0] is gateway_url */
        int n_gateways;
        char gateway_urls[IT_REPLICAS_MAX][256];
        int gateway_pids[IT_REPLICAS_MAX];
        char bin_dir[512];        /* the build folder the stack runs from */
        char stack_sh[512];       /* deploy/local/stack.sh */
        char service_pg_dsn[512]; /* the DSN the stack's services run with */
} it_stack;

/* Reads $KEELSON_IT_STACK/env. Returns 0, or -1 (the test should fail). */
int it_stack_load(it_stack *s);

typedef struct it_http_response {
        long status;
        char *body; /* NUL-terminated */
        size_t body_len;
        char content_type[128];
        char *headers; /* the raw response header block, NUL-terminated */
} it_http_response;

/*
 * POSTs body to gateway_url + path. headers: NULL-terminated array of
 * "Name: value" lines added to the request (may be NULL). Returns 0 when an
 * HTTP response was received (whatever its status), -1 on transport error.
 */
int it_http_post(const char *base_url, const char *path, const char *content_type, const void *body,
                 size_t body_len, const char *const *headers, it_http_response *out);
int it_http_get(const char *base_url, const char *path, it_http_response *out);
void it_http_response_free(it_http_response *r);

/* Value of a response header (case-insensitive name) into out; 0 if found. */
int it_http_header(const it_http_response *r, const char *name, char *out, size_t out_len);

/* A connection to the stack's database; the test PQfinish()es it. */
PGconn *it_pg_connect(const it_stack *s);

/* A unique email for this test run: "<prefix>-<random>@example.test". */
void it_unique_email(const char *prefix, char *out, size_t out_len);

/* ---- gateway tests ------------------------------------------------------- */

/*
 * Stops (up = 0) or starts again (up = 1) the stack's Redis, through
 * "stack.sh redis-stop|redis-start". Returns 0 on success. A test that stops
 * it must start it again, also when it fails (do it in a teardown).
 */
int it_stack_redis(const it_stack *s, int up);

/* One more gateway next to the stack's, with its own settings. */
typedef struct it_gateway {
        int pid;
        char url[256];      /* http://127.0.0.1:port */
        char log_path[600]; /* its stderr: JSON log lines */
} it_gateway;

/*
 * Starts keelson-gateway from the stack's build folder on a free port of
 * 127.0.0.1, with the stack's broker and Redis, plus env: "NAME=value"
 * entries (NULL-terminated, may be NULL) that also override those. Waits for
 * its "gateway listening" line, then (wait_ready) for /readyz to say 200.
 * Returns 0, or -1 (the process, if any, is stopped).
 */
int it_gateway_start(const it_stack *s, const char *const *env, int wait_ready, it_gateway *out);
/* SIGTERM, then SIGKILL after 10 s; waits for it. Accepts a never-started one. */
void it_gateway_stop(it_gateway *g);

/* it_http_post, asking for gzip (libcurl decodes the body; the headers stay as sent). */
int it_http_post_gzip(const char *base_url, const char *path, const char *content_type,
                      const void *body, size_t body_len, const char *const *headers,
                      it_http_response *out);

/*
 * The value of one series of base_url's /metrics, named exactly as it is
 * rendered ("name" or "name{label=\"v\",...}"). Returns 0, or -1 when absent.
 */
int it_metric(const char *base_url, const char *series, double *out);

/* A random address in 198.18.0.0/15 (benchmarking range), for X-Forwarded-For. */
void it_random_ip(char *out, size_t out_len);

/*
 * POSTs a JSON body to an AuthService method ("Login") of base_url, with a
 * bearer token and more "Name: value" headers when not NULL (at most 6).
 * Returns what it_http_post returns.
 */
int it_auth_call(const char *base_url, const char *method, const char *json, const char *token,
                 const char *const *headers, it_http_response *out);

/*
 * Signs a fresh user up (a new tenant) and logs in, through base_url.
 * token: at least 512 bytes; tenant_id and user_id: at least 64 (either may
 * be NULL). Returns 0, or -1 with the reason on stderr.
 */
int it_new_session(const char *base_url, const char *email_prefix, char *token, char *tenant_id,
                   char *user_id);

/* An integer response header (RateLimit-Remaining, ...); -1 when absent. */
long it_header_long(const it_http_response *r, const char *name);

/* ---- more service replicas ----------------------------------------------- */

/* A service replica a test started itself (keelson-auth, keelson-ledger, ...). */
typedef struct it_service {
        int pid;
        int health_port;    /* its /healthz, /readyz, /metrics */
        char log_path[600]; /* its stderr: JSON log lines */
} it_service;

/*
 * Starts <bin_dir>/<binary> with the stack's PostgreSQL (service DSN), Redis
 * and broker, its health listener on a free port of 127.0.0.1, plus env:
 * "NAME=value" entries (NULL-terminated, may be NULL) that also override
 * those (KEELSON_BROKER_URL to put it behind a broker of the test's own).
 * prefix is the service's variable prefix ("KEELSON_AUTH"). Waits until its
 * /readyz says 200. Returns 0, or -1 (the process, if any, is stopped).
 */
int it_service_start(const it_stack *s, const char *binary, const char *prefix,
                     const char *const *env, it_service *out);
/* SIGTERM, then SIGKILL after 10 s; waits for it. Accepts a never-started one. */
void it_service_stop(it_service *p);

/*
 * A broker of the test's own, in an environment of its own (nothing
 * inherited), on a random base port below Linux's ephemeral range (as
 * deploy/local/stack.sh picks them), another base when a port of its span
 * is taken. Returns its pid and its base URL ("tcp://127.0.0.1:N") in base,
 * or -1. The caller seeds rand() and stops the pid.
 */
int it_broker_start(const it_stack *s, char *base, size_t base_len);

/* A value of the stack's env file that it_stack does not carry: 0, or -1 when absent. */
int it_stack_env(const char *key, char *out, size_t out_len);

#endif
