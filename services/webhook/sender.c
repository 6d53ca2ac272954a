/*
 * sender: libcurl's multi interface on one thread of ours.
 *
 * Who owns what. Callers touch only the inbox (under mu): submit appends an
 * attempt and wakes the thread. Everything else is the thread's, unlocked:
 * the destinations, each with its running count and its waiting attempts;
 * the ready list of destinations that have a waiting attempt and room to
 * start it (round-robin, so a destination with a thousand waiting does not
 * delay one with a single); the running list, for shutdown. An attempt
 * counts against queue_max from its submission until it starts.
 *
 * An attempt is one allocation (struct, excerpt, URL, body) plus libcurl's
 * easy handle and header list while it exists. libcurl keeps finished
 * connections for reuse in the multi handle; a connection is checked by the
 * address policy once, when it is opened (open_socket below).
 *
 * User callbacks are called from the loop only, never from inside a
 * libcurl callback and never under mu, so they may submit.
 */
#include "sender.h"

#include <curl/curl.h>
#include <jansson.h> /* json_int_t, for ks_log's fields */
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ks_assert.h"
#include "ks_clock.h"
#include "ks_hmap.h"
#include "ks_log.h"

#if LIBCURL_VERSION_NUM < 0x075500
#error "libcurl 7.85 or later is needed (CURLOPT_PROTOCOLS_STR)"
#endif

#define POLL_MS 1000 /* the loop's longest sleep: submits and libcurl's timers wake it */
/* After a failed multi call, so that a broken handle cannot make the loop spin. */
#define LOOP_ERROR_PAUSE_MS 10
#define DEST_KEY_MAX        (WH_HOST_BYTES_MAX + 1 + 5 + 1) /* "host:port" and its NUL */
#define DETAIL_MAX          (CURL_ERROR_SIZE + WH_ADDR_TEXT_MAX)
#define RETRY_AFTER_MAX_S   (400LL * 86400) /* a longer Retry-After is read as this */
#define RETRY_AFTER_TEXT    64              /* the longest HTTP date is 29 bytes */
#define NONE                UINT32_MAX
#define PROTOCOLS           "http,https"
#define DEFAULT_USER_AGENT  "keelson-webhook/1"

typedef struct attempt attempt;
struct attempt {
        attempt *next; /* in the inbox, its destination's waiting list, or the running list */
        attempt *prev; /* in the running list */
        wh_sender *s;
        wh_done_fn done;
        void *user;
        CURL *easy;
        struct curl_slist *headers;
        bool in_multi;
        wh_outcome early; /* decided at submission (WH_INVALID_URL); WH_OUTCOME_COUNT: none */
        uint32_t dest;    /* its destination's slot, once placed */
        int64_t started_ns;
        size_t received_bytes; /* of the response, head and body */
        size_t excerpt_len;
        bool too_large;
        int64_t retry_after_s;
        int sockets_opened;
        int addresses_refused;
        wh_addr_verdict refusal; /* the last refusal */
        char refused_addr[WH_ADDR_TEXT_MAX];
        char dest_key[DEST_KEY_MAX];
        size_t dest_key_len;
        char detail[CURL_ERROR_SIZE]; /* why the URL is invalid, or libcurl's error buffer */
        char *url;                    /* the rest of the allocation: */
        char *body;
        size_t body_len;
        char *excerpt; /* excerpt_bytes_max + 1 */
};

typedef struct dest {
        char key[DEST_KEY_MAX];
        size_t key_len;
        uint32_t running;
        attempt *head; /* waiting, in submission order */
        attempt *tail;
        uint32_t ready_next;
        bool ready; /* in the ready list: it has waiting attempts and room to start one */
} dest;

struct wh_sender {
        wh_sender_options o; /* user_agent and allow point into this struct */
        char user_agent[WH_USER_AGENT_BYTES_MAX + 1];
        wh_addr_policy allow;
        CURLM *multi;
        pthread_t thread;
        bool mu_ready;

        pthread_mutex_t mu; /* guards the inbox, queued and stop */
        attempt *inbox_head;
        attempt *inbox_tail;
        size_t queued; /* accepted, not started: the inbox and every waiting list */
        bool stop;

        /* The thread's own. */
        dest *dests; /* dests_n slots: at most one per accepted attempt */
        uint32_t dests_n;
        uint32_t *free_slots;
        uint32_t free_n;
        ks_hmap dest_index;
        uint32_t ready_head;
        uint32_t ready_tail;
        attempt *running_head;
        uint32_t running;
        bool loop_error_logged;

        ks_counter *outcomes[WH_OUTCOME_COUNT];
        ks_histogram *latency;
        ks_gauge *queued_gauge;
        ks_gauge *running_gauge;
};

static const char *const OUTCOME_NAMES[WH_OUTCOME_COUNT] = {
    [WH_DELIVERED] = "delivered",
    [WH_HTTP_ERROR] = "http_error",
    [WH_TIMEOUT] = "timeout",
    [WH_CONNECT_FAILED] = "connect_failed",
    [WH_DNS_FAILED] = "dns_failed",
    [WH_REFUSED_ADDRESS] = "refused_address",
    [WH_TLS_FAILED] = "tls_failed",
    [WH_PROTOCOL_ERROR] = "protocol_error",
    [WH_RESPONSE_TOO_LARGE] = "response_too_large",
    [WH_INVALID_URL] = "invalid_url",
    [WH_SHUTDOWN] = "shutdown",
    [WH_SEND_INTERNAL] = "internal",
};

