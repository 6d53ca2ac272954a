/*
 * The steps of a pipeline (ks_pg_pipeline.c), for another runner of
 * pipelines in core (ks_pg_read.c): not for services.
 */
#ifndef KS_PG_PIPELINE_H
#define KS_PG_PIPELINE_H

#include "ks_pg.h"

/*
 * Prepares s on c when it is new to c (outside pipeline mode): KS_OK and the
 * name it runs under (NULL: unprepared), which lasts while c's prepared
 * statements do (through the pipeline), or its failure.
 */
int ks_pg_pipeline_prepare(PGconn *c, const char *request_id, const ks_pg_stmt *s,
                           const char **name);
/* Sends s under name (from ks_pg_pipeline_prepare) in pipeline mode: 1, or 0. */
int ks_pg_pipeline_send(PGconn *c, const ks_pg_stmt *s, const char *name);
/* Reads s's result into *s->out when code is KS_OK and s succeeded; the code after s. */
int ks_pg_pipeline_take(PGconn *c, const char *request_id, const ks_pg_stmt *s, int code);
/* Reads up to the result of the next Sync. */
void ks_pg_pipeline_sync(PGconn *c);

#endif
