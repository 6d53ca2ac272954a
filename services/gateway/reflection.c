/*
 * gRPC server reflection from a FileDescriptorSet.
 *
 * protobuf-c keeps no FileDescriptorProto of a compiled .proto, so the
 * gateway carries the set protoc made at build time (grpc.cmake) and reads
 * it here once, with the C code of descriptor.proto:
 *
 * - Cutting. Of every service only the methods the gateway serves stay
 *   (served(): not KS_M_INTERNAL, not the webhook intake); a service left
 *   with none goes. The comments go with them: source_code_info locations
 *   under a cut method or service are dropped and the indexes of those after
 *   it renumbered, so that grpcurl's describe still shows each comment on
 *   its own element. Messages stay, even those only a cut method used: a
 *   type says nothing that can be called.
 *   protobuf-c frees an unpacked message by walking its arrays, so nothing
 *   is freed early: cut elements are moved to the end of their arrays and
 *   the counts lowered while the file is serialized and indexed, then put
 *   back for free_unpacked.
 * - Index. Every symbol (messages, fields, oneofs, enums and their values,
 *   services, methods, extensions) names its file, sorted for bsearch; every
 *   extension is also listed by (extendee, number).
 * - Answers. A file answer holds the file and its transitive dependencies
 *   (breadth first, each once), less the dependencies the stream already
 *   has when the caller keeps a gw_reflection_sent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "ks_assert.h"
#include "reflection.h"
#include "routes.h"

#define NAME_MAX_BYTES  512 /* a symbol's full name */
#define NESTING_MAX     32  /* messages inside messages */
#define FILE_SERVICE    6   /* FileDescriptorProto.service */
#define SERVICE_METHOD  2   /* ServiceDescriptorProto.method */
#define METHOD_NAME_MAX (2 * NAME_MAX_BYTES + 2)

typedef Google__Protobuf__FileDescriptorProto file_proto;
typedef Google__Protobuf__DescriptorProto message_proto;
typedef Google__Protobuf__EnumDescriptorProto enum_proto;
typedef Google__Protobuf__FieldDescriptorProto field_proto;
typedef Grpc__Reflection__V1__ServerReflectionRequest request;
typedef Grpc__Reflection__V1__ServerReflectionResponse response;

typedef struct file {
        char *name;
        uint8_t *bytes; /* the FileDescriptorProto as served */
        size_t len;
        size_t *deps; /* indexes of its direct dependencies */
        size_t n_deps;
} file;

typedef struct symbol {
        char *name;
        size_t file;
        bool message;
} symbol;

typedef struct extension {
        char *extendee; /* full name, no leading dot */
        int32_t number;
        size_t file;
} extension;

struct gw_reflection {
        file files[GW_REFLECTION_FILES_MAX];
        size_t n_files;
        symbol *symbols;
        size_t n_symbols, cap_symbols;
        extension *extensions;
        size_t n_extensions, cap_extensions;
        char **services;
        size_t n_services, cap_services;
};

bool gw_reflection_served(const char *method, void *arg)
{
        (void)arg;
        return gw_grpc_own_method(method) || gw_method_routed(method);
}

/* ---- the index --------------------------------------------------------- */

/* "scope.name" (or "name" at the root) malloc'd; NULL when too long or out of memory. */
static char *join(const char *scope, const char *name)
{
        if (name == NULL) {
                return NULL;
        }
        size_t a = strlen(scope), dot = a > 0 ? 1 : 0, b = strlen(name);
        char *s = a + dot + b < NAME_MAX_BYTES ? malloc(a + dot + b + 1) : NULL;
        if (s != NULL) {
                memcpy(s, scope, a);
                memcpy(s + a, ".", dot);
                memcpy(s + a + dot, name, b + 1);
        }
        return s;
}

