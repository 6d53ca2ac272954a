/*
 * webhook_sink: a scripted HTTP/1.1 sink for the delivery tests
 * (webhook_sink.h). An accepting thread hands each connection to a thread
 * of its own; one mutex guards the script and the record, and one
 * condition variable (on the monotonic clock) tells waiters that a request
 * was recorded, that a connection ended, or that the sink stops.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "webhook_sink.h"

#define BUF_INITIAL   8192
#define BUF_MAX       (WSINK_HEAD_MAX + WSINK_BODY_MAX + 8192) /* a head, a body, a bit more */
#define RECORDS_FIRST 64

typedef struct step {
        int count;
        int status;
        int delay_ms;
} step;

enum { SLOT_FREE = 0, SLOT_RUNNING, SLOT_DONE };

/* A connection's thread: its state, its socket (shut down by wsink_stop while it runs). */
typedef struct slot {
        int state;
        int fd;
        pthread_t thread;
} slot;

struct wsink {
        int fd; /* listening */
        int port;
        int wake[2]; /* a byte on wake[1]: the acceptor ends */
        pthread_t acceptor;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int stopping;
        slot slots[WSINK_CONNS_MAX];
        step steps[WSINK_STEPS_MAX];
        int n_steps;
        int step_at;   /* the step the next request takes ... */
        int step_used; /* ... of whose count this many went */
        step dflt;
        wsink_request *reqs;
        int n_reqs, cap_reqs;
};

/* One connection, owned by its thread. */
typedef struct conn {
        wsink *s;
        int slot;
        int fd;
        char *buf;
        size_t len, cap;
} conn;

/* What the head said beside what is recorded. */
typedef struct head {
        long long content_length;
        int chunked;
        int close;
        int expect_continue;
} head;

int64_t wsink_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void deadline_in(struct timespec *ts, long ms)
{
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += ms / 1000;
        ts->tv_nsec += (ms % 1000) * 1000000L;
        if (ts->tv_nsec >= 1000000000L) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000L;
        }
}

/* ---- the wire -------------------------------------------------------------------------- */

static int send_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
                if (k < 0 && errno == EINTR) {
                        continue;
                }
                if (k <= 0) {
                        return -1;
                }
                p += k;
                n -= (size_t)k;
        }
        return 0;
}

static const char *reason(int status)
{
        switch (status) {
        case 200:
                return "OK";
        case 204:
                return "No Content";
        case 400:
                return "Bad Request";
        case 404:
                return "Not Found";
        case 410:
                return "Gone";
        case 413:
                return "Content Too Large";
        case 429:
                return "Too Many Requests";
        case 431:
                return "Request Header Fields Too Large";
        case 500:
                return "Internal Server Error";
        case 501:
                return "Not Implemented";
        case 502:
                return "Bad Gateway";
        case 503:
                return "Service Unavailable";
        default:
                return "Status";
        }
}

static int respond(int fd, int status, int close_after)
{
        char body[64], out[512];
        int b = snprintf(body, sizeof(body), "sink answers %d\n", status);
        int n =
            snprintf(out, sizeof(out),
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                     "%s\r\n%s",
                     status, reason(status), b, close_after ? "Connection: close\r\n" : "", body);
        return send_all(fd, out, (size_t)n);
}

/* More bytes into c->buf: 0, or -1 on the peer's end, an error, or a full buffer. */
static int recv_more(conn *c)
{
        if (c->cap - c->len < 4096 && c->cap < BUF_MAX) {
                size_t cap = c->cap * 2 > BUF_MAX ? BUF_MAX : c->cap * 2;
                char *b = realloc(c->buf, cap + 1);
                if (b == NULL) {
                        return -1;
                }
                c->buf = b;
                c->cap = cap;
        }
        if (c->len >= c->cap) {
                return -1;
        }
        for (;;) {
                ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
                if (k < 0 && errno == EINTR) {
                        continue;
                }
                if (k <= 0) {
                        return -1;
                }
                c->len += (size_t)k;
                c->buf[c->len] = '\0';
                return 0;
        }
}

/* Reads until the head is whole: its length in *head_len; -1 when the connection ends. */
static int read_head(conn *c, size_t *head_len)
{
        for (;;) {
                const char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
                if (end != NULL) {
                        *head_len = (size_t)(end - c->buf) + 4;
                        return 0;
                }
                if (c->len >= WSINK_HEAD_MAX) {
                        respond(c->fd, 431, 1);
                        return -1;
                }
                if (recv_more(c) != 0) {
                        return -1;
                }
        }
}

