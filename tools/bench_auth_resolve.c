/*
 * bench_auth_resolve: ResolveContext latency alone, and while a login storm
 * saturates the auth service's hash pool.
 *
 *   bench_auth_resolve --stack DIR [--threads N] [--storm N] [--seconds S]
 *                      [--backoff-ms MS]
 *   bench_auth_resolve --broker tcp://127.0.0.1:7400 [...]
 *
 * Talks to auth over the broker as the gateway does (ks_rpc). It signs up
 * one account, logs in for a session token, then:
 *   1. N threads call ResolveContext back to back for S seconds (the baseline);
 *   2. the storm threads call Login back to back (each one scrypt on the hash
 *      pool, or an immediate resource_exhausted when its queue is full, after
 *      which a thread pauses --backoff-ms, default 0: a client that ignores
 *      refusals), and after a second of that the N threads measure
 *      ResolveContext again.
 * It prints p50/p99 and throughput of both phases, the ratios storm/alone,
 * and what the storm got (logins served, refused). The point of the hash
 * pool is a ratio near 1: cheap calls keep answering while logins queue.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_support.h"
#include "keelson/auth/v1/auth.pb-c.h"
#include "ks_crypto.h"
#include "ks_log.h"
#include "ks_rpc.h"
#include "ks_topology.h"

#define THREADS_MAX       64
#define STORM_MAX         512
#define SAMPLES_PER_CALLS 200000 /* per resolver thread and phase */
#define WARMUP_MS         1000
#define PASSWORD          "bench horse battery staple"

typedef struct bench {
        ks_rpc_client *client;
        char token[128];
        char email[128];
        int threads, storm, seconds;
        int backoff_ms; /* a storm thread's pause after resource_exhausted */
        atomic_bool storm_stop;
        atomic_long logins_ok, logins_refused, logins_other;
} bench;

typedef struct resolver {
        bench *b;
        int64_t until_ns;
        int64_t *samples_ns;
        size_t n;
        long errors;
} resolver;

/* One call; returns its code and leaves the payload in *res (cleared by the caller). */
static int call(bench *b, const char *method, const ProtobufCMessage *m, ks_rpc_result *res)
{
        return bench_auth_call(b->client, "bench-auth-resolve", method, m, res);
}

static int login(bench *b, char *token_out, size_t token_len)
{
        Keelson__Auth__V1__LoginRequest req = KEELSON__AUTH__V1__LOGIN_REQUEST__INIT;
        Keelson__Auth__V1__LoginResponse *resp;
        ks_rpc_result res;
        int rc;

        req.email = b->email;
        req.password = PASSWORD;
        rc = call(b, "keelson.auth.v1.AuthService/Login", &req.base, &res);
        if (rc == KS_OK && token_out != NULL) {
                resp =
                    keelson__auth__v1__login_response__unpack(NULL, res.payload_len, res.payload);
                if (resp == NULL) {
                        rc = KS_INTERNAL;
                } else {
                        snprintf(token_out, token_len, "%s", resp->session_token);
                        keelson__auth__v1__login_response__free_unpacked(resp, NULL);
                }
        }
        ks_rpc_result_clear(&res);
        return rc;
}

static int setup_account(bench *b)
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        uint8_t rnd[8];
        char hex[2 * KS_SHA256_BYTES + 1];
        ks_rpc_result res;
        int rc;

        if (ks_random_bytes(rnd, sizeof(rnd)) != 0) {
                return KS_INTERNAL;
        }
        ks_sha256_hex(rnd, sizeof(rnd), hex);
        snprintf(b->email, sizeof(b->email), "bench-%.16s@example.test", hex);
        req.email = b->email;
        req.password = PASSWORD;
        req.tenant_name = "Bench";
        rc = call(b, "keelson.auth.v1.AuthService/SignUp", &req.base, &res);
        ks_rpc_result_clear(&res);
        if (rc != KS_OK) {
                fprintf(stderr, "SignUp failed: %s\n", ks_code_name(rc));
                return rc;
        }
        if ((rc = login(b, b->token, sizeof(b->token))) != KS_OK) {
                fprintf(stderr, "Login failed: %s\n", ks_code_name(rc));
        }
        return rc;
}

