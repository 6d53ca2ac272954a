/*
 * bench_webhook_send: webhook deliveries per second through the sender
 * (services/webhook/sender.c) to a sink in this process, against libcurl
 * alone doing the same POSTs.
 *
 *   bench_webhook_send [-n attempts] [-c concurrency] [-b body bytes]
 *                      [-r rounds] [-t seconds per phase]
 *
 * The sink (tools/bench_sink.c) listens on 127.0.0.1 (a thread per
 * connection, keep-alive) and answers every request 200 with an empty body
 * once it has read it whole.
 * Each round runs two phases against it, N POSTs each with K in flight:
 *
 *   curl-multi  the baseline: one thread driving libcurl's multi interface
 *               with an easy handle per POST, the same URL, body, Standard
 *               Webhooks headers and hardening options, and nothing else: no
 *               address policy, no queue, no copies, no destination limits,
 *               no thread hop. What libcurl itself costs for these requests.
 *   wh_sender   the sender, attempts_max = destination_attempts_max = K (one
 *               destination here: its default of 4 would measure the limit,
 *               not the sender), allow-list 127.0.0.1/32. The first K are
 *               submitted from main, each next one from the callback of the
 *               one that ended, as a scheduler refilling its window would.
 *
 * The sink shares the machine's CPUs with the client in both phases, so the
 * deliveries/s ratio understates a client-side difference; the client's own
 * CPU time per delivery (its thread's CPU clock: the baseline's loop, the
 * sender's thread) is printed for that reason. Latency is from the POST's
 * submission (add_handle; wh_sender_submit) to its end (done message;
 * callback). Phases alternate, so that warm-up and a noisy neighbour fall on
 * both; the summary takes each phase's median round.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_sink.h"
#include "bench_support.h"
#include "sender.h"

#define ATTEMPTS_MAX    1000000
#define CONCURRENCY_MAX 1024
#define BODY_MAX        (1024 * 1024)
#define ROUNDS_MAX      9
#define SECONDS_MAX     600

typedef struct options {
        long n, c, body, rounds, seconds;
} options;

/* ---- what a phase measured ---------------------------------------------------- */

typedef struct phase {
        const char *name;
        int64_t *lat_ns; /* per POST, submission to end */
        int64_t *start_ns;
        long done;
        long failed;
        long connections; /* the sink accepted during the phase */
        int64_t wall_ns;
        int64_t cpu_ns; /* the client's thread */
} phase;