/* Copies [p, p + n) into out (out_len bytes), cut to fit, NUL-terminated. */
static void copy_cut(char *out, size_t out_len, const char *p, size_t n)
{
        if (n >= out_len) {
                n = out_len - 1;
        }
        memcpy(out, p, n);
        out[n] = '\0';
}

static int name_is(const char *name, size_t n, const char *want)
{
        return n == strlen(want) && strncasecmp(name, want, n) == 0;
}

/* One header line [p, p + n) into r and h; -1 when it is not "name: value". */
static int take_header(const char *p, size_t n, wsink_request *r, head *h)
{
        const char *colon = memchr(p, ':', n);
        if (colon == NULL || colon == p) {
                return -1;
        }
        size_t name_n = (size_t)(colon - p);
        const char *v = colon + 1, *end = p + n;
        while (v < end && (*v == ' ' || *v == '\t')) {
                v++;
        }
        while (end > v && (end[-1] == ' ' || end[-1] == '\t')) {
                end--;
        }
        size_t vn = (size_t)(end - v);
        char val[WSINK_VALUE_MAX];
        copy_cut(val, sizeof(val), v, vn);

        if (name_is(p, name_n, "content-length")) {
                char *stop = NULL;
                if (vn == 0 || val[0] < '0' || val[0] > '9') {
                        return -1;
                }
                h->content_length = strtoll(val, &stop, 10);
                return *stop == '\0' ? 0 : -1;
        }
        if (name_is(p, name_n, "transfer-encoding")) {
                h->chunked = strcasestr(val, "chunked") != NULL;
        } else if (name_is(p, name_n, "connection")) {
                h->close = strcasestr(val, "close") != NULL ? 1 : h->close;
                h->close = strcasestr(val, "keep-alive") != NULL ? 0 : h->close;
        } else if (name_is(p, name_n, "expect")) {
                h->expect_continue = strcasecmp(val, "100-continue") == 0;
        } else if (name_is(p, name_n, "host")) {
                copy_cut(r->host, sizeof(r->host), v, vn);
        } else if (name_is(p, name_n, "content-type")) {
                copy_cut(r->content_type, sizeof(r->content_type), v, vn);
        } else if (name_is(p, name_n, "webhook-id")) {
                copy_cut(r->webhook_id, sizeof(r->webhook_id), v, vn);
        } else if (name_is(p, name_n, "webhook-timestamp")) {
                copy_cut(r->webhook_timestamp, sizeof(r->webhook_timestamp), v, vn);
        } else if (name_is(p, name_n, "webhook-signature")) {
                copy_cut(r->webhook_signature, sizeof(r->webhook_signature), v, vn);
        }
        return 0;
}

/* The request line and headers of buf[0, len) (ending in CRLF CRLF): 0, or -1 when malformed. */
static int parse_head(const char *buf, size_t len, wsink_request *r, head *h)
{
        const char *eol = memmem(buf, len, "\r\n", 2);
        const char *sp1 = memchr(buf, ' ', (size_t)(eol - buf));
        const char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;

        memset(r, 0, sizeof(*r));
        memset(h, 0, sizeof(*h));
        if (sp2 == NULL || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
                return -1;
        }
        copy_cut(r->method, sizeof(r->method), buf, (size_t)(sp1 - buf));
        copy_cut(r->target, sizeof(r->target), sp1 + 1, (size_t)(sp2 - sp1 - 1));
        h->close = sp2[8] == '0'; /* HTTP/1.0 closes unless it says keep-alive */
        for (const char *p = eol + 2; p < buf + len - 2;) {
                const char *e = memmem(p, (size_t)(buf + len - p), "\r\n", 2);
                if (take_header(p, (size_t)(e - p), r, h) != 0) {
                        return -1;
                }
                p = e + 2;
        }
        return 0;
}

/* ---- the script and the record ------------------------------------------------------------ */

/* Under s->mu: the answer of the next request, as the script says. */
static step next_step_locked(wsink *s)
{
        while (s->step_at < s->n_steps && s->step_used >= s->steps[s->step_at].count) {
                s->step_at++;
                s->step_used = 0;
        }
        if (s->step_at < s->n_steps) {
                s->step_used++;
                return s->steps[s->step_at];
        }
        return s->dflt;
}