static void *resolver_main(void *arg)
{
        resolver *r = arg;
        Keelson__Auth__V1__ResolveContextRequest req =
            KEELSON__AUTH__V1__RESOLVE_CONTEXT_REQUEST__INIT;
        ks_rpc_result res;

        req.token = r->b->token;
        while (bench_now_ns() < r->until_ns && r->n < SAMPLES_PER_CALLS) {
                int64_t t0 = bench_now_ns();
                int rc = call(r->b, "keelson.auth.v1.AuthService/ResolveContext", &req.base, &res);

                ks_rpc_result_clear(&res);
                if (rc != KS_OK) {
                        r->errors++;
                        continue;
                }
                r->samples_ns[r->n++] = bench_now_ns() - t0;
        }
        return NULL;
}

static void *storm_main(void *arg)
{
        bench *b = arg;

        while (!atomic_load(&b->storm_stop)) {
                int rc = login(b, NULL, 0);

                if (rc == KS_OK) {
                        atomic_fetch_add(&b->logins_ok, 1);
                } else if (rc == KS_RESOURCE_EXHAUSTED) {
                        struct timespec pause = {b->backoff_ms / 1000,
                                                 (b->backoff_ms % 1000) * 1000000L};

                        atomic_fetch_add(&b->logins_refused, 1);
                        if (b->backoff_ms > 0) {
                                nanosleep(&pause, NULL);
                        }
                } else {
                        atomic_fetch_add(&b->logins_other, 1);
                }
        }
        return NULL;
}

typedef struct phase {
        double p50_us, p99_us, per_s;
        size_t n;
        long errors;
} phase;

/* Runs the resolver threads for the configured time; fills *out. */
static int measure(bench *b, phase *out)
{
        resolver r[THREADS_MAX];
        pthread_t t[THREADS_MAX];
        int64_t start = bench_now_ns(), until = start + (int64_t)b->seconds * 1000000000LL;
        int64_t *all;
        size_t total = 0;

        memset(out, 0, sizeof(*out));
        for (int i = 0; i < b->threads; i++) {
                memset(&r[i], 0, sizeof(r[i]));
                r[i].b = b;
                r[i].until_ns = until;
                r[i].samples_ns = malloc(SAMPLES_PER_CALLS * sizeof(int64_t));
                if (r[i].samples_ns == NULL || pthread_create(&t[i], NULL, resolver_main, &r[i])) {
                        return -1;
                }
        }
        for (int i = 0; i < b->threads; i++) {
                pthread_join(t[i], NULL);
                total += r[i].n;
                out->errors += r[i].errors;
        }
        all = malloc((total > 0 ? total : 1) * sizeof(int64_t));
        for (int i = 0, k = 0; i < b->threads; i++) {
                if (all != NULL) {
                        memcpy(all + k, r[i].samples_ns, r[i].n * sizeof(int64_t));
                }
                k += (int)r[i].n;
                free(r[i].samples_ns);
        }
        if (all == NULL || total == 0) {
                free(all);
                return -1;
        }
        bench_sort_ns(all, total);
        out->n = total;
        out->p50_us = (double)bench_percentile_ns(all, total, 50) / 1000.0;
        out->p99_us = (double)bench_percentile_ns(all, total, 99) / 1000.0;
        out->per_s = (double)total / ((double)(bench_now_ns() - start) / 1e9);
        free(all);
        return 0;
}

static void print_phase(const char *name, const phase *p)
{
        printf("%-22s p50 %8.0f us   p99 %8.0f us   %8.0f calls/s   (%zu calls, %ld errors)\n",
               name, p->p50_us, p->p99_us, p->per_s, p->n, p->errors);
}

