/*
 * bench_redis_bucket: rate-limit decisions per second through the
 * gateway's own Redis client (services/gateway/redis.c: hiredis async on
 * libevent, EVALSHA of ratelimit.lua, one connection, a window of decisions
 * in flight), against redis-benchmark running the same script with EVALSHA
 * on the same redis-server, in the same run.
 *
 *   bench_redis_bucket [decisions, default 200000] [window, default 64] [rounds, default 3]
 *
 * It starts a redis-server of its own on a free loopback port (redis-server
 * and redis-benchmark must be on PATH) and stops it at the end. Keys are
 * spread over 1,024 buckets, with the api scope's default parameters.
 * redis-benchmark runs twice: with the gateway's shape (one connection,
 * `window` commands pipelined) and with its usual 50 connections.
 */
#include <arpa/inet.h>
#include <event2/event.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bucket.h"
#include "ks_code.h"
#include "ks_log.h"
#include "ratelimit_script.h"
#include "redis.h"

#define KEYS          1024
#define START_WAIT_MS 10000
#define CMD_MAX       512
#define ROUNDS_MAX    15

typedef struct bench {
        struct event_base *base;
        gw_redis *redis;
        gw_limit lim;
        long total, started, done, failed;
        unsigned seed;
} bench;

static int free_port(void)
{
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int port = -1;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
                port = ntohs(sa.sin_port);
        }
        if (fd >= 0) {
                close(fd);
        }
        return port;
}

static pid_t start_redis(int port)
{
        char port_s[16];
        snprintf(port_s, sizeof(port_s), "%d", port);
        pid_t pid = fork();
        if (pid == 0) {
                int devnull = open("/dev/null", O_RDWR);
                dup2(devnull, STDOUT_FILENO);
                dup2(devnull, STDERR_FILENO);
                execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1",
                       "--save", "", "--appendonly", "no", (char *)NULL);
                _exit(127);
        }
        return pid;
}

/* Waits for redis-server, loads the script; writes its sha. Returns 0 or -1. */
static int load_script(int port, char sha[41])
{
        struct timespec pause = {0, 50000000};
        for (int waited = 0; waited < START_WAIT_MS; waited += 50) {
                redisContext *c = redisConnect("127.0.0.1", port);
                if (c != NULL && c->err == 0) {
                        redisReply *r = redisCommand(c, "SCRIPT LOAD %b", gw_ratelimit_lua,
                                                     gw_ratelimit_lua_len);
                        int ok = r != NULL && r->type == REDIS_REPLY_STRING && r->len == 40;
                        if (ok) {
                                memcpy(sha, r->str, 41);
                        }
                        freeReplyObject(r);
                        redisFree(c);
                        if (ok) {
                                return 0;
                        }
                } else {
                        redisFree(c);
                }
                nanosleep(&pause, NULL);
        }
        return -1;
}

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the gateway's client ---------------------------------------------------- */

static void next(bench *b);

static void on_done(void *arg, int rc, const gw_decision *d)
{
        bench *b = arg;
        (void)d;
        b->done++;
        b->failed += rc != KS_OK;
        if (b->done == b->total) {
                event_base_loopbreak(b->base);
                return;
        }
        next(b);
}

static void next(bench *b)
{
        char key[32];
        if (b->started >= b->total) {
                return;
        }
        int n = snprintf(key, sizeof(key), "bench:%d", rand_r(&b->seed) % KEYS);
        b->started++;
        if (gw_redis_take(b->redis, key, (size_t)n, &b->lim, 1, on_done, b) != KS_OK) {
                b->started--;
                b->failed++;
                b->done++;
        }
}

