/*
 * bench_hung_replica: what clients see while one auth replica is stopped
 * (SIGSTOP) with its connection open: 504s and extra latency, before and
 * after the broker ejects it, and after it is continued.
 *
 *   bench_hung_replica --stack DIR [--threads N] [--seconds S] [--pause-ms MS]
 *                      [--split-ms MS] [--pid PID]
 *
 * Talks to the stack's gateway over HTTP as a client does. It signs up one
 * account and logs in, then N threads (8) call WhoAmI (a read the gateway
 * resends after KEELSON_GATEWAY_RESEND_MS) and CreateApiKey (a write, never
 * resent) in turn, pausing MS (20) after each call, for three phases of S
 * seconds (10): both replicas running; one stopped (PID, default the first
 * of DIR/env's KEELSON_IT_AUTH_PIDS); the same continued. A call belongs to
 * the phase it started in; the stopped phase is split at --split-ms (4000)
 * after the stop, so that the calls that started after a broker's ejection
 * (3.5 s at the defaults) are counted apart. It prints, per phase and
 * method: calls, 504s, other failures, calls over 1 s, p50, p99 and max.
 *
 * The stack needs rate limits far above the offered load (the commands are
 * in docs/performance.md). The stopped replica is always continued, also
 * when the run is interrupted by a failure of its own.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_support.h"

#define THREADS_MAX 64
#define CALLS_MAX   200000 /* per thread */
#define BODY_MAX    4096
#define SLOW_NS     1000000000LL /* "over 1 s": a resend, or worse */
#define PASSWORD    "bench horse battery staple"
#define PATH        "/keelson.auth.v1.AuthService/"
#define N_PHASES    4
#define N_METHODS   2

static const char *const phase_names[N_PHASES] = {"running", "stopped, before split",
                                                  "stopped, after split", "continued"};
static const char *const method_names[N_METHODS] = {"WhoAmI", "CreateApiKey"};

typedef struct sample {
        int64_t start_ns, took_ns;
        int method;
        long status;
} sample;

typedef struct bench {
        char gateway[256];
        char token[256];
        int threads, seconds, pause_ms, split_ms;
        int pid;
        atomic_bool stop;
        int64_t stopped_ns, split_ns, continued_ns; /* set by the main thread */
} bench;

typedef struct worker {
        bench *b;
        pthread_t thread;
        int index;
        sample *samples;
        size_t n;
} worker;

typedef struct buf {
        char data[BODY_MAX];
        size_t len;
} buf;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
        buf *b = arg;
        size_t len = size * n, room = sizeof(b->data) - 1 - b->len;
        memcpy(b->data + b->len, p, len < room ? len : room);
        b->len += len < room ? len : room;
        b->data[b->len] = '\0';
        return len;
}

/* POSTs json to method; returns the HTTP status (0: no response) and the body in out. */
static long post(CURL *c, const bench *b, const char *method, const char *json, buf *out)
{
        char url[512], auth[320];
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        long status = 0;

        snprintf(url, sizeof(url), "%s" PATH "%s", b->gateway, method);
        if (b->token[0] != '\0') {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", b->token);
                h = curl_slist_append(h, auth);
        }
        out->len = 0;
        out->data[0] = '\0';
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
        if (curl_easy_perform(c) == CURLE_OK) {
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        }
        curl_slist_free_all(h);
        return status;
}

/* The value of a JSON string field of a flat reply ("sessionToken"), or -1. */
static int json_field(const char *body, const char *name, char *out, size_t out_len)
{
        char key[64];
        snprintf(key, sizeof(key), "\"%s\":\"", name);
        const char *p = strstr(body, key);
        if (p == NULL) {
                return -1;
        }
        p += strlen(key);
        size_t n = strcspn(p, "\"");
        if (n >= out_len) {
                return -1;
        }
        memcpy(out, p, n);
        out[n] = '\0';
        return 0;
}

static int setup_account(bench *b)
{
        CURL *c = curl_easy_init();
        char body[512], email[96];
        buf out;
        long st;

        snprintf(email, sizeof(email), "bench-hung-%ld-%d@example.test", (long)time(NULL),
                 (int)getpid());
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" PASSWORD "\",\"tenantName\":\"Bench\"}",
                 email);
        if ((st = post(c, b, "SignUp", body, &out)) != 200) {
                fprintf(stderr, "SignUp: HTTP %ld %s\n", st, out.data);
                curl_easy_cleanup(c);
                return -1;
        }
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" PASSWORD "\"}", email);
        st = post(c, b, "Login", body, &out);
        curl_easy_cleanup(c);
        if (st != 200 || json_field(out.data, "sessionToken", b->token, sizeof(b->token)) != 0) {
                fprintf(stderr, "Login: HTTP %ld %s\n", st, out.data);
                return -1;
        }
        return 0;
}

static void *worker_main(void *arg)
{
        worker *w = arg;
        CURL *c = curl_easy_init();
        char body[128];
        buf out;

        for (long i = w->index; !atomic_load(&w->b->stop) && w->n < CALLS_MAX; i++) {
                sample *s = &w->samples[w->n];
                s->method = (int)(i % N_METHODS);
                snprintf(body, sizeof(body),
                         s->method == 0 ? "{}" : "{\"name\":\"bench %ld\",\"role\":\"viewer\"}", i);
                s->start_ns = bench_now_ns();
                s->status = post(c, w->b, method_names[s->method], body, &out);
                s->took_ns = bench_now_ns() - s->start_ns;
                w->n++;
                if (w->b->pause_ms > 0) {
                        usleep((useconds_t)w->b->pause_ms * 1000);
                }
        }
        curl_easy_cleanup(c);
        return NULL;
}