static int storm_phase(bench *b, phase *out)
{
        pthread_t t[STORM_MAX];
        struct timespec warm = {WARMUP_MS / 1000, (WARMUP_MS % 1000) * 1000000L};
        int rc;

        atomic_store(&b->storm_stop, false);
        for (int i = 0; i < b->storm; i++) {
                if (pthread_create(&t[i], NULL, storm_main, b) != 0) {
                        return -1;
                }
        }
        nanosleep(&warm, NULL); /* the hash pool fills, refusals start */
        atomic_store(&b->logins_ok, 0);
        atomic_store(&b->logins_refused, 0);
        atomic_store(&b->logins_other, 0);
        rc = measure(b, out);
        atomic_store(&b->storm_stop, true);
        for (int i = 0; i < b->storm; i++) {
                pthread_join(t[i], NULL);
        }
        return rc;
}

static int parse_args(int argc, char **argv, bench *b, char *broker, size_t broker_len)
{
        broker[0] = '\0';
        for (int i = 1; i < argc; i++) {
                const char *v = i + 1 < argc ? argv[i + 1] : NULL;
                int known;

                if (v == NULL ||
                    (known = bench_broker_option(argv[i], v, broker, broker_len)) < 0) {
                        return -1;
                }
                if (known) {
                        /* --stack or --broker */
                } else if (strcmp(argv[i], "--threads") == 0) {
                        b->threads = atoi(v);
                } else if (strcmp(argv[i], "--storm") == 0) {
                        b->storm = atoi(v);
                } else if (strcmp(argv[i], "--seconds") == 0) {
                        b->seconds = atoi(v);
                } else if (strcmp(argv[i], "--backoff-ms") == 0) {
                        b->backoff_ms = atoi(v);
                } else {
                        return -1;
                }
                i++;
        }
        return broker[0] != '\0' && b->threads >= 1 && b->threads <= THREADS_MAX && b->storm >= 1 &&
                       b->storm <= STORM_MAX && b->seconds >= 1 && b->seconds <= 600 &&
                       b->backoff_ms >= 0 && b->backoff_ms <= 10000
                   ? 0
                   : -1;
}

int main(int argc, char **argv)
{
        static bench b;
        char broker[KS_URL_MAX];
        phase alone, storm;

        ks_log_init("bench", KS_LOG_WARN);
        b.threads = 4;
        b.storm = 32;
        b.seconds = 5;
        if (parse_args(argc, argv, &b, broker, sizeof(broker)) != 0) {
                fprintf(stderr,
                        "usage: %s --stack DIR | --broker tcp://host:port [--threads N]"
                        " [--storm N] [--seconds S] [--backoff-ms MS]\n",
                        argv[0]);
                return 2;
        }
        if (bench_auth_client(&b.client, broker, THREADS_MAX + STORM_MAX + 8) != 0 ||
            setup_account(&b) != KS_OK) {
                fprintf(stderr, "cannot reach auth through %s\n", broker);
                ks_rpc_client_free(b.client);
                return 1;
        }
        printf("ResolveContext, %d threads, %d s per phase; login storm: %d threads, %d ms backoff"
               " after a refusal\n",
               b.threads, b.seconds, b.storm, b.backoff_ms);
        if (measure(&b, &alone) != 0 || storm_phase(&b, &storm) != 0) {
                fprintf(stderr, "measurement failed (no successful calls)\n");
                ks_rpc_client_free(b.client);
                return 1;
        }
        print_phase("alone", &alone);
        print_phase("during login storm", &storm);
        printf("ratio storm/alone      p50 %.2f   p99 %.2f   throughput %.2f\n",
               storm.p50_us / alone.p50_us, storm.p99_us / alone.p99_us, storm.per_s / alone.per_s);
        printf("login storm            %ld logins/s served, %ld/s refused (resource_exhausted),"
               " %ld/s other errors\n",
               atomic_load(&b.logins_ok) / b.seconds, atomic_load(&b.logins_refused) / b.seconds,
               atomic_load(&b.logins_other) / b.seconds);
        ks_rpc_client_free(b.client);
        return 0;
}