static int add_symbol(gw_reflection *r, const char *scope, const char *name, size_t f, bool message)
{
        if (r->n_symbols == r->cap_symbols) {
                size_t cap = r->cap_symbols == 0 ? 256 : r->cap_symbols * 2;
                symbol *v =
                    cap <= GW_REFLECTION_SYMBOLS_MAX ? realloc(r->symbols, cap * sizeof(*v)) : NULL;
                if (v == NULL) {
                        return -1;
                }
                r->symbols = v;
                r->cap_symbols = cap;
        }
        char *full = join(scope, name);
        if (full == NULL) {
                return -1;
        }
        r->symbols[r->n_symbols++] = (symbol){full, f, message};
        return 0;
}

static int add_extension(gw_reflection *r, const char *scope, const field_proto *x, size_t f)
{
        if (add_symbol(r, scope, x->name, f, false) != 0 || x->extendee == NULL) {
                return -1;
        }
        if (r->n_extensions == r->cap_extensions) {
                size_t cap = r->cap_extensions == 0 ? 16 : r->cap_extensions * 2;
                extension *v = cap <= GW_REFLECTION_SYMBOLS_MAX
                                   ? realloc(r->extensions, cap * sizeof(*v))
                                   : NULL;
                if (v == NULL) {
                        return -1;
                }
                r->extensions = v;
                r->cap_extensions = cap;
        }
        const char *extendee = x->extendee[0] == '.' ? x->extendee + 1 : x->extendee;
        char *copy = join("", extendee);
        if (copy == NULL) {
                return -1;
        }
        r->extensions[r->n_extensions++] = (extension){copy, x->number, f};
        return 0;
}

/* An enum and its values; the values are named in the enum's scope, as protobuf's C++ does. */
static int index_enum(gw_reflection *r, const char *scope, const enum_proto *e, size_t f)
{
        if (add_symbol(r, scope, e->name, f, false) != 0) {
                return -1;
        }
        for (size_t i = 0; i < e->n_value; i++) {
                if (add_symbol(r, scope, e->value[i]->name, f, false) != 0) {
                        return -1;
                }
        }
        return 0;
}

static int index_message(gw_reflection *r, const char *scope, const message_proto *m, size_t f,
                         int depth)
{
        char *full = join(scope, m->name);
        int rc = full != NULL && depth < NESTING_MAX ? add_symbol(r, scope, m->name, f, true) : -1;
        for (size_t i = 0; rc == 0 && i < m->n_field; i++) {
                rc = add_symbol(r, full, m->field[i]->name, f, false);
        }
        for (size_t i = 0; rc == 0 && i < m->n_oneof_decl; i++) {
                rc = add_symbol(r, full, m->oneof_decl[i]->name, f, false);
        }
        for (size_t i = 0; rc == 0 && i < m->n_extension; i++) {
                rc = add_extension(r, full, m->extension[i], f);
        }
        for (size_t i = 0; rc == 0 && i < m->n_enum_type; i++) {
                rc = index_enum(r, full, m->enum_type[i], f);
        }
        for (size_t i = 0; rc == 0 && i < m->n_nested_type; i++) {
                rc = index_message(r, full, m->nested_type[i], f, depth + 1);
        }
        free(full);
        return rc;
}

/* Indexes a file as it will be served (after the cut). */
static int index_file(gw_reflection *r, const file_proto *fp, size_t f)
{
        const char *pkg = fp->package != NULL ? fp->package : "";
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < fp->n_message_type; i++) {
                rc = index_message(r, pkg, fp->message_type[i], f, 0);
        }
        for (size_t i = 0; rc == 0 && i < fp->n_enum_type; i++) {
                rc = index_enum(r, pkg, fp->enum_type[i], f);
        }
        for (size_t i = 0; rc == 0 && i < fp->n_extension; i++) {
                rc = add_extension(r, pkg, fp->extension[i], f);
        }
        for (size_t i = 0; rc == 0 && i < fp->n_service; i++) {
                const Google__Protobuf__ServiceDescriptorProto *s = fp->service[i];
                char *svc = join(pkg, s->name);
                rc = svc != NULL ? add_symbol(r, pkg, s->name, f, false) : -1;
                for (size_t j = 0; rc == 0 && j < s->n_method; j++) {
                        rc = add_symbol(r, svc, s->method[j]->name, f, false);
                }
                if (rc == 0 && r->n_services == r->cap_services) {
                        size_t cap = r->cap_services == 0 ? 16 : r->cap_services * 2;
                        char **v = realloc(r->services, cap * sizeof(*v));
                        rc = v != NULL ? 0 : -1;
                        if (v != NULL) {
                                r->services = v;
                                r->cap_services = cap;
                        }
                }
                if (rc == 0) {
                        r->services[r->n_services++] = svc;
                        svc = NULL;
                }
                free(svc);
        }
        return rc;
}

