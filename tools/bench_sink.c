#include "bench_sink.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_support.h"

#define DRAIN_WAIT_MS 10000 /* for the connections' threads to end at stop */

struct bench_sink {
        bench_sink_options o;
        int lfd;
        int port;
        pthread_t acceptor;
        pthread_mutex_t mu;
        int fds[BENCH_SINK_CONNS_MAX]; /* open connections (mu); -1: free slot */
        atomic_int live;               /* connection threads still running */
        atomic_long accepted;
};

typedef struct conn {
        bench_sink *s;
        int slot;
} conn;

/* ---- requests -------------------------------------------------------------------------------- */

size_t bench_sink_header(const bench_sink_request *r, const char *name, const char **value)
{
        size_t name_len = strlen(name);
        const char *p = memchr(r->head, '\n', r->head_len); /* past the request line */
        const char *end = r->head + r->head_len;

        while (p != NULL && ++p < end) {
                const char *eol = memchr(p, '\n', (size_t)(end - p));
                if (eol == NULL) {
                        break;
                }
                if ((size_t)(eol - p) > name_len && p[name_len] == ':' &&
                    strncasecmp(p, name, name_len) == 0) {
                        const char *v = p + name_len + 1, *e = eol;
                        while (v < e && (*v == ' ' || *v == '\t')) {
                                v++;
                        }
                        while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) {
                                e--;
                        }
                        *value = v;
                        return (size_t)(e - v);
                }
                p = eol;
        }
        return 0;
}

size_t bench_sink_path(const bench_sink_request *r, const char **path)
{
        const char *sp = memchr(r->head, ' ', r->head_len);
        const char *end = r->head + r->head_len;
        const char *e = sp != NULL ? memchr(sp + 1, ' ', (size_t)(end - sp - 1)) : NULL;

        if (e == NULL) {
                return 0;
        }
        *path = sp + 1;
        return (size_t)(e - sp - 1);
}

/* The length of the request at the front of buf (have bytes): 0 while incomplete, -1 bad. */
static long request_len(const bench_sink *s, const char *buf, size_t have, size_t *head_len)
{
        const char *end = memmem(buf, have, "\r\n\r\n", 4);

        if (end == NULL) {
                return have >= BENCH_SINK_HEAD_MAX ? -1 : 0;
        }
        bench_sink_request r = {.head = buf, .head_len = (size_t)(end - buf) + 4};
        const char *cl = NULL;
        size_t body = bench_sink_header(&r, "content-length", &cl) > 0 ? strtoul(cl, NULL, 10) : 0;
        if (body > s->o.body_bytes_max) {
                return -1;
        }
        *head_len = r.head_len;
        return have >= r.head_len + body ? (long)(r.head_len + body) : 0;
}

/* Reads requests and answers each 200 until the client closes (or the sink stops). */
static void *sink_conn(void *arg)
{
        conn *c = arg;
        bench_sink *s = c->s;
        int fd = s->fds[c->slot]; /* set before this thread started */
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
        size_t cap = BENCH_SINK_HEAD_MAX + s->o.body_bytes_max;
        char *buf = malloc(cap);
        size_t have = 0, head_len = 0;

        while (buf != NULL) {
                long total = request_len(s, buf, have, &head_len);
                if (total < 0) {
                        break;
                }
                if (total > 0) {
                        if (s->o.hook != NULL) {
                                const bench_sink_request r = {.head = buf,
                                                              .head_len = head_len,
                                                              .body = buf + head_len,
                                                              .body_len = (size_t)total - head_len,
                                                              .arrival_ns = bench_now_ns()};
                                s->o.hook(&r, s->o.hook_arg);
                        }
                        if (send(fd, ok, sizeof ok - 1, MSG_NOSIGNAL) != sizeof ok - 1) {
                                break;
                        }
                        memmove(buf, buf + total, have - (size_t)total);
                        have -= (size_t)total;
                        continue;
                }
                ssize_t n = have == cap ? 0 : recv(fd, buf + have, cap - have, 0);
                if (n <= 0) {
                        break;
                }
                have += (size_t)n;
        }
        free(buf);
        pthread_mutex_lock(&s->mu);
        s->fds[c->slot] = -1;
        pthread_mutex_unlock(&s->mu);
        close(fd);
        free(c);
        atomic_fetch_sub(&s->live, 1);
        return NULL;
}

/* A free slot for fd, or -1. Under mu. */
static int slot_take(bench_sink *s, int fd)
{
        for (int i = 0; i < BENCH_SINK_CONNS_MAX; i++) {
                if (s->fds[i] < 0) {
                        s->fds[i] = fd;
                        return i;
                }
        }
        return -1;
}

static void *sink_accept(void *arg)
{
        bench_sink *s = arg;

        for (;;) {
                int fd = accept(s->lfd, NULL, NULL);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED) {
                                continue;
                        }
                        return NULL; /* the listening socket was shut down */
                }
                conn *c = malloc(sizeof(*c));
                pthread_mutex_lock(&s->mu);
                int slot = c != NULL ? slot_take(s, fd) : -1;
                pthread_mutex_unlock(&s->mu);
                pthread_t t;
                atomic_fetch_add(&s->accepted, 1);
                atomic_fetch_add(&s->live, 1);
                if (slot >= 0) {
                        *c = (conn){s, slot};
                        if (pthread_create(&t, NULL, sink_conn, c) == 0) {
                                pthread_detach(t);
                                continue;
                        }
                        pthread_mutex_lock(&s->mu);
                        s->fds[slot] = -1;
                        pthread_mutex_unlock(&s->mu);
                }
                atomic_fetch_sub(&s->live, 1);
                free(c);
                close(fd);
        }
}

