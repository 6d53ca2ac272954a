/*
 * bench_webhook_send: webhook deliveries per second through the sender
 * (services/webhook/sender.c) to a sink in this process, against libcurl
 * alone doing the same POSTs.
 *
 *   bench_webhook_send [-n attempts] [-c concurrency] [-b body bytes]
 *                      [-r rounds] [-t seconds per phase]
 *
 * The sink listens on 127.0.0.1 (a thread per connection, keep-alive) and
 * answers every request 200 with an empty body once it has read it whole.
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
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_support.h"
#include "sender.h"

#define ATTEMPTS_MAX    1000000
#define CONCURRENCY_MAX 1024
#define BODY_MAX        (1024 * 1024)
#define ROUNDS_MAX      9
#define SECONDS_MAX     600
#define SINK_HEAD_MAX   16384
#define DRAIN_WAIT_MS   10000 /* for the sink's threads to see their connections close */

typedef struct options {
        long n, c, body, rounds, seconds;
} options;

/* ---- the sink ---------------------------------------------------------------- */

static atomic_int sink_live;      /* connection threads still running */
static atomic_long sink_accepted; /* connections accepted, ever */
static long sink_body_max;

/* Reads requests (by Content-Length) and answers each 200 until the client closes. */
static void *sink_conn(void *arg)
{
        int fd = (int)(intptr_t)arg;
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        size_t cap = SINK_HEAD_MAX + (size_t)sink_body_max;
        char *buf = malloc(cap);
        size_t have = 0;
        while (buf != NULL) {
                char *end = memmem(buf, have, "\r\n\r\n", 4);
                if (end != NULL) {
                        size_t head = (size_t)(end - buf) + 4;
                        char *cl = memmem(buf, head, "Content-Length: ", 16);
                        size_t total = head + (cl == NULL ? 0 : strtoul(cl + 16, NULL, 10));
                        if (total > cap) {
                                break;
                        }
                        if (have >= total) {
                                if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) != sizeof ok - 1) {
                                        break;
                                }
                                memmove(buf, buf + total, have - total);
                                have -= total;
                                continue;
                        }
                }
                ssize_t n = have == cap ? 0 : recv(fd, buf + have, cap - have, 0);
                if (n <= 0) {
                        break;
                }
                have += (size_t)n;
        }
        free(buf);
        close(fd);
        atomic_fetch_sub(&sink_live, 1);
        return NULL;
}

static void *sink_accept(void *arg)
{
        int lfd = (int)(intptr_t)arg;
        for (;;) {
                int fd = accept(lfd, NULL, NULL);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED) {
                                continue;
                        }
                        return NULL; /* the listening socket was shut down */
                }
                pthread_t t;
                atomic_fetch_add(&sink_accepted, 1);
                atomic_fetch_add(&sink_live, 1);
                if (pthread_create(&t, NULL, sink_conn, (void *)(intptr_t)fd) != 0) {
                        atomic_fetch_sub(&sink_live, 1);
                        close(fd);
                        continue;
                }
                pthread_detach(t);
        }
}

/* Listens on a free loopback port; returns the port, or -1. */
static int sink_start(int *lfd, pthread_t *t)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        *lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (*lfd < 0 || bind(*lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
            listen(*lfd, 1024) != 0 || getsockname(*lfd, (struct sockaddr *)&a, &len) != 0 ||
            pthread_create(t, NULL, sink_accept, (void *)(intptr_t)*lfd) != 0) {
                return -1;
        }
        return ntohs(a.sin_port);
}

static void sink_stop(int lfd, pthread_t t)
{
        shutdown(lfd, SHUT_RDWR);
        pthread_join(t, NULL);
        close(lfd);
        int64_t until = bench_now_ns() + DRAIN_WAIT_MS * 1000000LL;
        while (atomic_load(&sink_live) > 0 && bench_now_ns() < until) {
                usleep(1000);
        }
}

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