const char *wh_outcome_name(wh_outcome o)
{
        if ((unsigned)o >= WH_OUTCOME_COUNT) {
                return "unknown";
        }
        return OUTCOME_NAMES[o];
}

/* ---- options -------------------------------------------------------------- */

void wh_sender_options_init(wh_sender_options *o)
{
        KS_ASSERT(o != NULL);
        *o = (wh_sender_options){
            .attempts_max = 64,
            .destination_attempts_max = 4,
            .queue_max = 1024,
            .connect_timeout_ms = 5000,
            .timeout_ms = 15000,
            .body_bytes_max = 256 * 1024,
            .excerpt_bytes_max = 1024,
            .response_bytes_max = 64 * 1024,
            .user_agent = DEFAULT_USER_AGENT,
        };
}

typedef struct option_bound {
        const char *name;
        size_t offset;
        int64_t min;
        int64_t max;
} option_bound;

#define BOUND(field, lo, hi)                                                                       \
        {                                                                                          \
#field, offsetof(wh_sender_options, field), lo, hi                                 \
        }
#define MIB (1024LL * 1024)

static const option_bound BOUNDS[] = {
    BOUND(attempts_max, 1, 4096),
    BOUND(destination_attempts_max, 1, 4096),
    BOUND(queue_max, 1, 100000),
    BOUND(connect_timeout_ms, 100, 60000),
    BOUND(timeout_ms, 100, 300000),
    BOUND(body_bytes_max, 1, 16 * MIB),
    BOUND(excerpt_bytes_max, 0, 64 * 1024),
    BOUND(response_bytes_max, 1024, 16 * MIB),
};

static bool option_in(const char *name, int64_t v, int64_t min, int64_t max)
{
        if (v >= min && v <= max) {
                return true;
        }
        ks_log_error(NULL, "webhook sender: option out of bounds", "{s:s, s:I, s:I, s:I}", "option",
                     name, "value", (json_int_t)v, "min", (json_int_t)min, "max", (json_int_t)max);
        return false;
}

static bool user_agent_valid(const char *ua)
{
        size_t len = ua == NULL ? 0 : strlen(ua);
        bool ok = len >= 1 && len <= WH_USER_AGENT_BYTES_MAX;
        for (size_t i = 0; ok && i < len; i++) {
                ok = ua[i] >= 0x20 && ua[i] <= 0x7e;
        }
        if (!ok) {
                ks_log_error(NULL, "webhook sender: user_agent must be 1..128 printable bytes",
                             NULL);
        }
        return ok;
}

static bool options_valid(const wh_sender_options *o)
{
        bool ok = true;
        for (size_t i = 0; i < sizeof BOUNDS / sizeof BOUNDS[0]; i++) {
                const option_bound *b = &BOUNDS[i];
                int64_t v;
                memcpy(&v, (const char *)o + b->offset, sizeof v);
                ok = option_in(b->name, v, b->min, b->max) && ok;
        }
        /* The bounds that depend on another option. */
        ok = ok &&
             option_in("destination_attempts_max", o->destination_attempts_max, 1, o->attempts_max);
        ok = ok && option_in("timeout_ms", o->timeout_ms, o->connect_timeout_ms, 300000);
        ok = ok &&
             option_in("response_bytes_max", o->response_bytes_max, o->excerpt_bytes_max, 16 * MIB);
        return user_agent_valid(o->user_agent) && ok;
}

/* ---- what a submission is checked for ------------------------------------- */

/* Headers libcurl writes from the attempt itself, or that would change how it is framed. */
static const char *const OWNED_HEADERS[] = {
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "expect",
    "te",   "trailer",        "upgrade",           "user-agent",
};

static bool is_tchar(unsigned char c)
{
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
                return true;
        }
        return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool header_valid(const wh_header *h)
{
        if (h->name == NULL || h->value == NULL) {
                return false;
        }
        size_t name_len = strnlen(h->name, WH_HEADER_NAME_MAX + 1);
        if (name_len == 0 || name_len > WH_HEADER_NAME_MAX) {
                return false;
        }
        for (size_t i = 0; i < name_len; i++) {
                if (!is_tchar((unsigned char)h->name[i])) {
                        return false;
                }
        }
        for (size_t i = 0; i < sizeof OWNED_HEADERS / sizeof OWNED_HEADERS[0]; i++) {
                if (strcasecmp(h->name, OWNED_HEADERS[i]) == 0) {
                        return false;
                }
        }
        /* libcurl reads "Name:" with nothing but blanks after it as "do not send Name". */
        size_t value_len = strnlen(h->value, WH_ATTEMPT_HEADER_BYTES_MAX + 1);
        bool visible = false;
        for (size_t i = 0; i < value_len; i++) {
                unsigned char c = (unsigned char)h->value[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f) {
                        return false;
                }
                visible = visible || (c != ' ' && c != '\t');
        }
        return visible && name_len + value_len <= WH_ATTEMPT_HEADER_BYTES_MAX;
}

