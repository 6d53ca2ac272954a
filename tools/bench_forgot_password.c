/*
 * bench_forgot_password: does ForgotPassword take the same time for an
 * address with an account and for one without? (It must: a difference
 * would tell an attacker which addresses are registered.)
 *
 *   bench_forgot_password --stack DIR [--calls N] [--per-address K]
 *   bench_forgot_password --broker tcp://127.0.0.1:7400 [...]
 *
 * Talks to auth over the broker as the gateway does (ks_rpc), so that the
 * gateway's per-address rate limit is not what is measured. It signs up
 * ceil(N / K) accounts first. Then N rounds, each one ForgotPassword for a
 * known address and one for an unknown one (a fresh random address), in an
 * order that alternates from round to round, so that both series see the
 * same moments of the machine. K (default 5, KEELSON_AUTH_RESET_MAX_PER_WINDOW's
 * default) is how many requests each known address gets: at most that many
 * mails per address and hour are queued, so every known request measured
 * stores a token and queues a mail (the expensive path). A third series,
 * interleaved the same way, is a known address beyond that limit (its
 * requests store and queue nothing).
 *
 * It prints p50 and p99 of each series and their ratios known/unknown. A
 * ratio near 1 is the point; each call is one statement in one transaction
 * either way (services/auth/reset.c).
 */
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

#define CALLS_MAX    100000
#define ACCOUNTS_MAX 20000
#define EMAIL_MAX    96
#define PASSWORD     "bench horse battery staple"

enum { KNOWN, UNKNOWN, OVER_LIMIT, SERIES };

static const char *const series_names[SERIES] = {"known address", "unknown address",
                                                 "known, over mail limit"};

typedef struct bench {
        ks_rpc_client *client;
        int calls, per_address, accounts;
        char (*emails)[EMAIL_MAX]; /* accounts known addresses */
        char over_limit[EMAIL_MAX];
        int64_t *samples_ns[SERIES];
        long errors;
} bench;

static int call(bench *b, const char *method, const ProtobufCMessage *m)
{
        ks_rpc_result res;
        int rc = bench_auth_call(b->client, "bench-forgot-password", method, m, &res);

        ks_rpc_result_clear(&res);
        return rc;
}

static int random_email(const char *what, char out[EMAIL_MAX])
{
        uint8_t rnd[8];
        char hex[2 * KS_SHA256_BYTES + 1];

        if (ks_random_bytes(rnd, sizeof(rnd)) != 0) {
                return -1;
        }
        ks_sha256_hex(rnd, sizeof(rnd), hex);
        snprintf(out, EMAIL_MAX, "bench-%s-%.16s@example.test", what, hex);
        return 0;
}

static int sign_up(bench *b, const char *email)
{
        Keelson__Auth__V1__SignUpRequest req = KEELSON__AUTH__V1__SIGN_UP_REQUEST__INIT;
        int rc;

        req.email = (char *)email;
        req.password = PASSWORD;
        req.tenant_name = "Bench";
        /* The hash pool may be busy with the previous sign-ups: wait, do not give up. */
        for (int tries = 0; tries < 100; tries++) {
                if ((rc = call(b, "keelson.auth.v1.AuthService/SignUp", &req.base)) !=
                    KS_RESOURCE_EXHAUSTED) {
                        break;
                }
                nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        }
        return rc;
}

static int forgot(bench *b, const char *email)
{
        Keelson__Auth__V1__ForgotPasswordRequest req =
            KEELSON__AUTH__V1__FORGOT_PASSWORD_REQUEST__INIT;

        req.email = (char *)email;
        return call(b, "keelson.auth.v1.AuthService/ForgotPassword", &req.base);
}

/* The known accounts, and one that has used up its mails for the window. */
static int setup_accounts(bench *b)
{
        int rc;

        b->accounts = (b->calls + b->per_address - 1) / b->per_address;
        if (b->accounts > ACCOUNTS_MAX ||
            (b->emails = calloc((size_t)b->accounts, sizeof(*b->emails))) == NULL) {
                return -1;
        }
        fprintf(stderr, "signing up %d accounts...\n", b->accounts + 1);
        for (int i = 0; i <= b->accounts; i++) {
                char *email = i < b->accounts ? b->emails[i] : b->over_limit;

                if (random_email("known", email) != 0 || (rc = sign_up(b, email)) != KS_OK) {
                        fprintf(stderr, "SignUp failed: %s\n", ks_code_name(rc));
                        return -1;
                }
        }
        /* KEELSON_AUTH_RESET_MAX_PER_WINDOW is at most 1000: this exhausts any setting. */
        for (int i = 0; i < 1000; i++) {
                if ((rc = forgot(b, b->over_limit)) != KS_OK) {
                        fprintf(stderr, "ForgotPassword failed: %s\n", ks_code_name(rc));
                        return -1;
                }
        }
        return 0;
}

/* One timed call into series s; an error is counted (and its time kept all the same). */
static void timed(bench *b, int s, int round, const char *email)
{
        int64_t t0 = bench_now_ns();
        int rc = forgot(b, email);

        if (rc != KS_OK) {
                b->errors++;
        }
        b->samples_ns[s][round] = bench_now_ns() - t0;
}

