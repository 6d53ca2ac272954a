/*
 * Unit tests of gRPC server reflection (reflection.c), as grpcurl uses it:
 * every request kind against the descriptor set the gateway embeds, each
 * answer decoded with protobuf-c and checked (the services listed, a
 * method's file and its dependencies, internal methods and their comments
 * absent), v1alpha like v1; and against a small set made here, the parts
 * keelson's protos do not exercise (imports, extensions, a stream that was
 * already sent a dependency, comments renumbered around a cut).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "catalog.h"
#include "descriptor_set.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "grpc/reflection/v1alpha/reflection.pb-c.h"
#include "reflection.h"
#include "routes.h"

typedef Grpc__Reflection__V1__ServerReflectionRequest request;
typedef Grpc__Reflection__V1__ServerReflectionResponse response;
typedef Google__Protobuf__FileDescriptorProto file_proto;

#define CASE(x)  GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_##x
#define RCASE(x) GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_##x

static gw_reflection *gateway_set(void)
{
        gw_reflection *r = NULL;
        assert_int_equal(gw_reflection_new(&r, gw_descriptor_set, gw_descriptor_set_len,
                                           gw_reflection_served, NULL),
                         0);
        return r;
}

/* Packs q, asks r, unpacks the response (free it with the v1 free_unpacked). */
static response *ask(const gw_reflection *r, gw_reflection_sent *sent, request *q)
{
        uint8_t buf[4096];
        size_t len = grpc__reflection__v1__server_reflection_request__pack(q, buf);
        uint8_t *out = NULL;
        size_t out_len = 0;
        assert_int_equal(gw_reflection_answer(r, sent, buf, len, &out, &out_len), KS_OK);
        response *resp =
            grpc__reflection__v1__server_reflection_response__unpack(NULL, out_len, out);
        free(out);
        assert_non_null(resp);
        assert_string_equal(resp->valid_host, q->host);
        assert_non_null(resp->original_request);
        assert_int_equal(resp->original_request->message_request_case, q->message_request_case);
        return resp;
}

static response *ask_symbol(const gw_reflection *r, gw_reflection_sent *sent, const char *symbol)
{
        request q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
        q.host = "localhost:8080";
        q.message_request_case = CASE(FILE_CONTAINING_SYMBOL);
        q.file_containing_symbol = (char *)symbol;
        return ask(r, sent, &q);
}

static response *ask_file(const gw_reflection *r, gw_reflection_sent *sent, const char *name)
{
        request q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
        q.message_request_case = CASE(FILE_BY_FILENAME);
        q.file_by_filename = (char *)name;
        return ask(r, sent, &q);
}

static void assert_not_found(response *resp)
{
        assert_int_equal(resp->message_response_case, RCASE(ERROR_RESPONSE));
        assert_int_equal(resp->error_response->error_code, 5); /* NOT_FOUND */
        assert_true(strlen(resp->error_response->error_message) > 0);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
}

/* The i-th FileDescriptorProto of a file answer, unpacked. */
static file_proto *file_at(const response *resp, size_t i)
{
        assert_int_equal(resp->message_response_case, RCASE(FILE_DESCRIPTOR_RESPONSE));
        assert_true(i < resp->file_descriptor_response->n_file_descriptor_proto);
        ProtobufCBinaryData b = resp->file_descriptor_response->file_descriptor_proto[i];
        file_proto *f = google__protobuf__file_descriptor_proto__unpack(NULL, b.len, b.data);
        assert_non_null(f);
        return f;
}

static size_t n_files(const response *resp)
{
        assert_int_equal(resp->message_response_case, RCASE(FILE_DESCRIPTOR_RESPONSE));
        return resp->file_descriptor_response->n_file_descriptor_proto;
}

static const Google__Protobuf__ServiceDescriptorProto *service(const file_proto *f,
                                                               const char *name)
{
        for (size_t i = 0; i < f->n_service; i++) {
                if (strcmp(f->service[i]->name, name) == 0) {
                        return f->service[i];
                }
        }
        return NULL;
}

static bool has_method(const Google__Protobuf__ServiceDescriptorProto *s, const char *name)
{
        for (size_t i = 0; i < s->n_method; i++) {
                if (strcmp(s->method[i]->name, name) == 0) {
                        return true;
                }
        }
        return false;
}