static int attempt_valid(const wh_sender *s, const wh_attempt *a)
{
        if (a->headers_n > WH_HEADERS_MAX || (a->headers_n > 0 && a->headers == NULL)) {
                return KS_INVALID_ARGUMENT;
        }
        if (a->body_len > (uint64_t)s->o.body_bytes_max || (a->body_len > 0 && a->body == NULL)) {
                return KS_INVALID_ARGUMENT;
        }
        for (size_t i = 0; i < a->headers_n; i++) {
                if (!header_valid(&a->headers[i])) {
                        return KS_INVALID_ARGUMENT;
                }
        }
        return KS_OK;
}

/* A URL's parts the sender keeps: libcurl's normalised text, and the destination. */
typedef struct url_parts {
        char *url; /* curl_free */
        char key[DEST_KEY_MAX];
        size_t key_len;
} url_parts;

/* Whether part is present in u (and then an error of ours: credentials, a zone). */
static bool url_has(CURLU *u, CURLUPart part)
{
        char *v = NULL;
        CURLUcode uc = curl_url_get(u, part, &v, 0);
        curl_free(v);
        return uc == CURLUE_OK;
}

/* The checks of url_check on a parsed URL; NULL, or why it is refused. */
static const char *url_refusal(CURLU *u, const char *scheme, const char *host)
{
        if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0) {
                return "the scheme is not http or https";
        }
        if (url_has(u, CURLUPART_USER) || url_has(u, CURLUPART_PASSWORD) ||
            url_has(u, CURLUPART_OPTIONS)) {
                return "credentials in the URL";
        }
        if (url_has(u, CURLUPART_ZONEID)) {
                return "an IPv6 zone in the URL";
        }
        if (strlen(host) > WH_HOST_BYTES_MAX) {
                return "the host is longer than 253 bytes";
        }
        return NULL;
}

/*
 * Parses url as libcurl will. KS_OK with *p set (p->url to curl_free);
 * KS_INVALID_ARGUMENT with why set; KS_INTERNAL when memory is out.
 */
static int url_check(const char *url, url_parts *p, char *why, size_t why_len)
{
        memset(p, 0, sizeof *p);
        if (url == NULL || strnlen(url, WH_URL_BYTES_MAX + 1) > WH_URL_BYTES_MAX) {
                snprintf(why, why_len, "no URL, or one longer than %d bytes", WH_URL_BYTES_MAX);
                return KS_INVALID_ARGUMENT;
        }
        CURLU *u = curl_url();
        char *scheme = NULL, *host = NULL, *port = NULL;
        int rc = KS_INTERNAL;
        CURLUcode uc = u == NULL ? CURLUE_OUT_OF_MEMORY : curl_url_set(u, CURLUPART_URL, url, 0);
        if (uc == CURLUE_OK) {
                uc = curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
        }
        if (uc == CURLUE_OK) {
                uc = curl_url_get(u, CURLUPART_HOST, &host, 0);
        }
        if (uc == CURLUE_OK) {
                uc = curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
        }
        if (uc == CURLUE_OK) {
                const char *refusal = url_refusal(u, scheme, host);
                if (refusal != NULL) {
                        snprintf(why, why_len, "%s", refusal);
                        rc = KS_INVALID_ARGUMENT;
                        goto out;
                }
                uc = curl_url_get(u, CURLUPART_URL, &p->url, 0);
        }
        if (uc == CURLUE_OK) {
                int n = snprintf(p->key, sizeof p->key, "%s:%s", host, port);
                KS_ASSERT(n > 0 && (size_t)n < sizeof p->key);
                p->key_len = (size_t)n;
                for (size_t i = 0; i < p->key_len; i++) {
                        char c = p->key[i];
                        p->key[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
                }
                rc = KS_OK;
        } else if (uc != CURLUE_OUT_OF_MEMORY) {
                snprintf(why, why_len, "not a valid URL: %s", curl_url_strerror(uc));
                rc = KS_INVALID_ARGUMENT;
        }
out:
        curl_free(scheme);
        curl_free(host);
        curl_free(port);
        curl_url_cleanup(u);
        return rc;
}

int wh_url_check(const char *url, char *host, size_t host_len, char *why, size_t why_len)
{
        url_parts p;
        int rc = url_check(url, &p, why, why_len);

        if (rc != KS_OK) {
                return rc;
        }
        curl_free(p.url);
        /* The destination's key is "host:port": the host is what comes before the last colon. */
        const char *colon = strrchr(p.key, ':');
        KS_ASSERT(colon != NULL);
        const char *h = p.key;
        size_t n = (size_t)(colon - p.key);
        if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
                h++;
                n -= 2;
        }
        if (n == 0 || n >= host_len) {
                snprintf(why, why_len, "%s",
                         n == 0 ? "no host in the URL" : "the host is too long");
                return KS_INVALID_ARGUMENT;
        }
        memcpy(host, h, n);
        host[n] = '\0';
        return KS_OK;
}