static int cmp_symbol(const void *a, const void *b)
{
        return strcmp(((const symbol *)a)->name, ((const symbol *)b)->name);
}

static const symbol *find_symbol(const gw_reflection *r, const char *name)
{
        symbol key = {(char *)(uintptr_t)name, 0, false};
        return r->n_symbols == 0 ? NULL
                                 : bsearch(&key, r->symbols, r->n_symbols, sizeof(key), cmp_symbol);
}

static const file *find_file(const gw_reflection *r, const char *name, size_t *idx)
{
        for (size_t i = 0; i < r->n_files; i++) {
                if (strcmp(r->files[i].name, name) == 0) {
                        *idx = i;
                        return &r->files[i];
                }
        }
        return NULL;
}

/* ---- the cut ------------------------------------------------------------- */

/* What a cut lowered, to be put back before free_unpacked. */
typedef struct saved_service {
        Google__Protobuf__ServiceDescriptorProto *service;
        size_t n_method;
} saved_service;

typedef struct cut {
        size_t n_service;
        saved_service *saved; /* every service's own count, whatever its place now */
        size_t n_location;
        long *service_to; /* old service index -> new, -1 cut */
        long *method_to;  /* old (service, method) -> new, -1 cut; at method_at[service] */
        size_t *method_at;
        bool *keep;   /* scratch, as wide as the widest array */
        uint8_t *tmp; /* scratch, as many pointers */
} cut;

/*
 * Moves the kept elements (keep[i]) of the array of n pointers at base to the
 * front, in order, the others after them; returns the count kept. memcpy
 * rather than a cast to void **: the arrays hold pointers of other types.
 */
static size_t partition(void *base, size_t n, const bool *keep, uint8_t *tmp)
{
        uint8_t *v = base;
        size_t k = 0, o = 0, sz = sizeof(void *);
        for (size_t i = 0; i < n; i++) {
                if (keep[i]) {
                        memmove(v + k++ * sz, v + i * sz, sz);
                } else {
                        memcpy(tmp + o++ * sz, v + i * sz, sz);
                }
        }
        if (o > 0) {
                memcpy(v + k * sz, tmp, o * sz);
        }
        return k;
}

/* Decides which methods of service s stay; fills keep and method_to. Returns the count kept. */
static size_t cut_methods(const char *pkg, const Google__Protobuf__ServiceDescriptorProto *s,
                          long *method_to, bool *keep, gw_reflection_served_fn served, void *arg)
{
        char name[METHOD_NAME_MAX];
        size_t k = 0;
        for (size_t m = 0; m < s->n_method; m++) {
                int n = snprintf(name, sizeof(name), "%s%s%s/%s", pkg, *pkg != '\0' ? "." : "",
                                 s->name != NULL ? s->name : "",
                                 s->method[m]->name != NULL ? s->method[m]->name : "");
                keep[m] = n > 0 && (size_t)n < sizeof(name) && served(name, arg);
                method_to[m] = keep[m] ? (long)k++ : -1;
        }
        return k;
}

