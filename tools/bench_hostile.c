/*
 * bench_hostile: WhoAmI latency for a legitimate client while hostile clients
 * without credentials send bodies that are expensive to decode, against the
 * gateway of a running stack.
 *
 *   bench_hostile --stack DIR [--hostile N] [--seconds S]
 *
 * It signs one account up and logs in, then measures WhoAmI (one keep-alive
 * connection, one call at a time, from 127.0.0.9) for S seconds (8) with
 * nothing else running ("idle"), then for S seconds while N threads (16), each
 * from an address of its own (127.0.1.x), send without a token, in turn:
 *
 *   - CreateTransfers, application/proto: 520,000 empty repeated
 *     sub-messages in 1,040,000 bytes;
 *   - CreateTransfers, application/json: {"transfers":[{},{},...]} with
 *     320,000 empty objects in 960 KB.
 *
 * It prints, per phase, WhoAmI calls, p50, p99 and max, the ratio of the
 * hostile phase's median to the idle one's, and how the hostile requests
 * were answered (status: count). The stack needs rate limits far above the
 * offered load (docs/performance.md has the commands).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_support.h"

#define HOSTILE_MAX   64
#define SAMPLES_MAX   400000
#define REPLY_MAX     65536
#define PASSWORD      "bench horse battery staple"
#define AUTH          "/keelson.auth.v1.AuthService/"
#define TRANSFERS     "/keelson.ledger.v1.LedgerService/CreateTransfers"
#define PROTO_ITEMS   520000
#define JSON_ITEMS    320000
#define STATUS_KINDS  600
#define IO_TIMEOUT_MS 30000

typedef struct target {
        char host[64];
        int port;
} target;

static target g_target;
static atomic_bool g_stop;
static atomic_long g_status[STATUS_KINDS];
static atomic_long g_hostile_failed;
static char *g_proto_body, *g_json_body;
static size_t g_proto_len, g_json_len;

static int dial(const char *src)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
                return -1;
        }
        struct sockaddr_in a = {.sin_family = AF_INET};
        if (src != NULL && (inet_pton(AF_INET, src, &a.sin_addr) != 1 ||
                            bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0)) {
                close(fd);
                return -1;
        }
        a.sin_port = htons((uint16_t)g_target.port);
        inet_pton(AF_INET, g_target.host, &a.sin_addr);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static int send_all(int fd, const char *p, size_t len)
{
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n <= 0) {
                        return -1;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Reads one reply (head and Content-Length body) into buf; returns its status or -1. */
static int read_reply(int fd, char *buf, size_t cap, size_t *body_at)
{
        size_t len = 0;
        for (;;) {
                buf[len] = '\0';
                char *end = strstr(buf, "\r\n\r\n");
                if (end != NULL) {
                        char *cl = strstr(buf, "Content-Length: ");
                        size_t body = cl != NULL && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
                        size_t need = (size_t)(end + 4 - buf) + body;
                        if (len >= need) {
                                int status = 0;
                                *body_at = (size_t)(end + 4 - buf);
                                return sscanf(buf, "HTTP/1.1 %d", &status) == 1 ? status : -1;
                        }
                }
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (len + 1 >= cap || poll(&pf, 1, IO_TIMEOUT_MS) <= 0) {
                        return -1;
                }
                ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);
                if (n <= 0) {
                        return -1;
                }
                len += (size_t)n;
        }
}

/* POSTs body as JSON on fd (keep-alive); the reply's status, its body in out. */
static int post(int fd, const char *path, const char *token, const char *body, char *out,
                size_t cap)
{
        char head[1024];
        int n = snprintf(head, sizeof(head),
                         "POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                         "%s%s%sContent-Length: %zu\r\n\r\n",
                         path, token != NULL ? "Authorization: Bearer " : "",
                         token != NULL ? token : "", token != NULL ? "\r\n" : "", strlen(body));
        if (n <= 0 || (size_t)n >= sizeof(head) || send_all(fd, head, (size_t)n) != 0 ||
            send_all(fd, body, strlen(body)) != 0) {
                return -1;
        }
        size_t at = 0;
        int status = read_reply(fd, out, cap, &at);
        if (status > 0) {
                memmove(out, out + at, strlen(out + at) + 1);
        }
        return status;
}