/* The leading comment of the element at path (NULL when none). */
static const char *comment_at(const file_proto *f, const int32_t *path, size_t n)
{
        if (f->source_code_info == NULL) {
                return NULL;
        }
        for (size_t i = 0; i < f->source_code_info->n_location; i++) {
                const Google__Protobuf__SourceCodeInfo__Location *l =
                    f->source_code_info->location[i];
                if (l->n_path == n && memcmp(l->path, path, n * sizeof(*path)) == 0) {
                        return l->leading_comments;
                }
        }
        return NULL;
}

static bool any_comment_has(const file_proto *f, const char *needle)
{
        for (size_t i = 0; f->source_code_info && i < f->source_code_info->n_location; i++) {
                const char *c = f->source_code_info->location[i]->leading_comments;
                if (c != NULL && strstr(c, needle) != NULL) {
                        return true;
                }
        }
        return false;
}

static bool listed(const response *resp, const char *name)
{
        const Grpc__Reflection__V1__ListServiceResponse *l = resp->list_services_response;
        for (size_t i = 0; i < l->n_service; i++) {
                if (strcmp(l->service[i]->name, name) == 0) {
                        return true;
                }
        }
        return false;
}

static void test_list_services(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        request q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
        q.host = "api.example.com";
        q.message_request_case = CASE(LIST_SERVICES);
        q.list_services = "*";
        response *resp = ask(r, NULL, &q);
        assert_int_equal(resp->message_response_case, RCASE(LIST_SERVICES_RESPONSE));
        assert_string_equal(resp->original_request->list_services, "*");
        const char *want[] = {
            "keelson.auth.v1.AuthService",         "keelson.billing.v1.BillingService",
            "keelson.ledger.v1.LedgerService",     "keelson.summary.v1.AdminSummaryService",
            "keelson.webhook.v1.WebhookService",   "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
            "keelson.events.v1.EventService"};
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                assert_true(listed(resp, want[i]));
        }
        assert_int_equal(resp->list_services_response->n_service, sizeof(want) / sizeof(want[0]));
        assert_int_equal(gw_reflection_services_n(r), sizeof(want) / sizeof(want[0]));
        /* Every catalog service is listed: none is all internal today. */
        for (size_t i = 0; i < gw_catalog_n; i++) {
                assert_true(listed(resp, gw_catalog[i].service->name));
        }
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        gw_reflection_free(r);
}

static void test_method_symbol(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        response *resp = ask_symbol(r, NULL, "keelson.auth.v1.AuthService.Login");
        /* auth.proto imports nothing: the file alone, which is its dependencies closed. */
        assert_int_equal(n_files(resp), 1);
        file_proto *f = file_at(resp, 0);
        assert_string_equal(f->name, "keelson/auth/v1/auth.proto");
        assert_string_equal(f->package, "keelson.auth.v1");
        assert_int_equal(f->n_dependency, 0);
        const Google__Protobuf__ServiceDescriptorProto *s = service(f, "AuthService");
        assert_non_null(s);
        assert_true(has_method(s, "Login"));
        assert_true(has_method(s, "WhoAmI"));
        assert_false(has_method(s, "ResolveContext")); /* KS_M_INTERNAL */
        /* Exactly the routed methods, in the .proto's order. */
        const ProtobufCServiceDescriptor *d = gw_catalog[0].service;
        assert_string_equal(d->name, "keelson.auth.v1.AuthService");
        size_t k = 0;
        for (size_t i = 0; i < d->n_methods; i++) {
                char m[256];
                snprintf(m, sizeof(m), "%s/%s", d->name, d->methods[i].name);
                if (gw_method_routed(m)) {
                        assert_true(k < s->n_method);
                        assert_string_equal(s->method[k++]->name, d->methods[i].name);
                }
        }
        assert_int_equal(k, s->n_method);
        assert_int_equal(s->n_method + 1, d->n_methods);
        /* The comments stay on their methods, renumbered past the cut one. */
        size_t login = 1, list_tenants = 4; /* SignUp, Login, Logout, WhoAmI, (ResolveContext) */
        assert_string_equal(s->method[list_tenants]->name, "ListTenants");
        int32_t p_login[] = {6, 0, 2, (int32_t)login};
        int32_t p_tenants[] = {6, 0, 2, (int32_t)list_tenants};
        assert_non_null(strstr(comment_at(f, p_login, 4), "Exchanges email and password"));
        assert_non_null(strstr(comment_at(f, p_tenants, 4), "The tenants the caller belongs to"));
        assert_false(any_comment_has(f, "Internal (gateway only)"));
        /* The types stay: a message says nothing that can be called. */
        assert_true(f->n_message_type > 0);
        google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        gw_reflection_free(r);
}