/* Under s->mu: r with a copy of body[0, n) appended to the record. 0, or -1 without memory. */
static int append_locked(wsink *s, wsink_request *r, const char *body, size_t n)
{
        if (s->n_reqs == s->cap_reqs) {
                wsink_request *more = realloc(s->reqs, (size_t)s->cap_reqs * 2 * sizeof(*more));
                if (more == NULL) {
                        return -1;
                }
                s->reqs = more;
                s->cap_reqs *= 2;
        }
        if ((r->body = malloc(n + 1)) == NULL) {
                return -1;
        }
        memcpy(r->body, body, n);
        r->body[n] = '\0';
        r->body_len = n;
        r->n = s->n_reqs;
        r->at_ms = wsink_now_ms();
        s->reqs[s->n_reqs++] = *r;
        pthread_cond_broadcast(&s->cv);
        return 0;
}

/*
 * Records r with body[0, n) and chooses its answer into *st. 0, or -1 when
 * the sink stops or memory ran out (the connection is then closed). Past
 * WSINK_REQUESTS_MAX, the answer is 503 and nothing is recorded.
 */
static int record(wsink *s, wsink_request *r, const char *body, size_t n, step *st)
{
        int rc = 0;

        pthread_mutex_lock(&s->mu);
        *st = next_step_locked(s);
        r->status = st->status;
        if (s->stopping) {
                rc = -1;
        } else if (s->n_reqs >= WSINK_REQUESTS_MAX) {
                *st = (step){0, 503, 0};
        } else {
                rc = append_locked(s, r, body, n);
        }
        pthread_mutex_unlock(&s->mu);
        return rc;
}

/* Waits ms, or less when the sink stops: 0, or -1 when it stops. */
static int pause_ms(wsink *s, int ms)
{
        struct timespec until;
        int stopped;

        deadline_in(&until, ms);
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {
        }
        stopped = s->stopping;
        pthread_mutex_unlock(&s->mu);
        return stopped ? -1 : 0;
}

/* ---- connections ----------------------------------------------------------------------------- */

/* One request read, recorded and answered: 0 to read the next on this connection, -1 to close. */
static int serve_one(conn *c)
{
        wsink_request r;
        head h;
        step st;
        size_t head_len;

        if (read_head(c, &head_len) != 0) {
                return -1;
        }
        if (parse_head(c->buf, head_len, &r, &h) != 0) {
                respond(c->fd, 400, 1);
                return -1;
        }
        if (h.chunked) {
                respond(c->fd, 501, 1);
                return -1;
        }
        if (h.content_length > WSINK_BODY_MAX) {
                respond(c->fd, 413, 1);
                return -1;
        }
        size_t whole = head_len + (size_t)h.content_length;
        if (h.expect_continue && c->len < whole &&
            send_all(c->fd, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0) {
                return -1;
        }
        while (c->len < whole) {
                if (recv_more(c) != 0) {
                        return -1;
                }
        }
        if (record(c->s, &r, c->buf + head_len, (size_t)h.content_length, &st) != 0) {
                return -1;
        }
        memmove(c->buf, c->buf + whole, c->len - whole); /* a pipelined next request */
        c->len -= whole;
        c->buf[c->len] = '\0';
        if (st.delay_ms > 0 && pause_ms(c->s, st.delay_ms) != 0) {
                return -1;
        }
        if (respond(c->fd, st.status, h.close) != 0) {
                return -1;
        }
        return h.close ? -1 : 0;
}

static void *conn_main(void *arg)
{
        conn *c = arg;
        wsink *s = c->s;

        c->cap = BUF_INITIAL;
        c->buf = malloc(c->cap + 1);
        while (c->buf != NULL && serve_one(c) == 0) {
        }
        free(c->buf);
        pthread_mutex_lock(&s->mu);
        close(c->fd);
        s->slots[c->slot].fd = -1;
        s->slots[c->slot].state = SLOT_DONE;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        free(c);
        return NULL;
}

/* Under s->mu: joins the threads of connections that ended. */
static void reap_locked(wsink *s)
{
        for (int i = 0; i < WSINK_CONNS_MAX; i++) {
                if (s->slots[i].state == SLOT_DONE) {
                        pthread_join(s->slots[i].thread, NULL);
                        s->slots[i].state = SLOT_FREE;
                }
        }
}

/* A thread for the accepted fd, or the fd closed when there is no room. */
static void take_conn(wsink *s, int fd)
{
        conn *c = calloc(1, sizeof(*c));
        int i = 0;

        pthread_mutex_lock(&s->mu);
        reap_locked(s);
        while (i < WSINK_CONNS_MAX && s->slots[i].state != SLOT_FREE) {
                i++;
        }
        if (c == NULL || s->stopping || i == WSINK_CONNS_MAX) {
                pthread_mutex_unlock(&s->mu);
                close(fd);
                free(c);
                return;
        }
        *c = (conn){.s = s, .slot = i, .fd = fd};
        s->slots[i].state = SLOT_RUNNING;
        s->slots[i].fd = fd;
        if (pthread_create(&s->slots[i].thread, NULL, conn_main, c) != 0) {
                s->slots[i].state = SLOT_FREE;
                s->slots[i].fd = -1;
                close(fd);
                free(c);
        }
        pthread_mutex_unlock(&s->mu);
}

static void *accept_main(void *arg)
{
        wsink *s = arg;

        for (;;) {
                struct pollfd p[2] = {{.fd = s->fd, .events = POLLIN},
                                      {.fd = s->wake[0], .events = POLLIN}};
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR) {
                                continue;
                        }
                        break;
                }
                if (p[1].revents != 0) {
                        break;
                }
                if ((p[0].revents & POLLIN) == 0) {
                        continue;
                }
                int fd = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0) {
                        take_conn(s, fd);
                } else if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
                        struct timespec ten_ms = {0, 10000000L}; /* out of fds: later */
                        nanosleep(&ten_ms, NULL);
                }
        }
        return NULL;
}