/* libcurl's header list for a: the caller's headers, and ours. NULL when memory is out. */
static struct curl_slist *header_list(const wh_attempt *a)
{
        struct curl_slist *list = NULL;
        bool content_type = false;
        char line[WH_ATTEMPT_HEADER_BYTES_MAX + 3];
        for (size_t i = 0; i < a->headers_n; i++) {
                const wh_header *h = &a->headers[i];
                snprintf(line, sizeof line, "%s: %s", h->name, h->value);
                struct curl_slist *next = curl_slist_append(list, line);
                if (next == NULL) {
                        curl_slist_free_all(list);
                        return NULL;
                }
                list = next;
                content_type = content_type || strcasecmp(h->name, "content-type") == 0;
        }
        /* No "Expect: 100-continue" round trip on larger bodies; and without a content-type
         * of the caller's, none at all rather than libcurl's form-urlencoded. */
        struct curl_slist *next = curl_slist_append(list, "Expect:");
        if (next != NULL && !content_type) {
                next = curl_slist_append(next, "Content-Type:");
        }
        if (next == NULL) {
                curl_slist_free_all(list);
        }
        return next;
}

/* A copy of *a in one allocation, or NULL when memory is out. */
static attempt *attempt_new(const wh_sender *s, const wh_attempt *a, wh_done_fn done, void *user)
{
        url_parts p;
        char why[CURL_ERROR_SIZE] = "";
        int rc = url_check(a->url, &p, why, sizeof why);
        if (rc == KS_INTERNAL) {
                return NULL;
        }
        bool valid = rc == KS_OK;
        size_t url_len = valid ? strlen(p.url) : 0;
        size_t body_len = valid ? a->body_len : 0;
        size_t excerpt_max = (size_t)s->o.excerpt_bytes_max;
        attempt *t = calloc(1, sizeof *t + excerpt_max + 1 + url_len + 1 + body_len);
        if (t == NULL) {
                curl_free(p.url);
                return NULL;
        }
        t->s = (wh_sender *)s;
        t->done = done;
        t->user = user;
        t->dest = NONE;
        t->retry_after_s = -1;
        t->excerpt = (char *)(t + 1);
        t->url = t->excerpt + excerpt_max + 1;
        t->body = t->url + url_len + 1;
        t->early = valid ? WH_OUTCOME_COUNT : WH_INVALID_URL;
        snprintf(t->detail, sizeof t->detail, "%s", why);
        if (valid) {
                memcpy(t->url, p.url, url_len + 1);
                memcpy(t->dest_key, p.key, p.key_len + 1);
                t->dest_key_len = p.key_len;
                if (body_len > 0) {
                        memcpy(t->body, a->body, body_len);
                }
                t->body_len = body_len;
                curl_free(p.url);
                if ((t->headers = header_list(a)) == NULL) {
                        free(t);
                        return NULL;
                }
        }
        return t;
}

static void attempt_free(attempt *t)
{
        if (t == NULL) {
                return;
        }
        KS_ASSERT(!t->in_multi);
        curl_easy_cleanup(t->easy);
        curl_slist_free_all(t->headers);
        free(t);
}

/* ---- submission ------------------------------------------------------------ */

int wh_sender_submit(wh_sender *s, const wh_attempt *a, wh_done_fn done, void *user)
{
        KS_ASSERT(s != NULL && a != NULL && done != NULL);
        int rc = attempt_valid(s, a);
        if (rc != KS_OK) {
                return rc;
        }
        attempt *t = attempt_new(s, a, done, user);
        if (t == NULL) {
                return KS_INTERNAL;
        }
        pthread_mutex_lock(&s->mu);
        if (s->stop) {
                rc = KS_UNAVAILABLE;
        } else if (s->queued >= (size_t)s->o.queue_max) {
                rc = KS_RESOURCE_EXHAUSTED;
        } else {
                /* An inbox that is not empty has a wake-up on its way already, or the
                 * thread will see it before it sleeps: it is this thread, in a callback. */
                if (s->inbox_head == NULL) {
                        s->inbox_head = t;
                        if (!pthread_equal(pthread_self(), s->thread)) {
                                (void)curl_multi_wakeup(s->multi);
                        }
                } else {
                        s->inbox_tail->next = t;
                }
                s->inbox_tail = t;
                s->queued++;
        }
        pthread_mutex_unlock(&s->mu);
        if (rc != KS_OK) {
                attempt_free(t);
                return rc;
        }
        ks_gauge_add(s->queued_gauge, 1);
        return KS_OK;
}

/* ---- libcurl's callbacks: on the sender's thread, inside curl_multi_perform --- */

/*
 * Every socket libcurl wants, for every address it tries: the address is
 * judged here, so the check and the connect see the same address whatever
 * DNS says in between. A refused address gets no socket; libcurl moves on
 * to the host's next address, or fails with CURLE_COULDNT_CONNECT.
 */
static curl_socket_t open_socket(void *user, curlsocktype purpose, struct curl_sockaddr *ca)
{
        attempt *a = user;
        (void)purpose;
        const struct sockaddr *sa = &ca->addr;
        wh_addr_verdict v = WH_ADDR_REFUSED_FAMILY;
        bool whole = (ca->family == AF_INET && ca->addrlen >= sizeof(struct sockaddr_in)) ||
                     (ca->family == AF_INET6 && ca->addrlen >= sizeof(struct sockaddr_in6));
        if (whole && sa->sa_family == ca->family) {
                v = wh_addr_check(&a->s->allow, sa);
        }
        if (v != WH_ADDR_ALLOWED) {
                a->addresses_refused++;
                a->refusal = v;
                wh_addr_format(sa, a->refused_addr, sizeof a->refused_addr);
                return CURL_SOCKET_BAD;
        }
        int fd = socket(ca->family, ca->socktype | SOCK_CLOEXEC, ca->protocol);
        if (fd >= 0) {
                a->sockets_opened++;
        }
        return fd;
}