static int session(char *token, size_t token_len)
{
        static char reply[REPLY_MAX];
        char email[96], body[512];
        snprintf(email, sizeof(email), "hostile-%lld@example.test", (long long)bench_now_ns());
        int fd = dial(NULL);
        if (fd < 0) {
                return -1;
        }
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"" PASSWORD "\",\"tenantName\":\"Bench\","
                 "\"displayName\":\"Bench\"}",
                 email);
        int st = post(fd, AUTH "SignUp", NULL, body, reply, sizeof(reply));
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"" PASSWORD "\"}", email);
        int lt = st == 200 ? post(fd, AUTH "Login", NULL, body, reply, sizeof(reply)) : -1;
        close(fd);
        const char *t = lt == 200 ? strstr(reply, "\"sessionToken\":\"") : NULL;
        if (t == NULL) {
                fprintf(stderr, "bench_hostile: sign-up %d, login %d: %s\n", st, lt, reply);
                return -1;
        }
        t += 16;
        size_t n = strcspn(t, "\"");
        if (n >= token_len) {
                return -1;
        }
        memcpy(token, t, n);
        token[n] = '\0';
        return 0;
}

static void build_bodies(void)
{
        g_proto_len = 2 * (size_t)PROTO_ITEMS;
        g_proto_body = malloc(g_proto_len);
        for (size_t i = 0; i < PROTO_ITEMS; i++) {
                g_proto_body[2 * i] = 0x0a; /* field 1 (transfers), length-delimited, empty */
                g_proto_body[2 * i + 1] = 0x00;
        }
        static const char open[] = "{\"transfers\":[", close_[] = "]}";
        g_json_len = sizeof(open) - 1 + 3 * (size_t)JSON_ITEMS - 1 + sizeof(close_) - 1;
        g_json_body = malloc(g_json_len + 1);
        char *p = g_json_body;
        memcpy(p, open, sizeof(open) - 1);
        p += sizeof(open) - 1;
        for (size_t i = 0; i < JSON_ITEMS; i++) {
                memcpy(p, i + 1 < JSON_ITEMS ? "{}," : "{}", i + 1 < JSON_ITEMS ? 3 : 2);
                p += i + 1 < JSON_ITEMS ? 3 : 2;
        }
        memcpy(p, close_, sizeof(close_));
}

static void *hostile_main(void *arg)
{
        int id = (int)(intptr_t)arg;
        char src[32];
        snprintf(src, sizeof(src), "127.0.1.%d", 1 + id);
        char *buf = malloc(REPLY_MAX);
        for (long i = 0; !atomic_load(&g_stop); i++) {
                bool proto = (i + id) % 2 == 0;
                const char *body = proto ? g_proto_body : g_json_body;
                size_t len = proto ? g_proto_len : g_json_len;
                char head[256];
                int n = snprintf(head, sizeof(head),
                                 "POST " TRANSFERS " HTTP/1.1\r\nHost: bench\r\n"
                                 "Content-Type: application/%s\r\nContent-Length: %zu\r\n"
                                 "Connection: close\r\n\r\n",
                                 proto ? "proto" : "json", len);
                int fd = dial(src);
                size_t at = 0;
                int status = -1;
                if (fd >= 0 && send_all(fd, head, (size_t)n) == 0 && send_all(fd, body, len) == 0) {
                        status = read_reply(fd, buf, REPLY_MAX, &at);
                }
                if (fd >= 0) {
                        close(fd);
                }
                if (status > 0 && status < STATUS_KINDS) {
                        atomic_fetch_add(&g_status[status], 1);
                } else {
                        atomic_fetch_add(&g_hostile_failed, 1);
                }
        }
        free(buf);
        return NULL;
}

typedef struct phase {
        int64_t *ns;
        size_t n;
        long failed;
} phase;