/* ---- the API ----------------------------------------------------------------------------------
 */

static int listen_loopback(wsink *s)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        socklen_t len = sizeof(a);

        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s->fd < 0 || bind(s->fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
            listen(s->fd, 128) != 0 || getsockname(s->fd, (struct sockaddr *)&a, &len) != 0) {
                return -1;
        }
        s->port = ntohs(a.sin_port);
        return 0;
}

int wsink_start(wsink **out)
{
        wsink *s = calloc(1, sizeof(*s));
        pthread_condattr_t ca;

        *out = NULL;
        if (s == NULL) {
                return -1;
        }
        s->fd = s->wake[0] = s->wake[1] = -1;
        for (int i = 0; i < WSINK_CONNS_MAX; i++) {
                s->slots[i].fd = -1;
        }
        s->dflt = (step){.status = 200};
        s->cap_reqs = RECORDS_FIRST;
        s->reqs = calloc((size_t)s->cap_reqs, sizeof(*s->reqs));
        pthread_mutex_init(&s->mu, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&s->cv, &ca);
        pthread_condattr_destroy(&ca);
        if (s->reqs == NULL || listen_loopback(s) != 0 || pipe2(s->wake, O_CLOEXEC) != 0 ||
            pthread_create(&s->acceptor, NULL, accept_main, s) != 0) {
                fprintf(stderr, "webhook_sink: cannot start: %s\n", strerror(errno));
                for (int i = 0; i < 2; i++) {
                        if (s->wake[i] >= 0) {
                                close(s->wake[i]);
                        }
                }
                if (s->fd >= 0) {
                        close(s->fd);
                }
                pthread_cond_destroy(&s->cv);
                pthread_mutex_destroy(&s->mu);
                free(s->reqs);
                free(s);
                return -1;
        }
        *out = s;
        return 0;
}

void wsink_stop(wsink *s)
{
        int running[WSINK_CONNS_MAX];

        if (s == NULL) {
                return;
        }
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        for (int i = 0; i < WSINK_CONNS_MAX; i++) {
                if (s->slots[i].state == SLOT_RUNNING) {
                        shutdown(s->slots[i].fd, SHUT_RDWR); /* its recv or send returns */
                }
        }
        pthread_cond_broadcast(&s->cv); /* its delay ends */
        pthread_mutex_unlock(&s->mu);
        while (write(s->wake[1], "x", 1) < 0 && errno == EINTR) {
        }
        pthread_join(s->acceptor, NULL);
        /* No connection starts now; each running one ends by itself. */
        pthread_mutex_lock(&s->mu);
        for (int i = 0; i < WSINK_CONNS_MAX; i++) {
                running[i] = s->slots[i].state != SLOT_FREE;
        }
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < WSINK_CONNS_MAX; i++) {
                if (running[i]) {
                        pthread_join(s->slots[i].thread, NULL);
                }
        }
        close(s->fd);
        close(s->wake[0]);
        close(s->wake[1]);
        for (int i = 0; i < s->n_reqs; i++) {
                free(s->reqs[i].body);
        }
        free(s->reqs);
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
}