static const options *opt;
static char url[64];
static char *body;
static const wh_header HEADERS[] = {
    {"webhook-id", "msg_2mPq8fJ3bench"},
    {"webhook-timestamp", "1767225600"},
    {"webhook-signature", "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
    {"content-type", "application/json"},
};

/* ---- the baseline: libcurl's multi interface, nothing else (bench_sink.c) ------------- */

static void run_baseline(phase *p)
{
        char lines[sizeof HEADERS / sizeof HEADERS[0]][256];
        const char *h[sizeof HEADERS / sizeof HEADERS[0]];
        const char *urls[1] = {url};
        for (size_t i = 0; i < sizeof HEADERS / sizeof HEADERS[0]; i++) {
                snprintf(lines[i], sizeof lines[i], "%s: %s", HEADERS[i].name, HEADERS[i].value);
                h[i] = lines[i];
        }
        const bench_posts load = {.urls = urls,
                                  .urls_n = 1,
                                  .body = body,
                                  .body_len = (size_t)opt->body,
                                  .headers = h,
                                  .headers_n = sizeof h / sizeof h[0],
                                  .n = opt->n,
                                  .concurrency = opt->c,
                                  .deadline_ns = bench_now_ns() + opt->seconds * 1000000000LL,
                                  .lat_ns = p->lat_ns};
        bench_posts_result r;
        if (bench_curl_posts(&load, &r) != 0) {
                fprintf(stderr, "bench_webhook_send: the baseline could not start every POST\n");
        }
        p->done = r.done;
        p->failed = r.failed;
        p->wall_ns = r.wall_ns;
        p->cpu_ns = r.cpu_ns;
}

/* ---- the sender ------------------------------------------------------------------ */

/* What one sender phase shares with its callbacks; after the first K, only its thread. */
static struct {
        wh_sender *s;
        phase *p;
        long submitted;
        int64_t until_ns;
        int64_t cpu_ns; /* the sender's thread, read by the last callback */
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool finished;
} run = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void on_done(const wh_result *r, void *user);

static bool sender_submit(long id)
{
        wh_attempt a = {.url = url,
                        .body = body,
                        .body_len = (size_t)opt->body,
                        .headers = HEADERS,
                        .headers_n = sizeof HEADERS / sizeof HEADERS[0]};
        run.p->start_ns[id] = bench_now_ns();
        return wh_sender_submit(run.s, &a, on_done, (void *)(intptr_t)id) == KS_OK;
}

static void on_done(const wh_result *r, void *user)
{
        phase *p = run.p;
        long id = (long)(intptr_t)user;
        p->lat_ns[p->done] = bench_now_ns() - p->start_ns[id];
        r->outcome == WH_DELIVERED ? p->done++ : p->failed++;
        if (run.submitted < opt->n && bench_now_ns() < run.until_ns &&
            sender_submit(run.submitted)) {
                run.submitted++;
        }
        if (p->done + p->failed == run.submitted) {
                run.cpu_ns = bench_thread_cpu_ns();
                pthread_mutex_lock(&run.mu);
                run.finished = true;
                pthread_cond_signal(&run.cv);
                pthread_mutex_unlock(&run.mu);
        }
}

static int run_sender(phase *p)
{
        wh_sender_options o;
        wh_sender_options_init(&o);
        wh_addr_policy allow;
        char err[WH_ADDR_ERR_MAX];
        if (wh_addr_policy_parse(&allow, "127.0.0.1/32", err, sizeof err) != 0) {
                return -1;
        }
        o.allow = &allow;
        o.attempts_max = opt->c;
        o.destination_attempts_max = opt->c;
        o.queue_max = opt->c;
        o.body_bytes_max = opt->body > 0 ? opt->body : 1;
        run.p = p;
        run.finished = false;
        if (wh_sender_new(&run.s, &o) != KS_OK) {
                return -1;
        }
        long first = opt->c < opt->n ? opt->c : opt->n;
        int64_t t0 = bench_now_ns();
        run.until_ns = t0 + opt->seconds * 1000000000LL;
        run.submitted = first; /* before any callback can read it */
        for (long i = 0; i < first; i++) {
                if (!sender_submit(i)) {
                        fprintf(stderr, "bench_webhook_send: submit refused\n");
                        exit(1);
                }
        }
        pthread_mutex_lock(&run.mu);
        while (!run.finished) {
                pthread_cond_wait(&run.cv, &run.mu);
        }
        pthread_mutex_unlock(&run.mu);
        p->wall_ns = bench_now_ns() - t0;
        p->cpu_ns = run.cpu_ns;
        wh_sender_free(run.s);
        return 0;
}

/* ---- main ----------------------------------------------------------------------------- */

typedef struct figures {
        double rate; /* deliveries per wall-clock second */
        double p50_ms, p99_ms;
        double cpu_us; /* the client thread's CPU per delivery */
} figures;

static figures figures_of(phase *p)
{
        figures f = {0};
        if (p->done == 0) {
                return f;
        }
        bench_sort_ns(p->lat_ns, (size_t)p->done);
        f.rate = (double)p->done / ((double)p->wall_ns / 1e9);
        f.p50_ms = (double)bench_percentile_ns(p->lat_ns, (size_t)p->done, 50) / 1e6;
        f.p99_ms = (double)bench_percentile_ns(p->lat_ns, (size_t)p->done, 99) / 1e6;
        f.cpu_us = (double)p->cpu_ns / 1e3 / (double)p->done;
        return f;
}

static int by_rate(const void *a, const void *b)
{
        double x = ((const figures *)a)->rate, y = ((const figures *)b)->rate;
        return (x > y) - (x < y);
}

static bool parse_options(int argc, char **argv, options *o)
{
        *o = (options){.n = 20000, .c = 32, .body = 1024, .rounds = 3, .seconds = 60};
        static const struct {
                const char *flag;
                size_t offset;
                long min, max;
        } table[] = {
            {"-n", offsetof(options, n), 1, ATTEMPTS_MAX},
            {"-c", offsetof(options, c), 1, CONCURRENCY_MAX},
            {"-b", offsetof(options, body), 0, BODY_MAX},
            {"-r", offsetof(options, rounds), 1, ROUNDS_MAX},
            {"-t", offsetof(options, seconds), 1, SECONDS_MAX},
        };
        for (int i = 1; i < argc; i += 2) {
                size_t k = 0;
                while (k < sizeof table / sizeof table[0] && strcmp(argv[i], table[k].flag) != 0) {
                        k++;
                }
                char *end = NULL;
                long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
                if (k == sizeof table / sizeof table[0] || end == NULL || *end != '\0' ||
                    v < table[k].min || v > table[k].max) {
                        return false;
                }
                memcpy((char *)o + table[k].offset, &v, sizeof v);
        }
        return true;
}

static void print_row(long round, const char *name, const phase *p, const figures *f)
{
        printf("%-6ld %-11s %8ld %6ld %6ld %14.0f %9.2f %9.2f %12.1f\n", round, name, p->done,
               p->failed, p->connections, f->rate, f->p50_ms, f->p99_ms, f->cpu_us);
}

int main(int argc, char **argv)
{
        options o;
        if (!parse_options(argc, argv, &o)) {
                fprintf(stderr,
                        "usage: bench_webhook_send [-n attempts 1..%d] [-c concurrency "
                        "1..%d] [-b body bytes 0..%d] [-r rounds 1..%d] [-t seconds "
                        "per phase 1..%d]\n",
                        ATTEMPTS_MAX, CONCURRENCY_MAX, BODY_MAX, ROUNDS_MAX, SECONDS_MAX);
                return 2;
        }
        opt = &o;
        body = malloc((size_t)o.body + 1);
        phase ph[2] = {{.name = "curl-multi"}, {.name = "wh_sender"}};
        for (int i = 0; i < 2; i++) {
                ph[i].lat_ns = malloc((size_t)o.n * sizeof(int64_t));
                ph[i].start_ns = malloc((size_t)o.n * sizeof(int64_t));
        }
        if (body == NULL || ph[0].lat_ns == NULL || ph[1].lat_ns == NULL ||
            ph[0].start_ns == NULL || ph[1].start_ns == NULL ||
            curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                fprintf(stderr, "bench_webhook_send: out of memory\n");
                return 1;
        }
        for (long i = 0; i < o.body; i++) {
                body[i] = (char)('a' + i % 26);
        }
        bench_sink *sink;
        const bench_sink_options so = {.body_bytes_max = (size_t)o.body};
        if (bench_sink_start(&sink, &so) != 0) {
                fprintf(stderr, "bench_webhook_send: no sink: %s\n", strerror(errno));
                return 1;
        }
        int port = bench_sink_port(sink);
        snprintf(url, sizeof url, "http://127.0.0.1:%d/hook", port);
        printf("bench_webhook_send: %ld POSTs x %ld rounds, %ld in flight, body %ld B, to %s "
               "(in-process sink), libcurl %s, %ld CPUs\n",
               o.n, o.rounds, o.c, o.body, url, curl_version_info(CURLVERSION_NOW)->version,
               sysconf(_SC_NPROCESSORS_ONLN));
        printf("%-6s %-11s %8s %6s %6s %14s %9s %9s %12s\n", "round", "client", "ok", "failed",
               "conns", "deliveries/s", "p50 ms", "p99 ms", "CPU us/POST");
        figures f[2][ROUNDS_MAX];
        for (long r = 0; r < o.rounds; r++) {
                for (int i = 0; i < 2; i++) {
                        phase *p = &ph[i];
                        p->done = p->failed = 0;
                        long accepted = bench_sink_accepted(sink);
                        if (i == 0) {
                                run_baseline(p);
                        } else if (run_sender(p) != 0) {
                                fprintf(stderr, "bench_webhook_send: no sender\n");
                                return 1;
                        }
                        p->connections = bench_sink_accepted(sink) - accepted;
                        f[i][r] = figures_of(p);
                        print_row(r + 1, p->name, p, &f[i][r]);
                }
        }
        figures med[2];
        for (int i = 0; i < 2; i++) {
                qsort(f[i], (size_t)o.rounds, sizeof f[i][0], by_rate);
                med[i] = f[i][o.rounds / 2];
        }
        printf("median round: curl-multi %.0f/s, wh_sender %.0f/s; ratio wh_sender/curl-multi: "
               "deliveries/s %.2f, p50 %.2f, p99 %.2f, client CPU per POST %.2f\n",
               med[0].rate, med[1].rate, med[1].rate / med[0].rate, med[1].p50_ms / med[0].p50_ms,
               med[1].p99_ms / med[0].p99_ms, med[1].cpu_us / med[0].cpu_us);
        bench_sink_stop(sink);
        curl_global_cleanup();
        for (int i = 0; i < 2; i++) {
                free(ph[i].lat_ns);
                free(ph[i].start_ns);
        }
        free(body);
        return 0;
}