/* Renumbers a location's path after the cut; false when it lies under a cut element. */
static bool relocate(const cut *c, Google__Protobuf__SourceCodeInfo__Location *l)
{
        int32_t *p = l->path;
        if (l->n_path < 2 || p[0] != FILE_SERVICE || p[1] < 0 || (size_t)p[1] >= c->n_service) {
                return true; /* not under a service: left as protoc wrote it */
        }
        size_t s = (size_t)p[1];
        if (c->service_to[s] < 0) {
                return false;
        }
        p[1] = (int32_t)c->service_to[s];
        if (l->n_path < 4 || p[2] != SERVICE_METHOD || p[3] < 0 ||
            (size_t)p[3] >= c->method_at[s + 1] - c->method_at[s]) {
                return true;
        }
        long to = c->method_to[c->method_at[s] + (size_t)p[3]];
        if (to < 0) {
                return false;
        }
        p[3] = (int32_t)to;
        return true;
}

static void cut_free(cut *c)
{
        free(c->saved);
        free(c->service_to);
        free(c->method_at);
        free(c->method_to);
        free(c->keep);
        free(c->tmp);
        memset(c, 0, sizeof(*c));
}

/* The cut's memory, sized by fp's arrays. */
static int cut_alloc(cut *c, const file_proto *fp)
{
        size_t methods = 0, widest = fp->n_service;
        for (size_t s = 0; s < fp->n_service; s++) {
                methods += fp->service[s]->n_method;
                widest = fp->service[s]->n_method > widest ? fp->service[s]->n_method : widest;
        }
        if (fp->source_code_info != NULL && fp->source_code_info->n_location > widest) {
                widest = fp->source_code_info->n_location;
        }
        memset(c, 0, sizeof(*c));
        c->saved = calloc(fp->n_service + 1, sizeof(*c->saved));
        c->service_to = calloc(fp->n_service + 1, sizeof(*c->service_to));
        c->method_at = calloc(fp->n_service + 1, sizeof(*c->method_at));
        c->method_to = calloc(methods + 1, sizeof(*c->method_to));
        c->keep = calloc(widest + 1, sizeof(*c->keep));
        c->tmp = calloc(widest + 1, sizeof(void *));
        if (c->saved == NULL || c->service_to == NULL || c->method_at == NULL ||
            c->method_to == NULL || c->keep == NULL || c->tmp == NULL) {
                cut_free(c);
                return -1;
        }
        return 0;
}

/*
 * Cuts fp's unserved methods and services, and their comments, in place;
 * uncut_file puts the counts back. Returns 0, or -1 (out of memory).
 */
static int cut_file(file_proto *fp, cut *c, gw_reflection_served_fn served, void *arg)
{
        const char *pkg = fp->package != NULL ? fp->package : "";
        if (cut_alloc(c, fp) != 0) {
                return -1;
        }
        bool *keep_service = calloc(fp->n_service + 1, sizeof(*keep_service));
        if (keep_service == NULL) {
                cut_free(c);
                return -1;
        }
        size_t kept = 0;
        c->n_service = fp->n_service;
        for (size_t s = 0; s < fp->n_service; s++) {
                Google__Protobuf__ServiceDescriptorProto *svc = fp->service[s];
                c->method_at[s + 1] = c->method_at[s] + svc->n_method;
                size_t k =
                    cut_methods(pkg, svc, c->method_to + c->method_at[s], c->keep, served, arg);
                keep_service[s] = k > 0;
                c->service_to[s] = k > 0 ? (long)kept++ : -1;
                c->saved[s] = (saved_service){svc, svc->n_method};
                svc->n_method = partition(svc->method, svc->n_method, c->keep, c->tmp);
        }
        fp->n_service = partition(fp->service, fp->n_service, keep_service, c->tmp);
        free(keep_service);
        Google__Protobuf__SourceCodeInfo *info = fp->source_code_info;
        if (info != NULL) {
                c->n_location = info->n_location;
                for (size_t i = 0; i < info->n_location; i++) {
                        c->keep[i] = relocate(c, info->location[i]);
                }
                info->n_location = partition(info->location, info->n_location, c->keep, c->tmp);
        }
        return 0;
}

static void uncut_file(file_proto *fp, cut *c)
{
        for (size_t s = 0; s < c->n_service; s++) {
                c->saved[s].service->n_method = c->saved[s].n_method;
        }
        fp->n_service = c->n_service;
        if (fp->source_code_info != NULL) {
                fp->source_code_info->n_location = c->n_location;
        }
        cut_free(c);
}