/* Counts bytes read against response_bytes_max; false: stop the transfer. */
static bool take_bytes(attempt *a, size_t n)
{
        a->received_bytes += n;
        if (a->received_bytes > (uint64_t)a->s->o.response_bytes_max) {
                a->too_large = true;
                return false;
        }
        return true;
}

/* Retry-After's value: delay-seconds, or an HTTP date (RFC 9110 10.2.3); -1 if neither. */
static int64_t retry_after(const char *v, size_t len)
{
        while (len > 0 && (*v == ' ' || *v == '\t')) {
                v++, len--;
        }
        while (len > 0 && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' ')) {
                len--;
        }
        if (len == 0) {
                return -1;
        }
        size_t digits = 0;
        int64_t s = 0;
        while (digits < len && v[digits] >= '0' && v[digits] <= '9') {
                s = s >= RETRY_AFTER_MAX_S ? s : s * 10 + (v[digits] - '0');
                digits++;
        }
        if (digits == len) {
                return s < RETRY_AFTER_MAX_S ? s : RETRY_AFTER_MAX_S;
        }
        char text[RETRY_AFTER_TEXT];
        if (len >= sizeof text) {
                return -1;
        }
        memcpy(text, v, len);
        text[len] = '\0';
        time_t at = curl_getdate(text, NULL);
        if (at == -1) {
                return -1;
        }
        int64_t delta = (int64_t)at - (int64_t)time(NULL);
        return delta < 0 ? 0 : (delta < RETRY_AFTER_MAX_S ? delta : RETRY_AFTER_MAX_S);
}

/* One line of a response's head (of any response: 1xx ones come first). */
static size_t on_head(char *buf, size_t size, size_t n, void *user)
{
        attempt *a = user;
        size_t len = size * n;
        static const char name[] = "retry-after:";
        if (!take_bytes(a, len)) {
                return 0;
        }
        if (len >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
                a->retry_after_s = -1; /* a new response */
        } else if (len >= sizeof name - 1 && strncasecmp(buf, name, sizeof name - 1) == 0) {
                a->retry_after_s = retry_after(buf + sizeof name - 1, len - (sizeof name - 1));
        }
        return len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *user)
{
        attempt *a = user;
        size_t len = size * n;
        size_t room = (size_t)a->s->o.excerpt_bytes_max - a->excerpt_len;
        size_t keep = len < room ? len : room;
        memcpy(a->excerpt + a->excerpt_len, buf, keep);
        a->excerpt_len += keep;
        return take_bytes(a, len) ? len : 0;
}

/* ---- starting and ending attempts ----------------------------------------- */

static bool configure(const wh_sender *s, attempt *a, CURL *e)
{
        bool ok = true;
#define SET(option, value) ok = ok && curl_easy_setopt(e, option, value) == CURLE_OK
        SET(CURLOPT_PRIVATE, a);
        SET(CURLOPT_URL, a->url);
        SET(CURLOPT_PROTOCOLS_STR, PROTOCOLS);
        SET(CURLOPT_REDIR_PROTOCOLS_STR, PROTOCOLS);
        SET(CURLOPT_FOLLOWLOCATION, 0L);
        SET(CURLOPT_MAXREDIRS, 0L);
        SET(CURLOPT_PROXY, ""); /* never http_proxy, https_proxy, all_proxy from the environment */
        SET(CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
        SET(CURLOPT_NOSIGNAL, 1L);
        SET(CURLOPT_SSL_VERIFYPEER, 1L);
        SET(CURLOPT_SSL_VERIFYHOST, 2L);
        SET(CURLOPT_CONNECTTIMEOUT_MS, (long)s->o.connect_timeout_ms);
        SET(CURLOPT_TIMEOUT_MS, (long)s->o.timeout_ms);
        SET(CURLOPT_POST, 1L);
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->body_len);
        SET(CURLOPT_POSTFIELDS, a->body);
        SET(CURLOPT_HTTPHEADER, a->headers);
        SET(CURLOPT_USERAGENT, s->user_agent);
        SET(CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)s->o.response_bytes_max);
        SET(CURLOPT_HEADERFUNCTION, on_head);
        SET(CURLOPT_HEADERDATA, a);
        SET(CURLOPT_WRITEFUNCTION, on_body);
        SET(CURLOPT_WRITEDATA, a);
        SET(CURLOPT_OPENSOCKETFUNCTION, open_socket);
        SET(CURLOPT_OPENSOCKETDATA, a);
        SET(CURLOPT_ERRORBUFFER, a->detail);
#undef SET
        return ok;
}

static void unqueue(wh_sender *s, size_t n)
{
        pthread_mutex_lock(&s->mu);
        KS_ASSERT(s->queued >= n);
        s->queued -= n;
        pthread_mutex_unlock(&s->mu);
        ks_gauge_add(s->queued_gauge, -(int64_t)n);
}