int wsink_port(const wsink *s)
{
        return s->port;
}

void wsink_url(const wsink *s, const char *host, char *out, size_t out_len)
{
        snprintf(out, out_len, "http://%s:%d/hook", host, s->port);
}

static int step_ok(int status, int delay_ms)
{
        return status >= 200 && status <= 599 && delay_ms >= 0 && delay_ms <= WSINK_DELAY_MAX_MS;
}

int wsink_answer(wsink *s, int count, int status, int delay_ms)
{
        int rc = -1;

        if (count < 1 || !step_ok(status, delay_ms)) {
                return -1;
        }
        pthread_mutex_lock(&s->mu);
        if (s->n_steps < WSINK_STEPS_MAX) {
                s->steps[s->n_steps++] = (step){count, status, delay_ms};
                rc = 0;
        }
        pthread_mutex_unlock(&s->mu);
        return rc;
}

int wsink_default(wsink *s, int status, int delay_ms)
{
        if (!step_ok(status, delay_ms)) {
                return -1;
        }
        pthread_mutex_lock(&s->mu);
        s->dflt = (step){0, status, delay_ms};
        pthread_mutex_unlock(&s->mu);
        return 0;
}

static int matches(const wsink_request *r, const char *webhook_id, const char *needle)
{
        return (webhook_id == NULL || strcmp(r->webhook_id, webhook_id) == 0) &&
               (needle == NULL || strstr(r->body, needle) != NULL);
}

static int count_locked(wsink *s, const char *webhook_id, const char *needle)
{
        int n = 0;
        for (int i = 0; i < s->n_reqs; i++) {
                n += matches(&s->reqs[i], webhook_id, needle);
        }
        return n;
}

int wsink_count(wsink *s, const char *webhook_id, const char *needle)
{
        pthread_mutex_lock(&s->mu);
        int n = count_locked(s, webhook_id, needle);
        pthread_mutex_unlock(&s->mu);
        return n;
}

int wsink_wait(wsink *s, const char *webhook_id, const char *needle, int k, long timeout_ms)
{
        struct timespec until;
        int n;

        deadline_in(&until, timeout_ms);
        pthread_mutex_lock(&s->mu);
        while ((n = count_locked(s, webhook_id, needle)) < k && !s->stopping) {
                if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT) {
                        n = count_locked(s, webhook_id, needle);
                        break;
                }
        }
        pthread_mutex_unlock(&s->mu);
        return n;
}

int wsink_get(wsink *s, const char *webhook_id, const char *needle, int i, wsink_request *out)
{
        int rc = -1;

        memset(out, 0, sizeof(*out));
        pthread_mutex_lock(&s->mu);
        for (int j = 0; j < s->n_reqs && rc != 0; j++) {
                if (matches(&s->reqs[j], webhook_id, needle) && i-- == 0) {
                        *out = s->reqs[j];
                        out->body = malloc(out->body_len + 1);
                        if (out->body != NULL) {
                                memcpy(out->body, s->reqs[j].body, out->body_len + 1);
                                rc = 0;
                        }
                }
        }
        pthread_mutex_unlock(&s->mu);
        if (rc != 0) {
                memset(out, 0, sizeof(*out));
        }
        return rc;
}

void wsink_request_free(wsink_request *r)
{
        free(r->body);
        r->body = NULL;
}

int wsink_ids(wsink *s, const char *needle, char (*ids)[WSINK_VALUE_MAX], int max)
{
        int n = 0;

        pthread_mutex_lock(&s->mu);
        for (int j = 0; j < s->n_reqs; j++) {
                const wsink_request *r = &s->reqs[j];
                int seen = 0;
                if (!matches(r, NULL, needle)) {
                        continue;
                }
                for (int k = 0; k < n && !seen; k++) {
                        seen = strcmp(ids[k], r->webhook_id) == 0;
                }
                if (!seen && n < max) {
                        snprintf(ids[n++], WSINK_VALUE_MAX, "%s", r->webhook_id);
                }
        }
        pthread_mutex_unlock(&s->mu);
        return n;
}