/* ---- loading ------------------------------------------------------------- */

/* Serializes and indexes one file of the set as served. */
static int load_file(gw_reflection *r, file_proto *fp, size_t f, gw_reflection_served_fn served,
                     void *arg)
{
        cut c;
        file *out = &r->files[f];
        if (fp->name == NULL || cut_file(fp, &c, served, arg) != 0) {
                return -1;
        }
        size_t len = protobuf_c_message_get_packed_size(&fp->base);
        out->name = join("", fp->name);
        out->bytes = malloc(len + 1);
        int rc = out->name != NULL && out->bytes != NULL ? 0 : -1;
        if (rc == 0) {
                out->len = protobuf_c_message_pack(&fp->base, out->bytes);
                KS_ASSERT(out->len == len);
                rc = index_file(r, fp, f);
        }
        uncut_file(fp, &c);
        return rc;
}

static int link_deps(gw_reflection *r, const file_proto *fp, size_t f)
{
        file *out = &r->files[f];
        size_t d = 0;
        if ((out->deps = calloc(fp->n_dependency + 1, sizeof(*out->deps))) == NULL) {
                return -1;
        }
        for (size_t i = 0; i < fp->n_dependency; i++) {
                if (find_file(r, fp->dependency[i], &d) == NULL) {
                        return -1; /* protoc --include_imports puts every one in the set */
                }
                out->deps[out->n_deps++] = d;
        }
        return 0;
}

/* Sorts the symbols; a name twice (or a file name twice) is a malformed set. */
static int seal(gw_reflection *r)
{
        if (r->n_symbols > 0) {
                qsort(r->symbols, r->n_symbols, sizeof(*r->symbols), cmp_symbol);
        }
        for (size_t i = 1; i < r->n_symbols; i++) {
                if (strcmp(r->symbols[i - 1].name, r->symbols[i].name) == 0) {
                        return -1;
                }
        }
        for (size_t i = 0; i < r->n_files; i++) {
                size_t j = 0;
                if (find_file(r, r->files[i].name, &j) == NULL || j != i) {
                        return -1;
                }
        }
        return 0;
}

int gw_reflection_new(gw_reflection **out, const uint8_t *set_bytes, size_t set_len,
                      gw_reflection_served_fn served, void *arg)
{
        *out = NULL;
        Google__Protobuf__FileDescriptorSet *set =
            google__protobuf__file_descriptor_set__unpack(NULL, set_len, set_bytes);
        if (set == NULL) {
                return -1;
        }
        gw_reflection *r = calloc(1, sizeof(*r));
        int rc = r != NULL && set->n_file <= GW_REFLECTION_FILES_MAX ? 0 : -1;
        for (size_t i = 0; rc == 0 && i < set->n_file; i++) {
                r->n_files = i + 1;
                rc = load_file(r, set->file[i], i, served, arg);
        }
        for (size_t i = 0; rc == 0 && i < set->n_file; i++) {
                rc = link_deps(r, set->file[i], i);
        }
        if (rc == 0) {
                rc = seal(r);
        }
        google__protobuf__file_descriptor_set__free_unpacked(set, NULL);
        if (rc != 0) {
                gw_reflection_free(r);
                return -1;
        }
        *out = r;
        return 0;
}

void gw_reflection_free(gw_reflection *r)
{
        if (r == NULL) {
                return;
        }
        for (size_t i = 0; i < r->n_files; i++) {
                free(r->files[i].name);
                free(r->files[i].bytes);
                free(r->files[i].deps);
        }
        for (size_t i = 0; i < r->n_symbols; i++) {
                free(r->symbols[i].name);
        }
        for (size_t i = 0; i < r->n_extensions; i++) {
                free(r->extensions[i].extendee);
        }
        for (size_t i = 0; i < r->n_services; i++) {
                free(r->services[i]);
        }
        free(r->symbols);
        free(r->extensions);
        free(r->services);
        free(r);
}

