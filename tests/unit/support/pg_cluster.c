/*
 * pg_cluster: see pg_cluster.h. Shell commands run through system(): the
 * server tools are programs anyway, and a failing command prints itself.
 */
#include "pg_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define DIR_PREFIX "/tmp/ks-test-pg-"

static int run(const char *fmt, ...)
{
        char cmd[2048];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= sizeof(cmd)) {
                fprintf(stderr, "command too long: %s\n", cmd);
                return -1;
        }
        int rv = system(cmd);
        if (rv != 0) {
                fprintf(stderr, "command failed (%d): %s\n", rv, cmd);
        }
        return rv;
}

static int find_bindir(char *out, size_t len)
{
        FILE *f = popen("ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1", "r");
        if (f == NULL) {
                return -1;
        }
        if (fgets(out, (int)len, f) == NULL) {
                out[0] = '\0';
        }
        pclose(f);
        out[strcspn(out, "\n")] = '\0';
        return out[0] != '\0' ? 0 : -1;
}

int pg_cluster_free_port(void)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t len = sizeof(sa);
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
                if (fd >= 0) {
                        close(fd);
                }
                return -1;
        }
        close(fd);
        return ntohs(sa.sin_port);
}

static int prepare_dir(pg_cluster *c)
{
        snprintf(c->dir, sizeof(c->dir), DIR_PREFIX "XXXXXX");
        if (mkdtemp(c->dir) == NULL) {
                c->dir[0] = '\0';
                return -1;
        }
        c->as_user[0] = '\0';
        if (geteuid() == 0) {
                struct passwd *pw = getpwnam("postgres");
                if (pw == NULL || chown(c->dir, pw->pw_uid, pw->pw_gid) != 0) {
                        return -1;
                }
                snprintf(c->as_user, sizeof(c->as_user), "runuser -u postgres -- ");
        }
        return 0;
}

/* pg_ctl start or restart with the same server options, so the port stays. */
static int pg_ctl(const pg_cluster *c, const char *action)
{
        return run("cd / && %s%s/pg_ctl %s -w -t 60 -D %s/data -l %s/server.log -o "
                   "\"-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=60\" >/dev/null",
                   c->as_user, c->bindir, action, c->dir, c->dir, c->port, c->dir);
}

int pg_cluster_start(pg_cluster *c)
{
        memset(c, 0, sizeof(*c));
        if (find_bindir(c->bindir, sizeof(c->bindir)) != 0 || prepare_dir(c) != 0 ||
            (c->port = pg_cluster_free_port()) <= 0) {
                return -1;
        }
        if (run("cd / && %s%s/initdb -D %s/data -U postgres --auth=trust -E UTF8 --no-sync "
                ">%s/initdb.log 2>&1",
                c->as_user, c->bindir, c->dir, c->dir) != 0) {
                return -1;
        }
        if (pg_ctl(c, "start") != 0) {
                return -1;
        }
        c->started = 1;
        snprintf(c->dsn, sizeof(c->dsn), "host=127.0.0.1 port=%d user=postgres dbname=postgres",
                 c->port);
        snprintf(c->uri, sizeof(c->uri), "postgresql://postgres@127.0.0.1:%d/postgres", c->port);
        return 0;
}

int pg_cluster_restart(pg_cluster *c)
{
        if (!c->started) {
                return -1;
        }
        return pg_ctl(c, "restart -m fast") == 0 ? 0 : -1;
}

void pg_cluster_stop(pg_cluster *c)
{
        if (c->started) {
                run("cd / && %s%s/pg_ctl stop -w -m fast -D %s/data >/dev/null", c->as_user,
                    c->bindir, c->dir);
                c->started = 0;
        }
        /* Only ever a folder this code created. */
        if (strncmp(c->dir, DIR_PREFIX, strlen(DIR_PREFIX)) == 0) {
                run("rm -rf %s", c->dir);
        }
        c->dir[0] = '\0';
}