static void measure(const char *token, int seconds, phase *ph)
{
        static char reply[REPLY_MAX];
        ph->n = 0;
        ph->failed = 0;
        int fd = dial("127.0.0.9");
        int64_t stop = bench_now_ns() + (int64_t)seconds * 1000000000LL;
        while (fd >= 0 && bench_now_ns() < stop && ph->n < SAMPLES_MAX) {
                int64_t t0 = bench_now_ns();
                int status = post(fd, AUTH "WhoAmI", token, "{}", reply, sizeof(reply));
                int64_t took = bench_now_ns() - t0;
                if (status != 200) {
                        ph->failed++;
                        close(fd);
                        fd = dial("127.0.0.9");
                        continue;
                }
                ph->ns[ph->n++] = took;
        }
        if (fd >= 0) {
                close(fd);
        }
        bench_sort_ns(ph->ns, ph->n);
}

static double ms(int64_t ns)
{
        return (double)ns / 1e6;
}

static void print_phase(const char *name, const phase *ph)
{
        if (ph->n == 0) {
                printf("%-28s no call answered (%ld failed)\n", name, ph->failed);
                return;
        }
        printf("%-28s %8zu %8ld %9.2f %9.2f %9.2f\n", name, ph->n, ph->failed,
               ms(bench_percentile_ns(ph->ns, ph->n, 50)),
               ms(bench_percentile_ns(ph->ns, ph->n, 99)), ms(ph->ns[ph->n - 1]));
}

int main(int argc, char **argv)
{
        const char *stack = NULL;
        int hostile = 16, seconds = 8;
        for (int i = 1; i + 1 < argc; i += 2) {
                if (strcmp(argv[i], "--stack") == 0) {
                        stack = argv[i + 1];
                } else if (strcmp(argv[i], "--hostile") == 0) {
                        hostile = atoi(argv[i + 1]);
                } else if (strcmp(argv[i], "--seconds") == 0) {
                        seconds = atoi(argv[i + 1]);
                }
        }
        char url[256];
        if (stack == NULL || hostile < 1 || hostile > HOSTILE_MAX || seconds < 1 ||
            bench_stack_env(stack, "KEELSON_IT_GATEWAY_URL", url, sizeof(url)) != 0 ||
            sscanf(url, "http://%63[^:]:%d", g_target.host, &g_target.port) != 2) {
                fprintf(stderr, "usage: bench_hostile --stack DIR [--hostile N] [--seconds S]\n");
                return 2;
        }
        char token[512];
        if (session(token, sizeof(token)) != 0) {
                return 1;
        }
        build_bodies();
        phase idle = {.ns = malloc(SAMPLES_MAX * sizeof(int64_t))};
        phase loaded = {.ns = malloc(SAMPLES_MAX * sizeof(int64_t))};
        measure(token, seconds, &idle);
        pthread_t threads[HOSTILE_MAX];
        for (int i = 0; i < hostile; i++) {
                pthread_create(&threads[i], NULL, hostile_main, (void *)(intptr_t)i);
        }
        struct timespec settle = {0, 500 * 1000 * 1000};
        nanosleep(&settle, NULL); /* every hostile client is sending */
        measure(token, seconds, &loaded);
        atomic_store(&g_stop, true);
        for (int i = 0; i < hostile; i++) {
                pthread_join(threads[i], NULL);
        }
        printf("gateway %s, WhoAmI one call at a time for %d s per phase; %d hostile clients\n",
               url, seconds, hostile);
        printf("%-28s %8s %8s %9s %9s %9s\n", "phase", "calls", "failed", "p50 ms", "p99 ms",
               "max ms");
        print_phase("idle", &idle);
        char name[64];
        snprintf(name, sizeof(name), "%d hostile clients", hostile);
        print_phase(name, &loaded);
        if (idle.n > 0 && loaded.n > 0) {
                printf("median ratio (hostile / idle): %.2f\n",
                       (double)bench_percentile_ns(loaded.ns, loaded.n, 50) /
                           (double)bench_percentile_ns(idle.ns, idle.n, 50));
        }
        printf("hostile requests answered:");
        for (int s = 0; s < STATUS_KINDS; s++) {
                long n = atomic_load(&g_status[s]);
                if (n > 0) {
                        printf(" %d: %ld", s, n);
                }
        }
        printf("; no reply: %ld\n", atomic_load(&g_hostile_failed));
        free(idle.ns);
        free(loaded.ns);
        free(g_proto_body);
        free(g_json_body);
        return 0;
}