/* Calls the callback with r and frees a: the end of every accepted attempt. */
static void complete(wh_sender *s, attempt *a, wh_result *r)
{
        KS_ASSERT(!a->in_multi && (unsigned)r->outcome < WH_OUTCOME_COUNT);
        a->excerpt[a->excerpt_len] = '\0';
        r->excerpt = a->excerpt;
        r->excerpt_len = a->excerpt_len;
        r->retry_after_s = a->retry_after_s;
        if (a->started_ns != 0) {
                r->latency_us = (ks_mono_ns() - a->started_ns) / KS_NS_PER_US;
                ks_histogram_observe(s->latency, (double)r->latency_us / 1e6);
        }
        ks_counter_inc(s->outcomes[r->outcome]);
        a->done(r, a->user);
        attempt_free(a);
}

/* Ends an attempt that never reached libcurl (or no longer is in it) with o. */
static void complete_as(wh_sender *s, attempt *a, wh_outcome o, const char *detail)
{
        wh_result r = {.outcome = o, .detail = detail};
        complete(s, a, &r);
}

/* ---- destinations ---------------------------------------------------------- */

static void ready_push(wh_sender *s, uint32_t slot)
{
        dest *d = &s->dests[slot];
        KS_ASSERT(!d->ready && d->head != NULL);
        d->ready = true;
        d->ready_next = NONE;
        if (s->ready_tail == NONE) {
                s->ready_head = slot;
        } else {
                s->dests[s->ready_tail].ready_next = slot;
        }
        s->ready_tail = slot;
}

static uint32_t ready_pop(wh_sender *s)
{
        uint32_t slot = s->ready_head;
        KS_ASSERT(slot != NONE);
        dest *d = &s->dests[slot];
        s->ready_head = d->ready_next;
        if (s->ready_head == NONE) {
                s->ready_tail = NONE;
        }
        d->ready = false;
        return slot;
}

/* The slot of a's destination, made if new: a slot is free while any attempt is accepted. */
static uint32_t dest_of(wh_sender *s, const attempt *a)
{
        uint64_t h = ks_hmap_hash(&s->dest_index, a->dest_key, a->dest_key_len);
        for (uint32_t i = ks_hmap_first(&s->dest_index, h); i != KS_HMAP_NONE;
             i = ks_hmap_next(&s->dest_index, i)) {
                const dest *d = &s->dests[i];
                if (d->key_len == a->dest_key_len && memcmp(d->key, a->dest_key, d->key_len) == 0) {
                        return i;
                }
        }
        KS_ASSERT(s->free_n > 0);
        uint32_t slot = s->free_slots[--s->free_n];
        dest *d = &s->dests[slot];
        memset(d, 0, sizeof *d);
        memcpy(d->key, a->dest_key, a->dest_key_len + 1);
        d->key_len = a->dest_key_len;
        ks_hmap_insert(&s->dest_index, slot, h);
        return slot;
}

/* Forgets a destination with nothing running or waiting. */
static void dest_release(wh_sender *s, uint32_t slot)
{
        const dest *d = &s->dests[slot];
        KS_ASSERT(d->running == 0 && d->head == NULL && !d->ready);
        ks_hmap_remove(&s->dest_index, slot);
        KS_ASSERT(s->free_n < s->dests_n);
        s->free_slots[s->free_n++] = slot;
}

/* Puts a new attempt in its destination's waiting list, or ends it (a bad URL). */
static void place(wh_sender *s, attempt *a)
{
        a->next = NULL;
        if (a->early != WH_OUTCOME_COUNT) {
                unqueue(s, 1);
                complete_as(s, a, a->early, a->detail);
                return;
        }
        a->dest = dest_of(s, a);
        dest *d = &s->dests[a->dest];
        if (d->tail == NULL) {
                d->head = a;
        } else {
                d->tail->next = a;
        }
        d->tail = a;
        if (!d->ready && d->running < (uint64_t)s->o.destination_attempts_max) {
                ready_push(s, a->dest);
        }
}

/* ---- the loop ---------------------------------------------------------------- */

/* Takes a out of libcurl, the running list and its destination's count. */
static void detach(wh_sender *s, attempt *a)
{
        if (a->in_multi) {
                (void)curl_multi_remove_handle(s->multi, a->easy);
                a->in_multi = false;
                if (a->prev == NULL) {
                        s->running_head = a->next;
                } else {
                        a->prev->next = a->next;
                }
                if (a->next != NULL) {
                        a->next->prev = a->prev;
                }
        }
        KS_ASSERT(s->running > 0);
        s->running--;
        ks_gauge_add(s->running_gauge, -1);
        dest *d = &s->dests[a->dest];
        KS_ASSERT(d->running > 0);
        d->running--;
        if (d->head != NULL && !d->ready) {
                ready_push(s, a->dest); /* it has room again */
        } else if (d->head == NULL && d->running == 0) {
                dest_release(s, a->dest);
        }
}

static void start(wh_sender *s, attempt *a)
{
        a->started_ns = ks_mono_ns();
        a->easy = curl_easy_init();
        if (a->easy == NULL || !configure(s, a, a->easy) ||
            curl_multi_add_handle(s->multi, a->easy) != CURLM_OK) {
                detach(s, a);
                complete_as(s, a, WH_SEND_INTERNAL, "libcurl refused the transfer");
                return;
        }
        a->in_multi = true;
        a->prev = NULL;
        a->next = s->running_head;
        if (a->next != NULL) {
                a->next->prev = a;
        }
        s->running_head = a;
}