static double run_client(int port, long total, int window, long *failed)
{
        bench b = {.lim = {500, 500, 60000000}, .total = total, .seed = 42};
        gw_redis_options o = {.prefix = "",
                              .timeout_ms = 10000,
                              .retry_max_ms = 1000,
                              .pending_max = window,
                              .server_time = true};
        snprintf(o.url.host, sizeof(o.url.host), "127.0.0.1");
        o.url.port = port;
        b.base = event_base_new();
        if (b.base == NULL || gw_redis_new(&b.redis, b.base, &o) != 0) {
                return -1;
        }
        double deadline = now_s() + 5;
        while (!gw_redis_up(b.redis) && now_s() < deadline) {
                event_base_loop(b.base, EVLOOP_ONCE);
        }
        double t0 = now_s();
        for (int i = 0; i < window; i++) {
                next(&b);
        }
        event_base_dispatch(b.base);
        double elapsed = now_s() - t0;
        *failed = b.failed;
        gw_redis_free(b.redis);
        event_base_free(b.base);
        return (double)total / elapsed;
}

/* ---- redis-benchmark ----------------------------------------------------------- */

/* requests/s from redis-benchmark --csv (the last line's second field); -1 on failure. */
static double run_redis_benchmark(int port, const char *sha, long total, int clients, int pipeline)
{
        char cmd[CMD_MAX], line[CMD_MAX];
        double rps = -1;
        snprintf(cmd, sizeof(cmd),
                 "redis-benchmark -h 127.0.0.1 -p %d -n %ld -c %d -P %d -r %d --csv "
                 "EVALSHA %s 1 bench:__rand_int__ 500 500 60000000 1 2>/dev/null",
                 port, total, clients, pipeline, KEYS, sha);
        FILE *p = popen(cmd, "r");
        if (p == NULL) {
                return -1;
        }
        while (fgets(line, sizeof(line), p) != NULL) {
                char *comma = strstr(line, "\",\"");
                if (comma != NULL && strncmp(line, "\"test\"", 6) != 0) {
                        rps = atof(comma + 3);
                }
        }
        pclose(p);
        return rps;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
        long total = argc > 1 ? atol(argv[1]) : 200000;
        int window = argc > 2 ? atoi(argv[2]) : 64;
        int rounds = argc > 3 ? atoi(argv[3]) : 3;
        double ours[ROUNDS_MAX], shape[ROUNDS_MAX], fifty[ROUNDS_MAX], r1[ROUNDS_MAX],
            r2[ROUNDS_MAX];
        char sha[41];
        long failed = 0, failed_all = 0;
        if (total < 1000 || window < 1 || window > 4096 || rounds < 1 || rounds > ROUNDS_MAX) {
                fprintf(stderr,
                        "usage: bench_redis_bucket [decisions >= 1000] [window 1-4096] "
                        "[rounds 1-%d]\n",
                        ROUNDS_MAX);
                return 2;
        }
        ks_log_init("bench", KS_LOG_WARN);
        int port = free_port();
        pid_t pid = start_redis(port);
        if (pid <= 0 || load_script(port, sha) != 0) {
                fprintf(stderr, "cannot start redis-server\n");
                return 1;
        }
        run_client(port, total / 10, window, &failed); /* warm-up */
        /* Rounds alternate the clients, so that a busy spell of the machine
         * hits both; each ratio is taken within its round. */
        for (int i = 0; i < rounds; i++) {
                ours[i] = run_client(port, total, window, &failed);
                failed_all += failed;
                shape[i] = run_redis_benchmark(port, sha, total, 1, window);
                fifty[i] = run_redis_benchmark(port, sha, total, 50, 1);
                r1[i] = shape[i] > 0 ? ours[i] / shape[i] : 0;
                r2[i] = fifty[i] > 0 ? ours[i] / fifty[i] : 0;
        }
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        printf("redis token bucket (ratelimit.lua, EVALSHA), %d keys, %ld decisions x %d rounds "
               "(medians)\n",
               KEYS, total, rounds);
        printf("  gateway client, 1 connection, %d in flight: %9.0f decisions/s (%ld failed)\n",
               window, median(ours, rounds), failed_all);
        printf("  redis-benchmark -c 1 -P %-4d              : %9.0f req/s   ratio %.2f\n", window,
               median(shape, rounds), median(r1, rounds));
        printf("  redis-benchmark -c 50 -P 1                : %9.0f req/s   ratio %.2f\n",
               median(fifty, rounds), median(r2, rounds));
        return failed_all == 0 && median(shape, rounds) > 0 ? 0 : 1;
}
