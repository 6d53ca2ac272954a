/*
 * The working set of a ledger worker (lg_worker, ledger.h): made once on
 * the worker's own thread, sized for the largest batch, so that no event of
 * a batch allocates. The RPC workers and the expiry sweeper each own one.
 */
#include <stdlib.h>

#include "ledger.h"

void lg_worker_fini(void *service, void *state)
{
        lg_worker *w = state;

        (void)service;
        if (w == NULL) {
                return;
        }
        lg_batch_free(w->batch);
        free(w->account_events);
        free(w->transfer_events);
        free(w->results);
        free(w->result_ts);
        free(w->ids);
        lg_args_fini(&w->args);
        free(w);
}

int lg_worker_init(void *service, int index, void **state)
{
        lg_service *svc = service;
        lg_worker *w = calloc(1, sizeof(*w));
        size_t n = (size_t)svc->batch_max;

        (void)index;
        *state = NULL;
        if (w == NULL) {
                return -1;
        }
        w->account_events = calloc(n, sizeof(*w->account_events));
        w->transfer_events = calloc(n, sizeof(*w->transfer_events));
        w->results = calloc(n, sizeof(*w->results));
        w->result_ts = calloc(n, sizeof(*w->result_ts));
        w->ids = calloc(n, sizeof(*w->ids));
        if (w->account_events == NULL || w->transfer_events == NULL || w->results == NULL ||
            w->result_ts == NULL || w->ids == NULL ||
            lg_batch_new(&w->batch, svc->batch_max) != 0) {
                lg_worker_fini(service, w);
                return -1;
        }
        *state = w;
        return 0;
}
