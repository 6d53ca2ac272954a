/*
 * Prepared statements of pool connections: each statement text a
 * connection runs is parsed and planned by the server once per connection,
 * then executed by name (libpq's PQprepare / PQexecPrepared), as pgbench's
 * `-M prepared` does. For the short statements of a request, parsing and
 * planning cost as much as running them.
 *
 * The cache hangs on the PGconn through libpq's event procedures
 * (libpq-events.h), so it lives and dies with the connection: created when
 * the pool connects, emptied when libpq resets the connection (the new
 * server session knows none of the old names), freed with it. A connection
 * is used by one thread at a time (its pool owner), so the cache needs no
 * lock.
 *
 * Entries are found by the statement's text and parameter types (a hash,
 * then a full comparison), never by a pointer, so a statement built at run
 * time cannot be mistaken for another. At most KS_PG_PREPARED_MAX per
 * connection; past that, statements run unprepared.
 *
 * A cached plan whose tables changed shape under it (a migration run by
 * another replica) fails with 0A000 "cached plan must not change result
 * type" on every later execution: ks_pg_prepared_failed marks the cache
 * stale, and the next statement discards every prepared statement of the
 * connection (DEALLOCATE ALL) and starts again. The failure itself is
 * reported as KS_ABORTED, which callers retry: the retry runs on the new
 * plan.
 */
#include "ks_pg.h"

#include <libpq-events.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
        uint64_t hash;
        char *sql;
        Oid *types; /* n_params of them, or NULL: the server infers them */
        int n_params;
        char name[16];
} entry;

typedef struct cache {
        entry entries[KS_PG_PREPARED_MAX];
        int n;
        unsigned next_name; /* names are never reused within a server session */
        bool stale;
} cache;

static void cache_clear(cache *c)
{
        for (int i = 0; i < c->n; i++) {
                free(c->entries[i].sql);
                free(c->entries[i].types);
        }
        c->n = 0;
        c->next_name = 0;
        c->stale = false;
}

static int on_event(PGEventId id, void *info, void *pass)
{
        (void)pass;
        if (id == PGEVT_REGISTER) {
                PGconn *conn = ((PGEventRegister *)info)->conn;
                cache *c = calloc(1, sizeof(*c));
                return c != NULL && PQsetInstanceData(conn, on_event, c) == 1;
        }
        if (id == PGEVT_CONNRESET) {
                cache *c = PQinstanceData(((PGEventConnReset *)info)->conn, on_event);
                if (c != NULL) {
                        cache_clear(c);
                }
        } else if (id == PGEVT_CONNDESTROY) {
                cache *c = PQinstanceData(((PGEventConnDestroy *)info)->conn, on_event);
                if (c != NULL) {
                        cache_clear(c);
                        free(c);
                }
        }
        return 1;
}

int ks_pg_prepared_attach(PGconn *conn)
{
        return PQregisterEventProc(conn, on_event, "keelson-prepared", NULL) == 1 ? 0 : -1;
}

/* FNV-1a over the text and the types. */
static uint64_t hash_of(const char *sql, int n, const Oid *types)
{
        uint64_t h = 14695981039346656037ULL;
        for (const unsigned char *p = (const unsigned char *)sql; *p != '\0'; p++) {
                h = (h ^ *p) * 1099511628211ULL;
        }
        for (int i = 0; types != NULL && i < n; i++) {
                for (int b = 0; b < 4; b++) {
                        h = (h ^ ((types[i] >> (8 * b)) & 0xffu)) * 1099511628211ULL;
                }
        }
        return h ^ (uint64_t)n;
}

static bool same(const entry *e, uint64_t h, const char *sql, int n, const Oid *types)
{
        if (e->hash != h || e->n_params != n || (e->types == NULL) != (types == NULL) ||
            strcmp(e->sql, sql) != 0) {
                return false;
        }
        return types == NULL || memcmp(e->types, types, (size_t)n * sizeof(Oid)) == 0;
}

static void discard_all(PGconn *conn, cache *c)
{
        PGresult *r = PQexec(conn, "DEALLOCATE ALL");
        bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (ok) {
                unsigned next = c->next_name;
                cache_clear(c);
                c->next_name = next; /* a name from before stays unused */
        }
}

const char *ks_pg_prepared(PGconn *conn, const char *sql, int n_params, const Oid *types,
                           PGresult **failed)
{
        *failed = NULL;
        cache *c = conn != NULL ? PQinstanceData(conn, on_event) : NULL;
        if (c == NULL || sql == NULL || n_params < 0 || PQpipelineStatus(conn) != PQ_PIPELINE_OFF) {
                return NULL;
        }
        if (c->stale) {
                discard_all(conn, c);
                if (c->stale) {
                        return NULL;
                }
        }
        uint64_t h = hash_of(sql, n_params, types);
        for (int i = 0; i < c->n; i++) {
                if (same(&c->entries[i], h, sql, n_params, types)) {
                        return c->entries[i].name;
                }
        }
        if (c->n == KS_PG_PREPARED_MAX) {
                return NULL;
        }
        entry *e = &c->entries[c->n];
        size_t types_size = (size_t)n_params * sizeof(Oid);
        e->sql = strdup(sql);
        e->types = types != NULL && n_params > 0 ? malloc(types_size) : NULL;
        if (e->sql == NULL || (types != NULL && n_params > 0 && e->types == NULL)) {
                free(e->sql);
                free(e->types);
                return NULL;
        }
        if (e->types != NULL) {
                memcpy(e->types, types, types_size);
        }
        snprintf(e->name, sizeof(e->name), "ks%u", c->next_name);
        PGresult *r = PQprepare(conn, e->name, sql, n_params, types);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                /* The statement's own error (or a lost connection): the caller reports it. */
                free(e->sql);
                free(e->types);
                *failed = r;
                return NULL;
        }
        PQclear(r);
        c->next_name++;
        e->hash = h;
        e->n_params = n_params;
        c->n++;
        return e->name;
}

bool ks_pg_prepared_failed(const PGconn *conn, const PGresult *res)
{
        cache *c = conn != NULL ? PQinstanceData(conn, on_event) : NULL;
        const char *st = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

        if (c == NULL || c->n == 0 || st == NULL || strcmp(st, "0A000") != 0) {
                return false;
        }
        c->stale = true;
        return true;
}