static int phase_of(const bench *b, int64_t start_ns)
{
        return start_ns < b->stopped_ns     ? 0
               : start_ns < b->split_ns     ? 1
               : start_ns < b->continued_ns ? 2
                                            : 3;
}

static void report(const bench *b, worker *w)
{
        static int64_t took[THREADS_MAX * (size_t)CALLS_MAX / 16];
        size_t cap = sizeof(took) / sizeof(took[0]);

        printf("%-24s %-13s %7s %6s %6s %7s %9s %9s %9s\n", "phase", "method", "calls", "504",
               "other", ">1s", "p50 ms", "p99 ms", "max ms");
        for (int ph = 0; ph < N_PHASES; ph++) {
                for (int m = 0; m < N_METHODS; m++) {
                        size_t n = 0;
                        long e504 = 0, other = 0, slow = 0;
                        for (int t = 0; t < b->threads; t++) {
                                for (size_t i = 0; i < w[t].n; i++) {
                                        const sample *s = &w[t].samples[i];
                                        if (s->method != m || phase_of(b, s->start_ns) != ph) {
                                                continue;
                                        }
                                        e504 += s->status == 504;
                                        other += s->status != 504 && s->status != 200;
                                        slow += s->took_ns > SLOW_NS;
                                        if (n < cap) {
                                                took[n++] = s->took_ns;
                                        }
                                }
                        }
                        if (n == 0) {
                                continue;
                        }
                        bench_sort_ns(took, n);
                        printf("%-24s %-13s %7zu %6ld %6ld %7ld %9.2f %9.2f %9.2f\n",
                               phase_names[ph], method_names[m], n, e504, other, slow,
                               (double)bench_percentile_ns(took, n, 50) / 1e6,
                               (double)bench_percentile_ns(took, n, 99) / 1e6,
                               (double)took[n - 1] / 1e6);
                }
        }
}

static int parse(bench *b, int argc, char **argv)
{
        char stack[512] = "", pids[256];

        b->threads = 8;
        b->seconds = 10;
        b->pause_ms = 20;
        b->split_ms = 4000;
        for (int i = 1; i + 1 < argc; i += 2) {
                const char *f = argv[i], *v = argv[i + 1];
                if (strcmp(f, "--stack") == 0) {
                        snprintf(stack, sizeof(stack), "%s", v);
                } else if (strcmp(f, "--threads") == 0) {
                        b->threads = atoi(v);
                } else if (strcmp(f, "--seconds") == 0) {
                        b->seconds = atoi(v);
                } else if (strcmp(f, "--pause-ms") == 0) {
                        b->pause_ms = atoi(v);
                } else if (strcmp(f, "--split-ms") == 0) {
                        b->split_ms = atoi(v);
                } else if (strcmp(f, "--pid") == 0) {
                        b->pid = atoi(v);
                } else {
                        return -1;
                }
        }
        if (stack[0] == '\0' || b->threads < 1 || b->threads > THREADS_MAX || b->seconds < 1 ||
            b->pause_ms < 0 || b->split_ms < 0 || b->split_ms > b->seconds * 1000 ||
            bench_stack_env(stack, "KEELSON_IT_GATEWAY_URL", b->gateway, sizeof(b->gateway)) != 0) {
                return -1;
        }
        if (b->pid == 0 &&
            bench_stack_env(stack, "KEELSON_IT_AUTH_PIDS", pids, sizeof(pids)) == 0 &&
            strchr(pids, ',') != NULL) {
                b->pid = atoi(pids); /* the first of two or more */
        }
        if (b->pid <= 0) {
                fprintf(stderr, "no second auth replica to stop: start the stack with "
                                "--auth-replicas 2, or name one with --pid\n");
                return -1;
        }
        return 0;
}

/* Runs the phases; the replica is continued before this returns, whatever happens. */
static void run_phases(bench *b, worker *w)
{
        for (int t = 0; t < b->threads; t++) {
                w[t].b = b;
                w[t].index = t;
                pthread_create(&w[t].thread, NULL, worker_main, &w[t]);
        }
        sleep((unsigned)b->seconds);
        b->stopped_ns = bench_now_ns();
        b->split_ns = b->stopped_ns + (int64_t)b->split_ms * 1000000LL;
        b->continued_ns = b->stopped_ns + (int64_t)b->seconds * 1000000000LL;
        if (kill(b->pid, SIGSTOP) != 0) {
                perror("SIGSTOP");
        }
        sleep((unsigned)b->seconds);
        if (kill(b->pid, SIGCONT) != 0) {
                perror("SIGCONT");
        }
        sleep((unsigned)b->seconds);
        atomic_store(&b->stop, true);
        for (int t = 0; t < b->threads; t++) {
                pthread_join(w[t].thread, NULL);
        }
}

int main(int argc, char **argv)
{
        static bench b;
        static worker w[THREADS_MAX];

        if (parse(&b, argc, argv) != 0) {
                fprintf(stderr, "usage: bench_hung_replica --stack DIR [--threads N] [--seconds S] "
                                "[--pause-ms MS] [--split-ms MS] [--pid PID]\n");
                return 2;
        }
        curl_global_init(CURL_GLOBAL_DEFAULT);
        if (setup_account(&b) != 0) {
                return 1;
        }
        for (int t = 0; t < b.threads; t++) {
                if ((w[t].samples = calloc(CALLS_MAX, sizeof(sample))) == NULL) {
                        return 1;
                }
        }
        printf("gateway %s, replica stopped: pid %d, %d threads, %d s per phase, pause %d ms, "
               "split at %d ms\n",
               b.gateway, b.pid, b.threads, b.seconds, b.pause_ms, b.split_ms);
        run_phases(&b, w);
        report(&b, w);
        for (int t = 0; t < b.threads; t++) {
                free(w[t].samples);
        }
        curl_global_cleanup();
        return 0;
}