size_t gw_reflection_services_n(const gw_reflection *r)
{
        return r->n_services;
}

const char *gw_reflection_service(const gw_reflection *r, size_t i)
{
        return i < r->n_services ? r->services[i] : NULL;
}

/* ---- answers ------------------------------------------------------------- */

/* One answer's parts: the response points into them until it is packed. */
typedef struct answer {
        response resp;
        Grpc__Reflection__V1__FileDescriptorResponse files;
        Grpc__Reflection__V1__ExtensionNumberResponse numbers;
        Grpc__Reflection__V1__ListServiceResponse list;
        Grpc__Reflection__V1__ErrorResponse error;
        ProtobufCBinaryData *bin;
        Grpc__Reflection__V1__ServiceResponse *svc;
        Grpc__Reflection__V1__ServiceResponse **svc_ptrs;
        int32_t *ext_numbers;
} answer;

static bool was_sent(const gw_reflection_sent *s, size_t f)
{
        return s != NULL && (s->bits[f / 64] >> (f % 64) & 1u) != 0;
}

static void mark_sent(gw_reflection_sent *s, size_t f)
{
        if (s != NULL) {
                s->bits[f / 64] |= (uint64_t)1 << (f % 64);
        }
}

static void answer_error(answer *a, int code, const char *message)
{
        grpc__reflection__v1__error_response__init(&a->error);
        a->error.error_code = gw_grpc_status_of_code(code);
        a->error.error_message = (char *)(uintptr_t)message;
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        a->resp.error_response = &a->error;
}

/* The file first, then its dependencies breadth first, each once, less those already sent. */
static int answer_files(const gw_reflection *r, gw_reflection_sent *sent, size_t first, answer *a)
{
        size_t queue[GW_REFLECTION_FILES_MAX];
        bool seen[GW_REFLECTION_FILES_MAX] = {false};
        size_t head = 0, tail = 0, n = 0;
        if ((a->bin = calloc(r->n_files, sizeof(*a->bin))) == NULL) {
                return KS_INTERNAL;
        }
        queue[tail++] = first;
        seen[first] = true;
        while (head < tail) {
                size_t f = queue[head++];
                if (f == first || !was_sent(sent, f)) {
                        a->bin[n++] = (ProtobufCBinaryData){r->files[f].len, r->files[f].bytes};
                        mark_sent(sent, f);
                }
                for (size_t i = 0; i < r->files[f].n_deps; i++) {
                        size_t d = r->files[f].deps[i];
                        if (!seen[d]) {
                                KS_ASSERT(tail < GW_REFLECTION_FILES_MAX);
                                seen[d] = true;
                                queue[tail++] = d;
                        }
                }
        }
        grpc__reflection__v1__file_descriptor_response__init(&a->files);
        a->files.n_file_descriptor_proto = n;
        a->files.file_descriptor_proto = a->bin;
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        a->resp.file_descriptor_response = &a->files;
        return KS_OK;
}

static int answer_list(const gw_reflection *r, answer *a)
{
        a->svc = calloc(r->n_services + 1, sizeof(*a->svc));
        a->svc_ptrs = calloc(r->n_services + 1, sizeof(*a->svc_ptrs));
        if (a->svc == NULL || a->svc_ptrs == NULL) {
                return KS_INTERNAL;
        }
        for (size_t i = 0; i < r->n_services; i++) {
                grpc__reflection__v1__service_response__init(&a->svc[i]);
                a->svc[i].name = r->services[i];
                a->svc_ptrs[i] = &a->svc[i];
        }
        grpc__reflection__v1__list_service_response__init(&a->list);
        a->list.n_service = r->n_services;
        a->list.service = a->svc_ptrs;
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        a->resp.list_services_response = &a->list;
        return KS_OK;
}

static bool is_message(const gw_reflection *r, const char *type)
{
        const symbol *s = type != NULL ? find_symbol(r, type) : NULL;
        return s != NULL && s->message;
}