/* Starts waiting attempts, round-robin over destinations, while there is room. */
static void admit(wh_sender *s)
{
        while (s->running < (uint64_t)s->o.attempts_max && s->ready_head != NONE) {
                uint32_t slot = ready_pop(s);
                dest *d = &s->dests[slot];
                attempt *a = d->head;
                d->head = a->next;
                if (d->head == NULL) {
                        d->tail = NULL;
                }
                d->running++;
                s->running++;
                ks_gauge_add(s->running_gauge, 1);
                if (d->head != NULL && d->running < (uint64_t)s->o.destination_attempts_max) {
                        ready_push(s, slot);
                }
                unqueue(s, 1);
                start(s, a);
        }
}

static wh_outcome outcome_of(const attempt *a, CURLcode rc, long status)
{
        if (a->sockets_opened == 0 && a->addresses_refused > 0) {
                return WH_REFUSED_ADDRESS;
        }
        if (a->too_large || rc == CURLE_FILESIZE_EXCEEDED) {
                return WH_RESPONSE_TOO_LARGE;
        }
        switch (rc) {
        case CURLE_OK:
                return status >= 200 && status <= 299 ? WH_DELIVERED : WH_HTTP_ERROR;
        case CURLE_OPERATION_TIMEDOUT:
                return WH_TIMEOUT;
        case CURLE_COULDNT_RESOLVE_HOST:
                return WH_DNS_FAILED;
        case CURLE_COULDNT_CONNECT:
                return WH_CONNECT_FAILED;
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CIPHER:
        case CURLE_SSL_ISSUER_ERROR:
        case CURLE_SSL_INVALIDCERTSTATUS:
                return WH_TLS_FAILED;
        case CURLE_GOT_NOTHING:
        case CURLE_RECV_ERROR:
        case CURLE_SEND_ERROR:
        case CURLE_WEIRD_SERVER_REPLY:
        case CURLE_PARTIAL_FILE:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_HTTP3:
        case CURLE_BAD_CONTENT_ENCODING:
                return WH_PROTOCOL_ERROR;
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
                return WH_INVALID_URL;
        default:
                return WH_SEND_INTERNAL;
        }
}

/* Ends a finished transfer. */
static void finish(wh_sender *s, attempt *a, CURLcode rc)
{
        long status = 0;
        (void)curl_easy_getinfo(a->easy, CURLINFO_RESPONSE_CODE, &status);
        wh_result r = {.outcome = outcome_of(a, rc, status), .http_status = (int)status};
        char detail[DETAIL_MAX];
        switch (r.outcome) {
        case WH_DELIVERED:
        case WH_HTTP_ERROR:
                snprintf(detail, sizeof detail, "HTTP %ld", status);
                break;
        case WH_REFUSED_ADDRESS:
                snprintf(detail, sizeof detail, "%s: %s", a->refused_addr,
                         wh_addr_verdict_name(a->refusal));
                break;
        case WH_RESPONSE_TOO_LARGE:
                snprintf(detail, sizeof detail, "the response passed %lld bytes",
                         (long long)s->o.response_bytes_max);
                break;
        default:
                snprintf(detail, sizeof detail, "%s",
                         a->detail[0] != '\0' ? a->detail : curl_easy_strerror(rc));
                break;
        }
        r.detail = detail;
        detach(s, a);
        complete(s, a, &r);
}

static void reap(wh_sender *s)
{
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(s->multi, &left)) != NULL) {
                if (m->msg != CURLMSG_DONE) {
                        continue;
                }
                CURLcode rc = m->data.result;
                attempt *a = NULL;
                (void)curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&a);
                KS_ASSERT(a != NULL && a->easy == m->easy_handle);
                finish(s, a, rc);
        }
}

/* Takes the inbox; returns whether the sender is stopping. */
static bool take_inbox(wh_sender *s, attempt **out)
{
        pthread_mutex_lock(&s->mu);
        *out = s->inbox_head;
        s->inbox_head = s->inbox_tail = NULL;
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        return stop;
}

/* Whether nothing was submitted since take_inbox: callbacks submit without a wake-up. */
static bool inbox_empty(wh_sender *s)
{
        pthread_mutex_lock(&s->mu);
        bool empty = s->inbox_head == NULL;
        pthread_mutex_unlock(&s->mu);
        return empty;
}

static void loop_error(wh_sender *s, const char *call, CURLMcode mc)
{
        if (!s->loop_error_logged) {
                ks_log_error(NULL, "webhook sender: libcurl's multi call failed", "{s:s, s:s}",
                             "call", call, "error", curl_multi_strerror(mc));
                s->loop_error_logged = true;
        }
        usleep(LOOP_ERROR_PAUSE_MS * 1000);
}

/* Ends everything accepted as WH_SHUTDOWN: running, then waiting, then the inbox. */
static void shut_down(wh_sender *s, attempt *inbox)
{
        static const char *const why = "the sender stopped";
        while (s->running_head != NULL) {
                attempt *a = s->running_head;
                detach(s, a);
                complete_as(s, a, WH_SHUTDOWN, why);
        }
        size_t waiting = 0;
        /* With nothing running, every destination left has waiting attempts: it is ready. */
        while (s->ready_head != NONE) {
                uint32_t slot = ready_pop(s);
                dest *d = &s->dests[slot];
                while (d->head != NULL) {
                        attempt *a = d->head;
                        d->head = a->next;
                        complete_as(s, a, WH_SHUTDOWN, why);
                        waiting++;
                }
                d->tail = NULL;
                dest_release(s, slot);
        }
        KS_ASSERT(s->free_n == s->dests_n);
        while (inbox != NULL) {
                attempt *a = inbox;
                inbox = a->next;
                complete_as(s, a, WH_SHUTDOWN, why);
                waiting++;
        }
        unqueue(s, waiting);
}