static void test_internal_methods_absent(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        const char *gone[] = {"keelson.auth.v1.AuthService.ResolveContext",
                              "keelson.billing.v1.BillingService.GetBillingSummary",
                              "keelson.billing.v1.BillingService.ApplyProviderEvent",
                              /* the intake is served at /webhooks/ only */
                              "keelson.webhook.v1.WebhookService.ReceiveWebhook",
                              "keelson.auth.v1.AuthService.Nothing",
                              "keelson.auth.v1.AuthService/Login", /* a path, not a symbol */
                              "keelson.rpc.v1.CallerContext",      /* not in the set */
                              "", "keelson"};
        for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
                assert_not_found(ask_symbol(r, NULL, gone[i]));
        }
        response *resp = ask_symbol(r, NULL, "keelson.billing.v1.BillingService");
        file_proto *f = file_at(resp, 0);
        const Google__Protobuf__ServiceDescriptorProto *s = service(f, "BillingService");
        assert_true(has_method(s, "CreateCustomer"));
        assert_false(has_method(s, "GetBillingSummary"));
        assert_false(has_method(s, "ApplyProviderEvent"));
        google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        gw_reflection_free(r);
}

static void test_symbols_of_every_kind(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        struct {
                const char *symbol, *file;
        } cases[] = {
            {"keelson.auth.v1.AuthService", "keelson/auth/v1/auth.proto"},
            {"keelson.auth.v1.LoginRequest", "keelson/auth/v1/auth.proto"},
            {"keelson.auth.v1.LoginRequest.email", "keelson/auth/v1/auth.proto"},
            {"keelson.ledger.v1.LedgerService.GetTrialBalance", "keelson/ledger/v1/ledger.proto"},
            {"grpc.health.v1.Health.Watch", "grpc/health/v1/health.proto"},
            {"grpc.health.v1.HealthCheckResponse.ServingStatus", "grpc/health/v1/health.proto"},
            {"grpc.health.v1.HealthCheckResponse.SERVING", "grpc/health/v1/health.proto"},
            {"grpc.reflection.v1.ServerReflectionRequest.message_request",
             "grpc/reflection/v1/reflection.proto"},
            {"grpc.reflection.v1alpha.ServerReflection",
             "grpc/reflection/v1alpha/reflection.proto"},
            {"keelson.events.v1.Event", "keelson/events/v1/event.proto"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                response *resp = ask_symbol(r, NULL, cases[i].symbol);
                file_proto *f = file_at(resp, 0);
                assert_string_equal(f->name, cases[i].file);
                google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
                grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        }
        gw_reflection_free(r);
}

static void test_file_by_filename(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        response *resp = ask_file(r, NULL, "grpc/health/v1/health.proto");
        assert_int_equal(n_files(resp), 1);
        file_proto *f = file_at(resp, 0);
        assert_string_equal(f->package, "grpc.health.v1");
        const Google__Protobuf__ServiceDescriptorProto *s = service(f, "Health");
        assert_true(has_method(s, "Check"));
        assert_true(has_method(s, "Watch"));
        google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        assert_not_found(ask_file(r, NULL, "keelson/rpc/v1/envelope.proto"));
        assert_not_found(ask_file(r, NULL, "keelson/test/v1/types.proto"));
        assert_not_found(ask_file(r, NULL, "health.proto"));
        assert_not_found(ask_file(r, NULL, ""));
        gw_reflection_free(r);
}

static void test_extensions(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        request q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
        q.message_request_case = CASE(ALL_EXTENSION_NUMBERS_OF_TYPE);
        q.all_extension_numbers_of_type = "keelson.auth.v1.LoginRequest";
        response *resp = ask(r, NULL, &q);
        assert_int_equal(resp->message_response_case, RCASE(ALL_EXTENSION_NUMBERS_RESPONSE));
        assert_string_equal(resp->all_extension_numbers_response->base_type_name,
                            "keelson.auth.v1.LoginRequest");
        assert_int_equal(resp->all_extension_numbers_response->n_extension_number, 0);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        /* Not a message (a service, a field) or no such type. */
        const char *not_types[] = {"keelson.auth.v1.AuthService",
                                   "keelson.auth.v1.LoginRequest.email", "keelson.auth.v1.Nothing"};
        for (size_t i = 0; i < sizeof(not_types) / sizeof(not_types[0]); i++) {
                q.all_extension_numbers_of_type = (char *)not_types[i];
                assert_not_found(ask(r, NULL, &q));
        }
        Grpc__Reflection__V1__ExtensionRequest x = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
        q.message_request_case = CASE(FILE_CONTAINING_EXTENSION);
        q.file_containing_extension = &x;
        x.containing_type = "keelson.auth.v1.LoginRequest";
        x.extension_number = 100;
        assert_not_found(ask(r, NULL, &q));
        x.containing_type = "keelson.auth.v1.Nothing";
        assert_not_found(ask(r, NULL, &q));
        gw_reflection_free(r);
}

static void test_bad_requests(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        /* No message_request: answered, UNIMPLEMENTED, the stream goes on. */
        request q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
        q.host = "h";
        response *resp = ask(r, NULL, &q);
        assert_int_equal(resp->message_response_case, RCASE(ERROR_RESPONSE));
        assert_int_equal(resp->error_response->error_code, 12);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        /* Bytes that are no request end the stream. */
        const uint8_t junk[] = {0x1a, 0x05, 'a'};
        uint8_t *out = (uint8_t *)"x";
        size_t out_len = 1;
        assert_int_equal(gw_reflection_answer(r, NULL, junk, sizeof(junk), &out, &out_len),
                         KS_INVALID_ARGUMENT);
        assert_null(out);
        assert_int_equal(out_len, 0);
        gw_reflection_free(r);
}

static void test_v1alpha(void **state)
{
        (void)state;
        gw_reflection *r = gateway_set();
        Grpc__Reflection__V1alpha__ServerReflectionRequest q =
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__INIT;
        q.host = "h";
        q.message_request_case =
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
        q.file_containing_symbol = "grpc.health.v1.Health";
        uint8_t buf[256];
        size_t len = grpc__reflection__v1alpha__server_reflection_request__pack(&q, buf);
        uint8_t *out = NULL;
        size_t out_len = 0;
        assert_int_equal(gw_reflection_answer(r, NULL, buf, len, &out, &out_len), KS_OK);
        Grpc__Reflection__V1alpha__ServerReflectionResponse *resp =
            grpc__reflection__v1alpha__server_reflection_response__unpack(NULL, out_len, out);
        assert_non_null(resp);
        assert_int_equal(
            resp->message_response_case,
            GRPC__REFLECTION__V1ALPHA__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE);
        assert_int_equal(resp->file_descriptor_response->n_file_descriptor_proto, 1);
        assert_string_equal(resp->original_request->file_containing_symbol,
                            "grpc.health.v1.Health");
        grpc__reflection__v1alpha__server_reflection_response__free_unpacked(resp, NULL);
        free(out);
        gw_reflection_free(r);
}

/* A served rule that also hides the summary service: every method of it, so it goes. */
static bool served_but_summary(const char *method, void *arg)
{
        (void)arg;
        return strncmp(method, "keelson.summary.", 16) != 0 && gw_reflection_served(method, NULL);
}

static void test_service_all_cut(void **state)
{
        (void)state;
        gw_reflection *r = NULL;
        assert_int_equal(gw_reflection_new(&r, gw_descriptor_set, gw_descriptor_set_len,
                                           served_but_summary, NULL),
                         0);
        for (size_t i = 0; i < gw_reflection_services_n(r); i++) {
                assert_string_not_equal(gw_reflection_service(r, i),
                                        "keelson.summary.v1.AdminSummaryService");
        }
        assert_null(gw_reflection_service(r, gw_reflection_services_n(r)));
        assert_not_found(ask_symbol(r, NULL, "keelson.summary.v1.AdminSummaryService"));
        assert_not_found(ask_symbol(r, NULL, "keelson.summary.v1.AdminSummaryService.GetSummary"));
        response *resp = ask_file(r, NULL, "keelson/summary/v1/summary.proto");
        file_proto *f = file_at(resp, 0);
        assert_int_equal(f->n_service, 0);
        for (size_t i = 0; i < f->source_code_info->n_location; i++) {
                const Google__Protobuf__SourceCodeInfo__Location *l =
                    f->source_code_info->location[i];
                assert_true(l->n_path == 0 || l->path[0] != 6);
        }
        google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        gw_reflection_free(r);
}

/* ---- a set of our own: imports, extensions, comments around cuts --------- */

static bool served_but_cut(const char *method, void *arg)
{
        (void)arg;
        return strstr(method, "Cut") == NULL;
}

static Google__Protobuf__MethodDescriptorProto *method(const char *name)
{
        Google__Protobuf__MethodDescriptorProto *m = calloc(1, sizeof(*m));
        google__protobuf__method_descriptor_proto__init(m);
        m->name = (char *)name;
        m->input_type = ".t.A";
        m->output_type = ".t.A";
        return m;
}

static Google__Protobuf__SourceCodeInfo__Location *
location(int32_t a, int32_t b, int32_t c, int32_t d, size_t n, const char *comment)
{
        Google__Protobuf__SourceCodeInfo__Location *l = calloc(1, sizeof(*l));
        google__protobuf__source_code_info__location__init(l);
        l->path = calloc(4, sizeof(int32_t));
        l->path[0] = a;
        l->path[1] = b;
        l->path[2] = c;
        l->path[3] = d;
        l->n_path = n;
        l->leading_comments = (char *)comment;
        return l;
}

/*
 * t/a.proto: message A (with extension range), services S {M1, Cut2, M3},
 * SCut {Cut}, T {N}; comments on each. t/b.proto imports a: message B,
 * extend A { x = 100 }. t/c.proto imports b: message C.
 */
static uint8_t *small_set(size_t *len, bool missing_dep, bool twice)
{
        static Google__Protobuf__DescriptorProto a_msg = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
        static Google__Protobuf__DescriptorProto b_msg = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
        static Google__Protobuf__DescriptorProto c_msg = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
        static Google__Protobuf__DescriptorProto *a_msgs[] = {&a_msg}, *b_msgs[] = {&b_msg},
                                                 *c_msgs[] = {&c_msg};
        static Google__Protobuf__FieldDescriptorProto ext =
            GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT;
        static Google__Protobuf__FieldDescriptorProto *exts[] = {&ext};
        static Google__Protobuf__ServiceDescriptorProto
            s = GOOGLE__PROTOBUF__SERVICE_DESCRIPTOR_PROTO__INIT,
            scut = GOOGLE__PROTOBUF__SERVICE_DESCRIPTOR_PROTO__INIT,
            t = GOOGLE__PROTOBUF__SERVICE_DESCRIPTOR_PROTO__INIT;
        static Google__Protobuf__ServiceDescriptorProto *services[] = {&s, &scut, &t};
        static Google__Protobuf__MethodDescriptorProto *s_methods[3], *scut_methods[1],
            *t_methods[1];
        static Google__Protobuf__SourceCodeInfo__Location *locs[7];
        static Google__Protobuf__SourceCodeInfo info = GOOGLE__PROTOBUF__SOURCE_CODE_INFO__INIT;
        static char *b_deps[] = {"t/a.proto"}, *c_deps[] = {"t/b.proto"},
                    *bad_deps[] = {"t/x.proto"};
        static file_proto a = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT,
                          b = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT,
                          c = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
        static file_proto *files[4];
        Google__Protobuf__FileDescriptorSet set = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_SET__INIT;

        a_msg.name = "A";
        b_msg.name = "B";
        c_msg.name = "C";
        ext.name = "x";
        ext.has_number = 1;
        ext.number = 100;
        ext.extendee = ".t.A";
        s.name = "S";
        s_methods[0] = method("M1");
        s_methods[1] = method("Cut2");
        s_methods[2] = method("M3");
        s.method = s_methods;
        s.n_method = 3;
        scut.name = "SCut";
        scut_methods[0] = method("Cut");
        scut.method = scut_methods;
        scut.n_method = 1;
        t.name = "T";
        t_methods[0] = method("N");
        t.method = t_methods;
        t.n_method = 1;
        locs[0] = location(6, 0, 0, 0, 2, "service S");
        locs[1] = location(6, 0, 2, 0, 4, "method M1");
        locs[2] = location(6, 0, 2, 1, 4, "method Cut2");
        locs[3] = location(6, 0, 2, 2, 4, "method M3");
        locs[4] = location(6, 1, 0, 0, 2, "service SCut");
        locs[5] = location(6, 2, 0, 0, 2, "service T");
        locs[6] = location(6, 2, 2, 0, 4, "method N");
        info.location = locs;
        info.n_location = 7;

        a.name = "t/a.proto";
        a.package = "t";
        a.message_type = a_msgs;
        a.n_message_type = 1;
        a.service = services;
        a.n_service = 3;
        a.source_code_info = &info;
        b.name = "t/b.proto";
        b.package = "t";
        b.dependency = missing_dep ? bad_deps : b_deps;
        b.n_dependency = 1;
        b.message_type = b_msgs;
        b.n_message_type = 1;
        b.extension = exts;
        b.n_extension = 1;
        c.name = "t/c.proto";
        c.package = "t";
        c.dependency = c_deps;
        c.n_dependency = 1;
        c.message_type = c_msgs;
        c.n_message_type = 1;
        files[0] = &a;
        files[1] = &b;
        files[2] = &c;
        files[3] = &a;
        set.file = files;
        set.n_file = twice ? 4 : 3;
        *len = google__protobuf__file_descriptor_set__get_packed_size(&set);
        uint8_t *buf = malloc(*len);
        google__protobuf__file_descriptor_set__pack(&set, buf);
        for (size_t i = 0; i < 3; i++) {
                free(s_methods[i]);
        }
        free(scut_methods[0]);
        free(t_methods[0]);
        for (size_t i = 0; i < 7; i++) {
                free(locs[i]->path);
                free(locs[i]);
        }
        return buf;
}

static gw_reflection *small(void)
{
        size_t len = 0;
        uint8_t *set = small_set(&len, false, false);
        gw_reflection *r = NULL;
        assert_int_equal(gw_reflection_new(&r, set, len, served_but_cut, NULL), 0);
        free(set);
        return r;
}

static void assert_files(response *resp, const char **names, size_t n)
{
        assert_int_equal(n_files(resp), n);
        for (size_t i = 0; i < n; i++) {
                file_proto *f = file_at(resp, i);
                assert_string_equal(f->name, names[i]);
                google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
        }
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
}

static void test_dependencies(void **state)
{
        (void)state;
        gw_reflection *r = small();
        const char *cba[] = {"t/c.proto", "t/b.proto", "t/a.proto"};
        assert_files(ask_symbol(r, NULL, "t.C"), cba, 3);
        /* A stream that has a file already is not sent it again, but what it asks for always. */
        gw_reflection_sent sent;
        memset(&sent, 0, sizeof(sent));
        const char *a[] = {"t/a.proto"};
        const char *b[] = {"t/b.proto"};
        const char *ba[] = {"t/b.proto", "t/a.proto"};
        assert_files(ask_symbol(r, &sent, "t.A"), a, 1);
        assert_files(ask_symbol(r, &sent, "t.B"), b, 1);
        assert_files(ask_symbol(r, &sent, "t.A"), a, 1);
        assert_files(ask_file(r, &sent, "t/b.proto"), b, 1);
        assert_files(ask_file(r, NULL, "t/b.proto"), ba, 2);
        gw_reflection_free(r);
}

static void test_small_extensions(void **state)
{
        (void)state;
        gw_reflection *r = small();
        request q = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
        Grpc__Reflection__V1__ExtensionRequest x = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
        q.message_request_case = CASE(FILE_CONTAINING_EXTENSION);
        q.file_containing_extension = &x;
        x.containing_type = "t.A";
        x.extension_number = 100;
        const char *ba[] = {"t/b.proto", "t/a.proto"};
        assert_files(ask(r, NULL, &q), ba, 2);
        x.extension_number = 101;
        assert_not_found(ask(r, NULL, &q));
        x.containing_type = "t.B";
        x.extension_number = 100;
        assert_not_found(ask(r, NULL, &q));

        q.message_request_case = CASE(ALL_EXTENSION_NUMBERS_OF_TYPE);
        q.all_extension_numbers_of_type = "t.A";
        response *resp = ask(r, NULL, &q);
        assert_int_equal(resp->all_extension_numbers_response->n_extension_number, 1);
        assert_int_equal(resp->all_extension_numbers_response->extension_number[0], 100);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        /* The extension is a symbol of its file too. */
        assert_files(ask_symbol(r, NULL, "t.x"), ba, 2);
        gw_reflection_free(r);
}

static void test_small_cut(void **state)
{
        (void)state;
        gw_reflection *r = small();
        assert_int_equal(gw_reflection_services_n(r), 2);
        assert_string_equal(gw_reflection_service(r, 0), "t.S");
        assert_string_equal(gw_reflection_service(r, 1), "t.T");
        assert_not_found(ask_symbol(r, NULL, "t.S.Cut2"));
        assert_not_found(ask_symbol(r, NULL, "t.SCut"));
        assert_not_found(ask_symbol(r, NULL, "t.SCut.Cut"));
        response *resp = ask_symbol(r, NULL, "t.T.N");
        file_proto *f = file_at(resp, 0);
        assert_int_equal(f->n_service, 2);
        assert_string_equal(f->service[0]->name, "S");
        assert_int_equal(f->service[0]->n_method, 2);
        assert_string_equal(f->service[0]->method[0]->name, "M1");
        assert_string_equal(f->service[0]->method[1]->name, "M3");
        assert_string_equal(f->service[1]->name, "T");
        /* Every comment on its element, renumbered: M3 is method 1, T is service 1. */
        struct {
                int32_t path[4];
                size_t n;
                const char *comment;
        } want[] = {
            {{6, 0}, 2, "service S"},       {{6, 0, 2, 0}, 4, "method M1"},
            {{6, 0, 2, 1}, 4, "method M3"}, {{6, 1}, 2, "service T"},
            {{6, 1, 2, 0}, 4, "method N"},
        };
        assert_int_equal(f->source_code_info->n_location, 5);
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                assert_string_equal(comment_at(f, want[i].path, want[i].n), want[i].comment);
        }
        assert_false(any_comment_has(f, "Cut"));
        google__protobuf__file_descriptor_proto__free_unpacked(f, NULL);
        grpc__reflection__v1__server_reflection_response__free_unpacked(resp, NULL);
        gw_reflection_free(r);
}