int bench_sink_start(bench_sink **out, const bench_sink_options *o)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        bench_sink *s = calloc(1, sizeof(*s));

        *out = NULL;
        if (s == NULL) {
                return -1;
        }
        s->o = *o;
        pthread_mutex_init(&s->mu, NULL);
        for (int i = 0; i < BENCH_SINK_CONNS_MAX; i++) {
                s->fds[i] = -1;
        }
        s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
            listen(s->lfd, 1024) != 0 || getsockname(s->lfd, (struct sockaddr *)&a, &len) != 0 ||
            pthread_create(&s->acceptor, NULL, sink_accept, s) != 0) {
                int e = errno;
                if (s->lfd >= 0) {
                        close(s->lfd);
                }
                pthread_mutex_destroy(&s->mu);
                free(s);
                errno = e;
                return -1;
        }
        s->port = ntohs(a.sin_port);
        *out = s;
        return 0;
}

int bench_sink_port(const bench_sink *s)
{
        return s->port;
}

long bench_sink_accepted(const bench_sink *s)
{
        return atomic_load(&s->accepted);
}

void bench_sink_stop(bench_sink *s)
{
        if (s == NULL) {
                return;
        }
        shutdown(s->lfd, SHUT_RDWR);
        pthread_join(s->acceptor, NULL);
        close(s->lfd);
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < BENCH_SINK_CONNS_MAX; i++) {
                if (s->fds[i] >= 0) {
                        shutdown(s->fds[i], SHUT_RDWR); /* its thread's recv returns 0 */
                }
        }
        pthread_mutex_unlock(&s->mu);
        int64_t until = bench_now_ns() + DRAIN_WAIT_MS * 1000000LL;
        while (atomic_load(&s->live) > 0 && bench_now_ns() < until) {
                usleep(1000);
        }
        if (atomic_load(&s->live) == 0) {
                pthread_mutex_destroy(&s->mu);
                free(s);
        }
}

/* ---- the baseline ---------------------------------------------------------------------------- */

int64_t bench_thread_cpu_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static size_t discard(char *p, size_t size, size_t n, void *user)
{
        (void)p, (void)user;
        return size * n;
}

/* What one run shares with its handles. */
typedef struct posts_run {
        const bench_posts *p;
        CURLM *m;
        struct curl_slist *headers;
        int64_t *start_ns; /* by POST */
        long started;
} posts_run;

static bool post_start(posts_run *run)
{
        const bench_posts *p = run->p;
        long id = run->started;
        CURL *e = curl_easy_init();

        if (e == NULL) {
                return false;
        }
        curl_easy_setopt(e, CURLOPT_URL, p->urls[(size_t)id % p->urls_n]);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(e, CURLOPT_PROXY, "");
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 15000L);
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)p->body_len);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, p->body);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, run->headers);
        curl_easy_setopt(e, CURLOPT_USERAGENT, "keelson-webhook/1");
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(e, CURLOPT_PRIVATE, (void *)(intptr_t)id);
        run->start_ns[id] = bench_now_ns();
        if (curl_multi_add_handle(run->m, e) != CURLM_OK) {
                curl_easy_cleanup(e);
                return false;
        }
        run->started++;
        return true;
}

/* Starts the next POST if there is one to start; false when a handle could not be made. */
static bool post_next(posts_run *run)
{
        const bench_posts *p = run->p;

        if (run->started >= p->n || (p->deadline_ns > 0 && bench_now_ns() >= p->deadline_ns)) {
                return true;
        }
        return post_start(run);
}

/* Counts the POSTs that ended; false when a next one could not be started. */
static bool posts_reap(posts_run *run, bench_posts_result *out)
{
        const bench_posts *p = run->p;
        CURLMsg *msg;
        int left;
        bool ok = true;

        while ((msg = curl_multi_info_read(run->m, &left)) != NULL) {
                intptr_t id = 0;
                long status = 0;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&id);
                curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
                bool answered = msg->data.result == CURLE_OK && status == 200;
                if (answered && p->lat_ns != NULL) {
                        p->lat_ns[out->done] = bench_now_ns() - run->start_ns[id];
                }
                answered ? out->done++ : out->failed++;
                curl_multi_remove_handle(run->m, msg->easy_handle);
                curl_easy_cleanup(msg->easy_handle);
                ok = ok && post_next(run);
        }
        return ok;
}

int bench_curl_posts(const bench_posts *p, bench_posts_result *out)
{
        posts_run run = {.p = p};
        bool ok = true;

        memset(out, 0, sizeof(*out));
        for (size_t i = 0; i < p->headers_n; i++) {
                run.headers = curl_slist_append(run.headers, p->headers[i]);
        }
        run.headers = curl_slist_append(run.headers, "Expect:");
        run.start_ns = malloc((size_t)p->n * sizeof(int64_t));
        run.m = curl_multi_init();
        if (run.headers == NULL || run.start_ns == NULL || run.m == NULL) {
                ok = false;
                goto done;
        }
        curl_multi_setopt(run.m, CURLMOPT_MAXCONNECTS, p->concurrency);
        int64_t t0 = bench_now_ns(), c0 = bench_thread_cpu_ns();
        while (ok && run.started < p->concurrency && run.started < p->n) {
                ok = post_start(&run);
        }
        while (out->done + out->failed < run.started) {
                int running;
                curl_multi_perform(run.m, &running);
                ok = posts_reap(&run, out) && ok;
                if (out->done + out->failed < run.started) {
                        curl_multi_poll(run.m, NULL, 0, 1000, NULL);
                }
        }
        out->cpu_ns = bench_thread_cpu_ns() - c0;
        out->wall_ns = bench_now_ns() - t0;
done:
        curl_multi_cleanup(run.m);
        curl_slist_free_all(run.headers);
        free(run.start_ns);
        return ok ? 0 : -1;
}
