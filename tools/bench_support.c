#include "bench_support.h"

#include <dirent.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ks_topology.h"

#define CONNECT_TRIES    500 /* of CONNECT_PAUSE_MS: 5 s */
#define CONNECT_PAUSE_MS 10

int bench_stack_env(const char *dir, const char *key, char *out, size_t out_len)
{
        char path[1024], line[1024];
        size_t key_len = strlen(key);
        FILE *f;

        snprintf(path, sizeof(path), "%s/env", dir);
        if ((f = fopen(path, "r")) == NULL) {
                return -1;
        }
        while (fgets(line, sizeof(line), f) != NULL) {
                if (strncmp(line, key, key_len) == 0 && line[key_len] == '=') {
                        const char *v = line + key_len + 1;
                        size_t n = strcspn(v, "\n");

                        fclose(f);
                        if (n >= out_len) {
                                return -2;
                        }
                        memcpy(out, v, n);
                        out[n] = '\0';
                        return 0;
                }
        }
        fclose(f);
        return -2;
}

int bench_pg_durability(const char *dsn, char *out, size_t out_len)
{
        PGconn *c = PQconnectdb(dsn);
        PGresult *r = NULL;
        int rc = -1;

        if (PQstatus(c) == CONNECTION_OK) {
                r = PQexec(c, "SELECT string_agg(name || ' ' || setting, ', ' ORDER BY name),"
                              " bool_and(setting = 'on') FROM pg_settings WHERE name IN"
                              " ('fsync', 'synchronous_commit', 'full_page_writes')");
        }
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
                bool durable = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
                snprintf(out, out_len, "PostgreSQL %s: %s", PQgetvalue(r, 0, 0),
                         durable ? "durable"
                                 : "UNSAFE (stack.sh --unsafe-fast): a crash loses acknowledged"
                                   " writes, figures above what a durable server gives");
                rc = 0;
        } else {
                snprintf(out, out_len, "PostgreSQL durability unknown: %s",
                         PQerrorMessage(c) != NULL ? PQerrorMessage(c) : "out of memory");
                out[strcspn(out, "\n")] = '\0';
        }
        PQclear(r);
        PQfinish(c);
        return rc;
}

int bench_broker_option(const char *flag, const char *value, char *broker, size_t broker_len)
{
        if (strcmp(flag, "--broker") == 0) {
                snprintf(broker, broker_len, "%s", value);
                return 1;
        }
        if (strcmp(flag, "--stack") != 0) {
                return 0;
        }
        if (bench_stack_env(value, "KEELSON_IT_BROKER_URL", broker, broker_len) != 0) {
                fprintf(stderr, "no KEELSON_IT_BROKER_URL in %s/env\n", value);
                return -1;
        }
        return 1;
}

/* ---- CPU of a stack's processes ------------------------------------------------------------ */

/* utime + stime of pid in clock ticks (0 when gone); its parent in *ppid. */
static long long proc_ticks(long pid, long *ppid)
{
        char path[64], buf[1024];
        long long ut = 0, st = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
        if ((f = fopen(path, "r")) == NULL) {
                return 0;
        }
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        /* after "(comm)", which may hold spaces and parentheses: state, ppid, ..., utime, stime */
        const char *p = strrchr(buf, ')');
        if (p == NULL || sscanf(p + 2, "%*c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld",
                                ppid, &ut, &st) != 3) {
                return 0;
        }
        return ut + st;
}

long long bench_pid_ticks(long pid)
{
        long ppid;

        return pid > 0 ? proc_ticks(pid, &ppid) : 0;
}

long long bench_env_pids_ticks(const char *dir, const char *key)
{
        char v[512], *save = NULL;
        long long sum = 0;

        if (bench_stack_env(dir, key, v, sizeof(v)) != 0) {
                return 0;
        }
        for (char *t = strtok_r(v, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
                sum += bench_pid_ticks(atol(t));
        }
        return sum;
}

static long file_pid(const char *dir, const char *rel)
{
        char path[1024];
        long pid = 0;
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, rel);
        if ((f = fopen(path, "r")) != NULL) {
                if (fscanf(f, "%ld", &pid) != 1) {
                        pid = 0;
                }
                fclose(f);
        }
        return pid;
}