static void test_bad_sets(void **state)
{
        (void)state;
        gw_reflection *r = (gw_reflection *)1;
        size_t len = 0;
        uint8_t *set = small_set(&len, true, false);
        assert_int_equal(gw_reflection_new(&r, set, len, served_but_cut, NULL), -1);
        assert_null(r);
        free(set);
        set = small_set(&len, false, true);
        assert_int_equal(gw_reflection_new(&r, set, len, served_but_cut, NULL), -1);
        free(set);
        const uint8_t junk[] = {0x0a, 0x7f, 0x01};
        assert_int_equal(gw_reflection_new(&r, junk, sizeof(junk), served_but_cut, NULL), -1);
        assert_int_equal(gw_reflection_new(&r, NULL, 0, served_but_cut, NULL), 0);
        assert_int_equal(gw_reflection_services_n(r), 0);
        gw_reflection_free(r);
        gw_reflection_free(NULL);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_list_services),
            cmocka_unit_test(test_method_symbol),
            cmocka_unit_test(test_internal_methods_absent),
            cmocka_unit_test(test_symbols_of_every_kind),
            cmocka_unit_test(test_file_by_filename),
            cmocka_unit_test(test_extensions),
            cmocka_unit_test(test_bad_requests),
            cmocka_unit_test(test_v1alpha),
            cmocka_unit_test(test_service_all_cut),
            cmocka_unit_test(test_dependencies),
            cmocka_unit_test(test_small_extensions),
            cmocka_unit_test(test_small_cut),
            cmocka_unit_test(test_bad_sets),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
