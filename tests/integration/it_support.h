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

#endif
