/*
 * A throwaway PostgreSQL cluster for tests: initdb into a fresh folder under
 * /tmp, started on a free loopback port with fsync off, removed by
 * pg_cluster_stop. PostgreSQL refuses to run as root, so as root the server
 * tools run as the postgres OS user (runuser).
 *
 *   static pg_cluster pg;
 *   static int setup(void **state) { return pg_cluster_start(&pg); }
 *   static int teardown(void **state) { pg_cluster_stop(&pg); return 0; }
 *   ... PQconnectdb(pg.dsn) ...
 */
#ifndef KS_TEST_PG_CLUSTER_H
#define KS_TEST_PG_CLUSTER_H

typedef struct pg_cluster {
        char dir[64];     /* /tmp/ks-test-pg-XXXXXX: data/, server.log, the socket */
        char bindir[256]; /* the newest /usr/lib/postgresql/<v>/bin */
        char as_user[64]; /* "runuser -u postgres -- " when root, else "" */
        int port;         /* loopback TCP port */
        char dsn[256];    /* "host=127.0.0.1 port=… user=postgres dbname=postgres" */
        char uri[256];    /* the same as a postgresql:// URI */
        int started;
} pg_cluster;

/* Creates and starts the cluster; fills dir, port, dsn and uri. Returns 0 or -1. */
int pg_cluster_start(pg_cluster *c);

/*
 * Restarts the server (fast shutdown: every session is terminated) on the
 * same port and data. Returns 0 or -1.
 */
int pg_cluster_restart(pg_cluster *c);

/* Stops the server and removes its folder; safe after a failed start. */
void pg_cluster_stop(pg_cluster *c);

/* A loopback TCP port the kernel just handed out, so very likely free; -1 on error. */
int pg_cluster_free_port(void);

#endif