long long bench_pid_file_ticks(const char *dir, const char *rel)
{
        return bench_pid_ticks(file_pid(dir, rel));
}

/*
 * The postmaster's pid. The cluster is DIR/pg unless stack.sh had to put it
 * where the postgres user can reach (a private DIR): DIR/pg.path says where.
 */
static long postmaster_pid(const char *dir)
{
        char data[1024] = "";
        FILE *f;

        snprintf(data, sizeof(data), "%s/pg.path", dir);
        if ((f = fopen(data, "r")) != NULL) {
                if (fgets(data, sizeof(data), f) != NULL) {
                        data[strcspn(data, "\n")] = '\0';
                        fclose(f);
                        return file_pid(data, "postmaster.pid");
                }
                fclose(f);
        }
        return file_pid(dir, "pg/postmaster.pid");
}

long long bench_postgres_ticks(const char *dir)
{
        long pm = postmaster_pid(dir), ppid = 0;
        long long sum = bench_pid_ticks(pm);
        DIR *d = pm > 0 ? opendir("/proc") : NULL;
        struct dirent *e;

        while (d != NULL && (e = readdir(d)) != NULL) {
                long pid = atol(e->d_name);
                long long t;
                if (pid > 0 && (t = proc_ticks(pid, &ppid)) > 0 && ppid == pm) {
                        sum += t;
                }
        }
        if (d != NULL) {
                closedir(d);
        }
        return sum;
}

double bench_tick_us(void)
{
        return 1e6 / (double)sysconf(_SC_CLK_TCK);
}

/* ---- clock and percentiles ------------------------------------------------------------------ */

int64_t bench_now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long bench_wall_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static int cmp_i64(const void *a, const void *b)
{
        int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

        return x < y ? -1 : x > y;
}

void bench_sort_ns(int64_t *samples_ns, size_t n)
{
        qsort(samples_ns, n, sizeof(int64_t), cmp_i64);
}

int64_t bench_percentile_ns(const int64_t *sorted_ns, size_t n, int pct)
{
        return sorted_ns[(n * (size_t)pct) / 100];
}

int bench_auth_client(ks_rpc_client **out, const char *broker, int max_inflight)
{
        char url[KS_URL_MAX];
        const char *urls[1] = {url};
        ks_rpc_client_options o = {urls, 1, max_inflight, 10000};
        struct timespec pause = {0, CONNECT_PAUSE_MS * 1000 * 1000};

        *out = NULL;
        if (ks_broker_url(url, sizeof(url), broker, KS_SVC_AUTH, KS_SIDE_FRONT) != 0 ||
            ks_rpc_client_new(out, &o) != KS_OK) {
                *out = NULL;
                return -1;
        }
        for (int i = 0; i < CONNECT_TRIES && ks_rpc_client_connected(*out) == 0; i++) {
                nanosleep(&pause, NULL);
        }
        if (ks_rpc_client_connected(*out) <= 0) {
                ks_rpc_client_free(*out);
                *out = NULL;
                return -1;
        }
        return 0;
}

int bench_auth_call(ks_rpc_client *c, const char *request_id, const char *method,
                    const ProtobufCMessage *m, ks_rpc_result *res)
{
        uint8_t buf[BENCH_PAYLOAD_MAX];
        ks_rpc_call_args a;

        if (protobuf_c_message_get_packed_size(m) > sizeof(buf)) {
                memset(res, 0, sizeof(*res));
                return KS_INTERNAL;
        }
        memset(&a, 0, sizeof(a));
        a.method = method;
        a.request_id = request_id;
        a.payload = buf;
        a.payload_len = protobuf_c_message_pack(m, buf);
        return ks_rpc_call(c, &a, res);
}