static int run(bench *b)
{
        char unknown[EMAIL_MAX];

        for (int s = 0; s < SERIES; s++) {
                if ((b->samples_ns[s] = calloc((size_t)b->calls, sizeof(int64_t))) == NULL) {
                        return -1;
                }
        }
        for (int round = 0; round < b->calls; round++) {
                const char *known = b->emails[round / b->per_address];

                if (random_email("nobody", unknown) != 0) {
                        return -1;
                }
                /* Alternating orders: neither series always comes first. */
                switch (round % 3) {
                case 0:
                        timed(b, KNOWN, round, known);
                        timed(b, UNKNOWN, round, unknown);
                        timed(b, OVER_LIMIT, round, b->over_limit);
                        break;
                case 1:
                        timed(b, UNKNOWN, round, unknown);
                        timed(b, OVER_LIMIT, round, b->over_limit);
                        timed(b, KNOWN, round, known);
                        break;
                default:
                        timed(b, OVER_LIMIT, round, b->over_limit);
                        timed(b, KNOWN, round, known);
                        timed(b, UNKNOWN, round, unknown);
                        break;
                }
        }
        return 0;
}

typedef struct figures {
        double p50_us, p99_us, mean_us;
} figures;

static figures summarize(int64_t *v, int n)
{
        figures f;
        double sum = 0;

        bench_sort_ns(v, (size_t)n);
        for (int i = 0; i < n; i++) {
                sum += (double)v[i];
        }
        f.p50_us = (double)bench_percentile_ns(v, (size_t)n, 50) / 1000.0;
        f.p99_us = (double)bench_percentile_ns(v, (size_t)n, 99) / 1000.0;
        f.mean_us = sum / n / 1000.0;
        return f;
}

static int parse_args(int argc, char **argv, bench *b, char *broker, size_t broker_len)
{
        broker[0] = '\0';
        for (int i = 1; i + 1 < argc; i += 2) {
                const char *v = argv[i + 1];
                int known = bench_broker_option(argv[i], v, broker, broker_len);

                if (known < 0) {
                        return -1;
                } else if (known) {
                        /* --stack or --broker */
                } else if (strcmp(argv[i], "--calls") == 0) {
                        b->calls = atoi(v);
                } else if (strcmp(argv[i], "--per-address") == 0) {
                        b->per_address = atoi(v);
                } else {
                        return -1;
                }
        }
        return argc % 2 == 1 && broker[0] != '\0' && b->calls >= 10 && b->calls <= CALLS_MAX &&
                       b->per_address >= 1 && b->per_address <= 1000
                   ? 0
                   : -1;
}

static void report(bench *b)
{
        figures f[SERIES];

        for (int s = 0; s < SERIES; s++) {
                f[s] = summarize(b->samples_ns[s], b->calls);
                printf("%-24s p50 %8.0f us   p99 %8.0f us   mean %8.0f us\n", series_names[s],
                       f[s].p50_us, f[s].p99_us, f[s].mean_us);
        }
        printf("ratio known/unknown      p50 %.2f   p99 %.2f   mean %.2f\n",
               f[KNOWN].p50_us / f[UNKNOWN].p50_us, f[KNOWN].p99_us / f[UNKNOWN].p99_us,
               f[KNOWN].mean_us / f[UNKNOWN].mean_us);
        printf("ratio over-limit/unknown p50 %.2f   p99 %.2f   mean %.2f\n",
               f[OVER_LIMIT].p50_us / f[UNKNOWN].p50_us, f[OVER_LIMIT].p99_us / f[UNKNOWN].p99_us,
               f[OVER_LIMIT].mean_us / f[UNKNOWN].mean_us);
        printf("errors                   %ld of %d calls\n", b->errors, SERIES * b->calls);
}

static void bench_free(bench *b)
{
        for (int s = 0; s < SERIES; s++) {
                free(b->samples_ns[s]);
        }
        free(b->emails);
        ks_rpc_client_free(b->client);
}

int main(int argc, char **argv)
{
        static bench b;
        char broker[KS_URL_MAX];
        int rc = 1;

        ks_log_init("bench", KS_LOG_WARN);
        b.calls = 1000;
        b.per_address = 5;
        if (parse_args(argc, argv, &b, broker, sizeof(broker)) != 0) {
                fprintf(stderr,
                        "usage: %s --stack DIR | --broker tcp://host:port [--calls N (10..%d)]"
                        " [--per-address K (1..1000)]\n",
                        argv[0], CALLS_MAX);
                return 2;
        }
        if (bench_auth_client(&b.client, broker, 8) != 0) {
                fprintf(stderr, "cannot reach auth through %s\n", broker);
        } else if (setup_accounts(&b) == 0 && run(&b) == 0) {
                printf("ForgotPassword over the broker, %d rounds of one call per series,"
                       " interleaved; %d requests per known address\n",
                       b.calls, b.per_address);
                report(&b);
                rc = 0;
        }
        bench_free(&b);
        return rc;
}