static void *run(void *arg)
{
        wh_sender *s = arg;
        attempt *inbox;
        while (!take_inbox(s, &inbox)) {
                while (inbox != NULL) {
                        attempt *a = inbox;
                        inbox = a->next;
                        place(s, a);
                }
                admit(s);
                int still = 0;
                CURLMcode mc = curl_multi_perform(s->multi, &still);
                if (mc != CURLM_OK) {
                        loop_error(s, "curl_multi_perform", mc);
                }
                reap(s);
                admit(s);
                if (inbox_empty(s) &&
                    (mc = curl_multi_poll(s->multi, NULL, 0, POLL_MS, NULL)) != CURLM_OK) {
                        loop_error(s, "curl_multi_poll", mc);
                }
        }
        shut_down(s, inbox);
        return NULL;
}

/* ---- life -------------------------------------------------------------------- */

static void metrics_get(wh_sender *s, ks_metrics *m)
{
        if (m == NULL) {
                return;
        }
        for (int i = 0; i < WH_OUTCOME_COUNT; i++) {
                char labels[64];
                snprintf(labels, sizeof labels, "outcome=\"%s\"", OUTCOME_NAMES[i]);
                s->outcomes[i] = ks_counter_get(m, "keelson_webhook_attempts_total",
                                                "Webhook HTTP attempts ended, by outcome", labels);
        }
        s->latency = ks_histogram_get(m, "keelson_webhook_attempt_seconds",
                                      "Webhook HTTP attempts, start to end", NULL,
                                      KS_LATENCY_BUCKETS, KS_LATENCY_BUCKETS_N);
        s->queued_gauge = ks_gauge_get(m, "keelson_webhook_queued",
                                       "Webhook attempts accepted and not started", NULL);
        s->running_gauge =
            ks_gauge_get(m, "keelson_webhook_running", "Webhook attempts running", NULL);
}

/* Frees what wh_sender_new made, whatever it got to; the thread is not running. */
static void release(wh_sender *s)
{
        if (s->multi != NULL) {
                (void)curl_multi_cleanup(s->multi);
        }
        ks_hmap_fini(&s->dest_index);
        free(s->dests);
        free(s->free_slots);
        if (s->mu_ready) {
                pthread_mutex_destroy(&s->mu);
        }
        free(s);
        curl_global_cleanup();
}

/* The parts of a sender that can fail: 0, or -1. */
static int build(wh_sender *s)
{
        s->dests_n = (uint32_t)(s->o.queue_max + s->o.attempts_max);
        s->dests = calloc(s->dests_n, sizeof *s->dests);
        s->free_slots = calloc(s->dests_n, sizeof *s->free_slots);
        if (s->dests == NULL || s->free_slots == NULL ||
            ks_hmap_init(&s->dest_index, s->dests_n) != 0) {
                return -1;
        }
        for (uint32_t i = 0; i < s->dests_n; i++) {
                s->free_slots[i] = s->dests_n - 1 - i;
        }
        s->free_n = s->dests_n;
        if ((s->multi = curl_multi_init()) == NULL ||
            curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)s->o.attempts_max) !=
                CURLM_OK) {
                return -1;
        }
        if (pthread_mutex_init(&s->mu, NULL) != 0) {
                return -1;
        }
        s->mu_ready = true;
        return 0;
}

int wh_sender_new(wh_sender **out, const wh_sender_options *o)
{
        KS_ASSERT(out != NULL && o != NULL);
        *out = NULL;
        if (!options_valid(o)) {
                return KS_INVALID_ARGUMENT;
        }
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                return KS_INTERNAL;
        }
        wh_sender *s = calloc(1, sizeof *s);
        if (s == NULL) {
                curl_global_cleanup();
                return KS_INTERNAL;
        }
        s->o = *o;
        snprintf(s->user_agent, sizeof s->user_agent, "%s", o->user_agent);
        s->o.user_agent = s->user_agent;
        if (o->allow != NULL) {
                s->allow = *o->allow;
        }
        s->o.allow = &s->allow;
        s->ready_head = s->ready_tail = NONE;
        metrics_get(s, o->metrics);
        if (build(s) != 0 || pthread_create(&s->thread, NULL, run, s) != 0) {
                ks_log_error(NULL, "webhook sender: cannot start (memory, libcurl, thread)", NULL);
                release(s);
                return KS_INTERNAL;
        }
        (void)pthread_setname_np(s->thread, "wh-sender");
        *out = s;
        return KS_OK;
}

void wh_sender_free(wh_sender *s)
{
        if (s == NULL) {
                return;
        }
        KS_ASSERT(!pthread_equal(pthread_self(), s->thread)); /* not from a callback */
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        (void)curl_multi_wakeup(s->multi);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        KS_ASSERT(s->queued == 0 && s->running == 0);
        release(s);
}