static int64_t thread_cpu_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static const options *opt;
static char url[64];
static char *body;
static const wh_header HEADERS[] = {
    {"webhook-id", "msg_2mPq8fJ3bench"},
    {"webhook-timestamp", "1767225600"},
    {"webhook-signature", "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="},
    {"content-type", "application/json"},
};

/* ---- the baseline: libcurl's multi interface, nothing else -------------------- */

static size_t discard(char *p, size_t size, size_t n, void *user)
{
        (void)p, (void)user;
        return size * n;
}

static CURL *baseline_easy(struct curl_slist *headers, long id)
{
        CURL *e = curl_easy_init();
        if (e == NULL) {
                return NULL;
        }
        curl_easy_setopt(e, CURLOPT_URL, url);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 15000L);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)opt->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(e, CURLOPT_USERAGENT, "keelson-webhook/1");
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)(intptr_t)id);
        return e;
}

static bool baseline_start(CURLM *m, struct curl_slist *h, phase *p, long id)
{
        CURL *e = baseline_easy(h, id);
        p->start_ns[id] = bench_now_ns();
        return e != NULL && curl_multi_add_handle(m, e) == CURLM_OK;
}

static void run_baseline(phase *p)
{
        struct curl_slist *h = NULL;
        for (size_t i = 0; i < sizeof HEADERS / sizeof HEADERS[0]; i++) {
                char line[256];
                snprintf(line, sizeof line, "%s: %s", HEADERS[i].name, HEADERS[i].value);
                h = curl_slist_append(h, line);
        }
        h = curl_slist_append(h, "Expect:");
        CURLM *m = curl_multi_init();
        curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, opt->c);
        int64_t t0 = bench_now_ns(), c0 = thread_cpu_ns();
        int64_t until = t0 + opt->seconds * 1000000000LL;
        long started = 0;
        while (started < opt->c && started < opt->n && baseline_start(m, h, p, started)) {
                started++;
        }
        while (p->done + p->failed < started) {
                int running;
                curl_multi_perform(m, &running);
                CURLMsg *msg;
                int left;
                while ((msg = curl_multi_info_read(m, &left)) != NULL) {
                        intptr_t id = 0;
                        long status = 0;
                        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&id);
                        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
                        bool ok = msg->data.result == CURLE_OK && status == 200;
                        p->lat_ns[p->done] = bench_now_ns() - p->start_ns[id];
                        ok ? p->done++ : p->failed++;
                        curl_multi_remove_handle(m, msg->easy_handle);
                        curl_easy_cleanup(msg->easy_handle);
                        if (started < opt->n && bench_now_ns() < until &&
                            baseline_start(m, h, p, started)) {
                                started++;
                        }
                }
                if (p->done + p->failed < started) {
                        curl_multi_poll(m, NULL, 0, 1000, NULL);
                }
        }
        p->cpu_ns = thread_cpu_ns() - c0;
        p->wall_ns = bench_now_ns() - t0;
        curl_multi_cleanup(m);
        curl_slist_free_all(h);
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
                run.cpu_ns = thread_cpu_ns();
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
        sink_body_max = o.body;
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
        int lfd;
        pthread_t acceptor;
        int port = sink_start(&lfd, &acceptor);
        if (port < 0) {
                fprintf(stderr, "bench_webhook_send: no sink: %s\n", strerror(errno));
                return 1;
        }
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
                        long accepted = atomic_load(&sink_accepted);
                        if (i == 0) {
                                run_baseline(p);
                        } else if (run_sender(p) != 0) {
                                fprintf(stderr, "bench_webhook_send: no sender\n");
                                return 1;
                        }
                        p->connections = atomic_load(&sink_accepted) - accepted;
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
        sink_stop(lfd, acceptor);
        curl_global_cleanup();
        for (int i = 0; i < 2; i++) {
                free(ph[i].lat_ns);
                free(ph[i].start_ns);
        }
        free(body);
        return 0;
}
