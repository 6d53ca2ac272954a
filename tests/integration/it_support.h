/*
 * it_support: what every integration test needs to talk to the stack the
 * CTest fixture started (deploy/local/stack.sh start --free-ports): the
 * addresses it wrote to $KEELSON_IT_STACK/env, an HTTP client (libcurl),
 * Connect calls through a gateway, PostgreSQL for asserting stored rows,
 * /metrics and log files, and processes of a test's own (a broker, a
 * gateway, a service replica).
 *
 * Part of the keelson_it_support library that every integration test links
 * (tests/CMakeLists.txt), with auth_it.h and ledger_it.h. Functions that
 * "fail the test" use cmocka's assertions: call them from the test's own
 * thread only; the others return a status and may be called from any.
 */
#ifndef IT_SUPPORT_H
#define IT_SUPPORT_H

#include <libpq-fe.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_broker.h"
#include "ks_rpc.h"

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
        /* their /healthz, /readyz and /metrics: http://127.0.0.1:port; [0] is the first's */
        char gateway_admin_urls[IT_REPLICAS_MAX][256];
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

/* Sleeps ms milliseconds (a poll's pause, never a timing under test). */
void it_sleep_ms(long ms);

/* ---- Connect calls ------------------------------------------------------- */

/* What a Connect call sends beside its body; every field may be NULL. */
typedef struct it_request {
        const char *content_type;   /* NULL: application/json */
        const char *token;          /* sent as Authorization: Bearer */
        const char *request_id;     /* sent as X-Request-Id */
        const char *const *headers; /* more "Name: value" lines, NULL-terminated, at most 6 */
        int gzip;                   /* ask for gzip (libcurl decodes the body) */
} it_request;

/*
 * POSTs body (body_len bytes) to base_url + path with req's headers (req
 * may be NULL). Returns what it_http_post returns.
 */
int it_connect(const char *base_url, const char *path, const void *body, size_t body_len,
               const it_request *req, it_http_response *out);

/* it_connect of a JSON string with a bearer token (may be NULL); fails the test without a reply. */
void it_post_json(const char *base_url, const char *path, const char *json, const char *token,
                  it_http_response *out);

/*
 * Fails the test unless r is a Connect error (not a 200) with code and, when
 * message is not NULL, that message; what names the call in the failure.
 */
void it_assert_refused(const it_http_response *r, const char *what, const char *code,
                       const char *message);

/* it_post_json for the status only. */
long it_post_json_status(const char *base_url, const char *path, const char *json,
                         const char *token);

/* A protobuf-c message packed into a malloc'd buffer (the caller frees it); fails the test. */
uint8_t *it_pack(const ProtobufCMessage *m, size_t *len);

/* ---- PostgreSQL (each fails the test on an error) ------------------------- */

/* Runs a statement; the caller PQclear()s the result. */
PGresult *it_sql(PGconn *pg, const char *sql, int n, const char *const *params);

/* The single value of a one-row, one-column query, as a long. */
long it_sql_long(PGconn *pg, const char *sql, int n, const char *const *params);

/* Runs one statement on a connection of its own to the stack's database. */
void it_sql_run(const it_stack *s, const char *sql, int n, const char *const *params);

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
        char url[256];       /* http://127.0.0.1:port */
        char admin_url[256]; /* its /healthz, /readyz and /metrics */
        char log_path[600];  /* its stderr: JSON log lines */
} it_gateway;

/*
 * Starts keelson-gateway from the stack's build folder on a free port of
 * 127.0.0.1, with the stack's broker and Redis, plus env: "NAME=value"
 * entries (NULL-terminated, may be NULL) that also override those. Waits for
 * its "gateway listening" line, then (wait_ready) for /readyz (on its admin
 * listener, also on a free port) to say 200.
 * Returns 0, or -1 (the process, if any, is stopped).
 */
int it_gateway_start(const it_stack *s, const char *const *env, int wait_ready, it_gateway *out);
/* SIGTERM, then SIGKILL after 10 s; waits for it. Accepts a never-started one. */
void it_gateway_stop(it_gateway *g);

/*
 * The value of one series of base_url's /metrics, named exactly as it is
 * rendered ("name" or "name{label=\"v\",...}"). Returns 0, or -1 when absent.
 */
int it_metric(const char *base_url, const char *series, double *out);

/*
 * The value of one series of the /metrics of base_url (it_metric), or of
 * 127.0.0.1:port; fails the test when the series is absent.
 */
double it_metric_of(const char *base_url, const char *series);
double it_metric_at(int port, const char *series);

/*
 * The sum of every series of the metric name (any labels) on 127.0.0.1:port
 * whose line also holds needle (NULL: every series); fails the test
 * without an answer.
 */
double it_metric_sum_at(int port, const char *name, const char *needle);

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

/*
 * "VAR=<the value of key in the stack's env file>" into out, for a process a
 * test starts itself (a service's login DSN: KEELSON_IT_LEDGER_LOGIN_DSN as
 * KEELSON_LEDGER_PG_LOGIN_DSN): 0, or -1 (said on stderr) when key is absent.
 */
int it_stack_env_as(const char *key, const char *var, char *out, size_t out_len);

/*
 * A comma-separated list of ports of the stack's env file (the health ports
 * of a service's replicas: "KEELSON_IT_LEDGER_HEALTH_PORTS"): how many,
 * at most max, or -1 when absent.
 */
int it_stack_ports(const char *key, int *ports, int max);

/*
 * A broker of the test's own in this process, on a random base port below
 * the ephemeral range, another when a port of its span is taken. Returns 0
 * with its base URL in base, or -1. The caller seeds rand() and stops it.
 */
int it_broker_in_process(ks_broker **out, char *base, size_t base_len);

/*
 * An RPC client of one service (KS_SVC_AUTH, ...) behind the broker at
 * base, with timeout_ms for calls without a deadline. When wait_connected,
 * waits (at most 5 s) for its dial to complete. Returns 0, or -1.
 */
int it_rpc_client(ks_rpc_client **out, const char *base, int service, int timeout_ms,
                  int wait_connected);

/* Sends sig to *pid (when > 0), reaps it and sets *pid to 0. */
void it_pid_stop(int *pid, int sig);

/* ---- log files ----------------------------------------------------------- */

/* The whole file at path, NUL-terminated, malloc'd; NULL when absent (fails the test when
 * unreadable). */
char *it_read_file(const char *path);

/* Whether the file at path (absent: no) holds needle. */
int it_file_contains(const char *path, const char *needle);

/* How many lines of the file at path (absent: none) hold every one of the n needles. */
int it_file_lines_with(const char *path, const char *const *needles, int n);

#endif