static int answer_extension_numbers(const gw_reflection *r, const char *type, answer *a)
{
        size_t n = 0;
        if (!is_message(r, type)) {
                answer_error(a, KS_NOT_FOUND, "type not found");
                return KS_OK;
        }
        if ((a->ext_numbers = calloc(r->n_extensions + 1, sizeof(*a->ext_numbers))) == NULL) {
                return KS_INTERNAL;
        }
        for (size_t i = 0; i < r->n_extensions; i++) {
                if (strcmp(r->extensions[i].extendee, type) == 0) {
                        a->ext_numbers[n++] = r->extensions[i].number;
                }
        }
        grpc__reflection__v1__extension_number_response__init(&a->numbers);
        a->numbers.base_type_name = (char *)(uintptr_t)type;
        a->numbers.n_extension_number = n;
        a->numbers.extension_number = a->ext_numbers;
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        a->resp.all_extension_numbers_response = &a->numbers;
        return KS_OK;
}

static int answer_extension(const gw_reflection *r, gw_reflection_sent *sent,
                            const Grpc__Reflection__V1__ExtensionRequest *x, answer *a)
{
        if (x == NULL || !is_message(r, x->containing_type)) {
                answer_error(a, KS_NOT_FOUND, "type not found");
                return KS_OK;
        }
        for (size_t i = 0; i < r->n_extensions; i++) {
                if (r->extensions[i].number == x->extension_number &&
                    strcmp(r->extensions[i].extendee, x->containing_type) == 0) {
                        return answer_files(r, sent, r->extensions[i].file, a);
                }
        }
        answer_error(a, KS_NOT_FOUND, "extension not found");
        return KS_OK;
}

/* Fills a->resp for request q. */
static int answer_request(const gw_reflection *r, gw_reflection_sent *sent, const request *q,
                          answer *a)
{
        const symbol *s = NULL;
        size_t f = 0;
        switch (q->message_request_case) {
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
                if (q->file_by_filename == NULL || find_file(r, q->file_by_filename, &f) == NULL) {
                        answer_error(a, KS_NOT_FOUND, "file not found");
                        return KS_OK;
                }
                return answer_files(r, sent, f, a);
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
                if (q->file_containing_symbol == NULL ||
                    (s = find_symbol(r, q->file_containing_symbol)) == NULL) {
                        answer_error(a, KS_NOT_FOUND, "symbol not found");
                        return KS_OK;
                }
                return answer_files(r, sent, s->file, a);
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
                return answer_extension(r, sent, q->file_containing_extension, a);
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
                return answer_extension_numbers(r, q->all_extension_numbers_of_type, a);
        case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
                return answer_list(r, a);
        default:
                /* None set, or one newer than this file: as gRPC's C++ server answers it. */
                answer_error(a, KS_UNIMPLEMENTED, "unsupported message_request");
                return KS_OK;
        }
}

int gw_reflection_answer(const gw_reflection *r, gw_reflection_sent *sent, const uint8_t *req,
                         size_t req_len, uint8_t **out, size_t *out_len)
{
        answer a;
        *out = NULL;
        *out_len = 0;
        request *q = grpc__reflection__v1__server_reflection_request__unpack(NULL, req_len, req);
        if (q == NULL) {
                return KS_INVALID_ARGUMENT;
        }
        memset(&a, 0, sizeof(a));
        grpc__reflection__v1__server_reflection_response__init(&a.resp);
        a.resp.valid_host = q->host;
        a.resp.original_request = q;
        int code = answer_request(r, sent, q, &a);
        if (code == KS_OK) {
                size_t len = protobuf_c_message_get_packed_size(&a.resp.base);
                if ((*out = malloc(len + 1)) == NULL) {
                        code = KS_INTERNAL;
                } else {
                        *out_len = protobuf_c_message_pack(&a.resp.base, *out);
                        KS_ASSERT(*out_len == len);
                }
        }
        free(a.bin);
        free(a.svc);
        free(a.svc_ptrs);
        free(a.ext_numbers);
        grpc__reflection__v1__server_reflection_request__free_unpacked(q, NULL);
        return code;
}
