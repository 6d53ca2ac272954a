/* ks_method: see ks_method.h. */
#include "ks_method.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ks_code.h"

#define METHOD_NAME_MAX 160 /* "<package>.<Service>/<Method>" */

static const ks_method_row *row_of(const ks_method_table *t, const char *name)
{
        const ks_method_row *found = NULL;

        for (size_t i = 0; i < t->n_rows; i++) {
                if (strcmp(t->rows[i].name, name) == 0) {
                        if (found != NULL) {
                                return NULL; /* twice: the caller names it */
                        }
                        found = &t->rows[i];
                }
        }
        return found;
}

/* Every row names a method of the descriptor, once. */
static int rows_known(const ks_method_table *t, char *err, size_t err_len)
{
        for (size_t i = 0; i < t->n_rows; i++) {
                const char *name = t->rows[i].name;
                if (protobuf_c_service_descriptor_get_method_by_name(t->service, name) == NULL) {
                        snprintf(err, err_len, "%s: a row for %s, which the .proto does not have",
                                 t->service->name, name);
                        return -1;
                }
                if (row_of(t, name) == NULL) {
                        snprintf(err, err_len, "%s: two rows for %s", t->service->name, name);
                        return -1;
                }
        }
        return 0;
}

static int make_method(const ks_method_table *t, unsigned i, ks_method *m, char *err,
                       size_t err_len)
{
        const ProtobufCMethodDescriptor *d = &t->service->methods[i];
        const ks_method_row *r = row_of(t, d->name);
        char full[METHOD_NAME_MAX];
        int n = snprintf(full, sizeof(full), "%s/%s", t->service->name, d->name);
        char *name;

        if (r == NULL) {
                snprintf(err, err_len, "%s: no row for %s", t->service->name, d->name);
                return -1;
        }
        if (n < 0 || (size_t)n >= sizeof(full) || (name = strdup(full)) == NULL) {
                snprintf(err, err_len, "%s: method name too long or out of memory",
                         t->service->name);
                return -1;
        }
        *m = (ks_method){.name = name,
                         .input = d->input,
                         .output = d->output,
                         .handler = r->handler,
                         .flags = r->flags,
                         .bearer = r->bearer,
                         .permission = r->permission,
                         .revokes = r->revokes};
        if (((r->flags & KS_M_PUBLIC) != 0) != (r->bearer == KS_BEARER_NONE)) {
                snprintf(err, err_len, "%s: public methods, and only they, need no bearer",
                         m->name);
                return -1;
        }
        return 0;
}

int ks_method_resolve(const ks_method_table *t, ks_method **out, size_t *n, char *err,
                      size_t err_len)
{
        size_t count = t->service->n_methods;
        ks_method *v;

        *out = NULL;
        *n = 0;
        if (rows_known(t, err, err_len) != 0) {
                return -1;
        }
        if ((v = calloc(count > 0 ? count : 1, sizeof(*v))) == NULL) {
                snprintf(err, err_len, "out of memory");
                return -1;
        }
        for (unsigned i = 0; i < count; i++) {
                if (make_method(t, i, &v[i], err, err_len) != 0) {
                        ks_method_free(v, i + 1); /* v[i].name is set or NULL */
                        return -1;
                }
        }
        *out = v;
        *n = count;
        return 0;
}

void ks_method_free(ks_method *v, size_t n)
{
        if (v == NULL) {
                return;
        }
        for (size_t i = 0; i < n; i++) {
                free((char *)v[i].name);
        }
        free(v);
}

const ks_method *ks_method_find(const ks_method *v, size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++) {
                if (strcmp(v[i].name, name) == 0) {
                        return &v[i];
                }
        }
        return NULL;
}

int ks_method_admits(const ks_method *m, const ks_caller *caller, char *msg, size_t msg_len)
{
        bool user = caller->user_id != NULL && caller->user_id[0] != '\0';

        if (m->bearer == KS_BEARER_NONE) {
                return KS_OK;
        }
        if (!caller->authenticated) {
                if ((m->flags & KS_M_CALLER_OPTIONAL) != 0) {
                        return KS_OK;
                }
                snprintf(msg, msg_len, "authentication required");
                return KS_UNAUTHENTICATED;
        }
        if (m->bearer == KS_BEARER_USER && !user) {
                snprintf(msg, msg_len, "this method needs a user session");
                return KS_PERMISSION_DENIED;
        }
        return KS_OK;
}
