/*
 * bench_webhook_intake: Stripe webhooks received through the gateway,
 * verified and stored by keelson-webhook, against the cheapest request the
 * same route serves, in the same run.
 *
 *   bench_webhook_intake --stack DIR [--clients 20] [--seconds 20] [--duplicate-seconds 5]
 *
 * With a stack started by deploy/local/stack.sh (its DIR/env) with the
 * gateway's rate limits off, it signs a tenant up, creates a Stripe intake
 * endpoint with a known secret, delivers one event (the seed) and then:
 *
 *   1. Baseline: the same deliveries to an endpoint id that does not exist,
 *      --clients connections for --seconds; the service answers 404 after
 *      one read (why this request: see make_baseline_path below).
 *   2. Intake: --clients connections for --seconds, each POSTing to the
 *      endpoint's /webhooks/stripe/<id> a distinct invoice.paid event as
 *      Stripe sends it (about 1.5 KB of JSON, its own "id"), signed with
 *      the current time as Stripe signs (Stripe-Signature: t=...,v1=<hex
 *      HMAC-SHA256 of "<t>.<body>" keyed with the secret string). Verified
 *      and stored events/s (200 without "duplicate"), p50/p95/p99, answers
 *      by status, and the ratio over the baseline; then the endpoint's rows
 *      in webhook.received_events, which must be the seed plus one per such
 *      answer.
 *   3. Duplicates: the seed resent, freshly signed each time as a provider's
 *      retry is, --clients connections for --duplicate-seconds; every answer
 *      must be 200 "duplicate" with the seed's eventId, and no row added.
 *
 * It prints the CPU each request cost each process group of the stack
 * (gateways, broker, webhook replicas, PostgreSQL and all its backends) and
 * this program, read from /proc before and after each phase: a figure that
 * other load on the machine disturbs less than requests/s. On a machine with
 * few cores this program's own share matters: it runs on the stack's cores.
 *
 * The gateway rate-limits the intake per endpoint (400 at once, 200 a
 * second by default), and public methods such as SignUp per address: with a
 * limit on, the figures are the limit's. Start the stack without them:
 *
 *   export KEELSON_GATEWAY_RATE_INTAKE=off KEELSON_GATEWAY_RATE_API=off \
 *          KEELSON_GATEWAY_RATE_AUTH=off
 *   deploy/local/stack.sh start --dir /tmp/whbench --bin build --free-ports --webhook-replicas 2
 *   build/tools/bench_webhook_intake --stack /tmp/whbench
 *
 * A stack whose intake is limited is refused before the load (its replies
 * carry RateLimit-Limit), and the gateway's 429 during the load stops it.
 * Exit status: 0; 1 when set-up failed, or the rows stored or the duplicates'
 * answers are not what the answers said; 2 usage; 3 rate-limited.
 */
#include <curl/curl.h>
#include <libpq-fe.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_support.h"

#define CLIENTS_MAX     256
#define SECONDS_MAX     600
#define LATENCIES_MAX   (1u << 21) /* samples kept per phase, shared by its clients */
#define REPLY_MAX       (64u << 10)
#define EVENT_MAX       4096 /* an event body */
#define SIG_HEADER_MAX  160
#define STATUS_SLOTS    600 /* HTTP statuses 100..599; slot 0: no answer */
#define HTTP_TIMEOUT_S  30L
#define PATH_AUTH       "/keelson.auth.v1.AuthService/"
#define PATH_WEBHOOK    "/keelson.webhook.v1.WebhookService/"
#define PASSWORD        "correct horse battery staple"
#define SECRET          "whsec_benchIntakeSecret0123456789abcdefABCDEF"
#define EXIT_RATE_LIMIT 3

typedef struct options {
        char gateway[256];
        char pg_dsn[512];
        int clients, seconds, duplicate_seconds;
} options;

static options g_opt;
static char g_dir[512];
static char g_token[512];
static char g_endpoint_id[64];
static char g_endpoint_path[128];
static char g_baseline_path[128];     /* an endpoint id that does not exist */
static unsigned g_run;                /* this run's tag in every event id */
static char g_seed_body[EVENT_MAX];   /* the event the duplicate phase resends */
static char g_seed_event_id[64];      /* keelson's id of it */
static atomic_bool g_limited;         /* the gateway's 429 was seen: every client stops */
static atomic_long g_limited_answers; /* how many */

/* ---- HTTP ----------------------------------------------------------------------------------- */

typedef struct reply {
        char *body;
        size_t len;
        bool rate_limit_header; /* RateLimit-Limit: the route is limited */
} reply;

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
        reply *r = arg;
        size_t add = size * n;

        if (r->len + add + 1 > REPLY_MAX) {
                return 0;
        }
        if (r->body == NULL && (r->body = malloc(REPLY_MAX)) == NULL) {
                return 0;
        }
        memcpy(r->body + r->len, p, add);
        r->len += add;
        r->body[r->len] = '\0';
        return add;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
        reply *r = arg;
        size_t len = size * n;
        static const char name[] = "ratelimit-limit:";

        if (len >= sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
                r->rate_limit_header = true;
        }
        return len;
}

/*
 * One POST of body (len bytes) to path on handle c, kept alive between
 * calls, with extra headers h (may be NULL). The HTTP status, or -1 when
 * there was no answer.
 */
static long post(CURL *c, const char *path, const char *body, size_t len, struct curl_slist *h,
                 reply *out)
{
        char url[512];
        long status = -1;

        out->len = 0;
        out->rate_limit_header = false;
        if (out->body != NULL) {
                out->body[0] = '\0';
        }
        snprintf(url, sizeof(url), "%s%s", g_opt.gateway, path);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, HTTP_TIMEOUT_S);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        if (curl_easy_perform(c) == CURLE_OK) {
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        }
        return status;
}

/* A Connect JSON call, with the session when there is one. */
static long call(CURL *c, const char *path, const char *json, reply *out)
{
        char auth[600];
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");

        if (g_token[0] != '\0') {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_token);
                h = curl_slist_append(h, auth);
        }
        long status = post(c, path, json, strlen(json), h, out);
        curl_slist_free_all(h);
        return status;
}

/*
 * Whether an answer is the gateway's rate limit: its 429 carries RateLimit-*
 * and its own message. A service's 429 (a full queue) is an error like any.
 */
static bool gateway_limited(long status, const reply *r)
{
        return status == 429 &&
               (r->rate_limit_header ||
                (r->body != NULL && strstr(r->body, "rate limit exceeded") != NULL));
}

static void say_rate_limited(const char *what)
{
        fprintf(stderr,
                "bench_webhook_intake: the gateway rate-limits %s, so the figures would be the"
                " limit's, not the stack's. Start the stack with the gateway's limits off:\n"
                "  export KEELSON_GATEWAY_RATE_INTAKE=off KEELSON_GATEWAY_RATE_API=off"
                " KEELSON_GATEWAY_RATE_AUTH=off\n"
                "  deploy/local/stack.sh start --dir DIR --bin BUILD_DIR --free-ports"
                " --webhook-replicas 2\n",
                what);
}

/* A call that must succeed; its JSON reply (json_decref it), or NULL with a line on stderr. */
static json_t *must(CURL *c, const char *path, const char *json)
{
        reply r = {0};
        long status = call(c, path, json, &r);
        json_t *j = status == 200 ? json_loadb(r.body, r.len, 0, NULL) : NULL;

        if (gateway_limited(status, &r)) {
                atomic_store(&g_limited, true);
                say_rate_limited(path);
        } else if (j == NULL) {
                fprintf(stderr, "bench_webhook_intake: %s: HTTP %ld: %.300s\n", path, status,
                        r.body != NULL ? r.body : "");
        }
        free(r.body);
        return j;
}

/* ---- a Stripe event, signed as Stripe signs ---------------------------------------------- */

/*
 * An invoice.paid event as Stripe's API version 2024-06-20 sends it, pretty
 * printed as Stripe does; every id in it ends with tag, the event's "id"
 * (the deduplication key) among them. About 1.5 KB.
 */
static const char event_fmt[] =
    "{\n"
    "  \"id\": \"evt_%1$s\",\n"
    "  \"object\": \"event\",\n"
    "  \"api_version\": \"2024-06-20\",\n"
    "  \"created\": %2$ld,\n"
    "  \"data\": {\n"
    "    \"object\": {\n"
    "      \"id\": \"in_%1$s\",\n"
    "      \"object\": \"invoice\",\n"
    "      \"amount_due\": 2199,\n"
    "      \"amount_paid\": 2199,\n"
    "      \"amount_remaining\": 0,\n"
    "      \"billing_reason\": \"subscription_cycle\",\n"
    "      \"charge\": \"ch_%1$s\",\n"
    "      \"collection_method\": \"charge_automatically\",\n"
    "      \"created\": %2$ld,\n"
    "      \"currency\": \"usd\",\n"
    "      \"customer\": \"cus_bench%3$04d\",\n"
    "      \"lines\": {\n"
    "        \"object\": \"list\",\n"
    "        \"data\": [\n"
    "          {\n"
    "            \"id\": \"il_%1$s\",\n"
    "            \"object\": \"line_item\",\n"
    "            \"amount\": 1999,\n"
    "            \"description\": \"1 x Pro (at $19.99 / month)\",\n"
    "            \"period\": {\"end\": %4$ld, \"start\": %2$ld},\n"
    "            \"price\": {\"id\": \"price_1BenchPro\", \"unit_amount\": 1999},\n"
    "            \"quantity\": 1,\n"
    "            \"subscription\": \"sub_bench%3$04d\",\n"
    "            \"type\": \"subscription\"\n"
    "          }\n"
    "        ],\n"
    "        \"has_more\": false,\n"
    "        \"total_count\": 1\n"
    "      },\n"
    "      \"livemode\": false,\n"
    "      \"number\": \"BENCH-%3$04d\",\n"
    "      \"paid\": true,\n"
    "      \"payment_intent\": \"pi_%1$s\",\n"
    "      \"period_end\": %2$ld,\n"
    "      \"period_start\": %2$ld,\n"
    "      \"status\": \"paid\",\n"
    "      \"subscription\": \"sub_bench%3$04d\",\n"
    "      \"subtotal\": 1999,\n"
    "      \"tax\": 200,\n"
    "      \"total\": 2199\n"
    "    }\n"
    "  },\n"
    "  \"livemode\": false,\n"
    "  \"pending_webhooks\": 1,\n"
    "  \"request\": {\"id\": null, \"idempotency_key\": null},\n"
    "  \"type\": \"invoice.paid\"\n"
    "}\n";

/* The event of client (-1: the seed) number seq into out; its length, or 0 when it does not fit. */
static size_t event_body(char *out, size_t out_len, int client, long seq)
{
        char tag[48];
        long now = (long)time(NULL);

        snprintf(tag, sizeof(tag), "%08x%04x%010ld", g_run, (unsigned)(client + 1) & 0xffffu, seq);
        int n = snprintf(out, out_len, event_fmt, tag, now, client + 1, now + 30L * 86400L);
        return n > 0 && (size_t)n < out_len ? (size_t)n : 0;
}

/* The signer of one client: HMAC-SHA256 keyed with the secret string's bytes. */
typedef struct signer {
        EVP_MAC *mac;
        EVP_MAC_CTX *ctx;
} signer;

static int signer_init(signer *s)
{
        OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string("digest", "SHA256", 0),
                          OSSL_PARAM_construct_end()};

        s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        s->ctx = s->mac != NULL ? EVP_MAC_CTX_new(s->mac) : NULL;
        if (s->ctx == NULL ||
            EVP_MAC_init(s->ctx, (const unsigned char *)SECRET, strlen(SECRET), p) != 1) {
                return -1;
        }
        return 0;
}

static void signer_free(signer *s)
{
        EVP_MAC_CTX_free(s->ctx);
        EVP_MAC_free(s->mac);
}

/* "Stripe-Signature: t=<now>,v1=<hex HMAC of "<now>.<body>">" into out; 0, or -1. */
static int sign(signer *s, const char *body, size_t len, char out[SIG_HEADER_MAX])
{
        unsigned char mac[32];
        char t[24];
        size_t mac_len = 0;
        int tn = snprintf(t, sizeof(t), "%ld.", (long)time(NULL));

        /* A NULL key re-initialises the context with the key it was given. */
        if (EVP_MAC_init(s->ctx, NULL, 0, NULL) != 1 ||
            EVP_MAC_update(s->ctx, (const unsigned char *)t, (size_t)tn) != 1 ||
            EVP_MAC_update(s->ctx, (const unsigned char *)body, len) != 1 ||
            EVP_MAC_final(s->ctx, mac, &mac_len, sizeof(mac)) != 1 || mac_len != sizeof(mac)) {
                return -1;
        }
        int k = snprintf(out, SIG_HEADER_MAX, "Stripe-Signature: t=%.*s,v1=", tn - 1, t);
        for (size_t i = 0; i < mac_len; i++) {
                k += snprintf(out + k, (size_t)(SIG_HEADER_MAX - k), "%02x", mac[i]);
        }
        return 0;
}

/* One delivery of body to path, freshly signed. The HTTP status, or -1. */
static long deliver(CURL *c, signer *s, const char *path, const char *body, size_t len, reply *out)
{
        char sig[SIG_HEADER_MAX];
        struct curl_slist *h = NULL;

        if (sign(s, body, len, sig) != 0) {
                return -1;
        }
        h = curl_slist_append(h, "Content-Type: application/json; charset=utf-8");
        h = curl_slist_append(h, "User-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)");
        h = curl_slist_append(h, sig);
        long status = post(c, path, body, len, h, out);
        curl_slist_free_all(h);
        return status;
}

/* ---- set up ---------------------------------------------------------------------------- */

static int sign_up(CURL *c)
{
        char body[512], email[128];
        json_t *j;

        snprintf(email, sizeof(email), "bench-webhook-%ld-%d@example.test", (long)time(NULL),
                 getpid());
        snprintf(body, sizeof(body),
                 "{\"email\":\"%s\",\"password\":\"%s\",\"tenantName\":\"bench webhook\"}", email,
                 PASSWORD);
        if ((j = must(c, PATH_AUTH "SignUp", body)) == NULL) {
                return -1;
        }
        json_decref(j);
        snprintf(body, sizeof(body), "{\"email\":\"%s\",\"password\":\"%s\"}", email, PASSWORD);
        if ((j = must(c, PATH_AUTH "Login", body)) == NULL) {
                return -1;
        }
        snprintf(g_token, sizeof(g_token), "%s",
                 json_string_value(json_object_get(j, "sessionToken")));
        json_decref(j);
        return 0;
}

static int make_endpoint(CURL *c)
{
        json_t *j = must(c, PATH_WEBHOOK "CreateIntakeEndpoint",
                         "{\"provider\":\"PROVIDER_STRIPE\",\"secret\":\"" SECRET "\","
                         "\"description\":\"bench_webhook_intake\"}");
        const char *id, *path;

        if (j == NULL) {
                return -1;
        }
        id = json_string_value(json_object_get(json_object_get(j, "endpoint"), "id"));
        path = json_string_value(json_object_get(json_object_get(j, "endpoint"), "path"));
        if (id != NULL && path != NULL) {
                snprintf(g_endpoint_id, sizeof(g_endpoint_id), "%s", id);
                snprintf(g_endpoint_path, sizeof(g_endpoint_path), "%s", path);
        }
        json_decref(j);
        return g_endpoint_id[0] != '\0' ? 0 : -1;
}

/*
 * The baseline: the same deliveries, signed the same way, to
 * /webhooks/stripe/<an id no endpoint has>. The gateway serves it as the
 * intake (rate-limit step, body and headers packed, the broker, a webhook
 * replica) and the service answers 404 after one read-only round trip to
 * PostgreSQL (the endpoint by its id): the route's fixed cost, so the ratio
 * is what verifying and storing add to it. Chosen over, measured on one
 * stack (CPU per request of all its processes):
 *  - WhoAmI with a cached session, the cheapest authenticated read of the
 *    other benchmarks: not cheaper. The gateway's context cache hit saves
 *    auth's ResolveContext, but WhoAmI itself opens a transaction acting for
 *    the tenant and joins membership, user and tenant (one round trip too,
 *    on another service with other replicas): some 15% more CPU than this.
 *  - a bad signature on the real endpoint: the same read and an HMAC, level
 *    with this; but a refusal of the very route measured.
 *  - a duplicate: the read, the HMAC, an INSERT that conflicts and a
 *    SELECT of the first row: nearly as dear as storing. Phase 3.
 *  - Login with a malformed field (400 before any read): KS_M_HEAVY, so
 *    auth's server admits it through the password-hash bound first, and
 *    under this load answers most of them 429.
 *  - the gateway's GET /healthz on its admin port: no route, broker or
 *    service; it measures libevent, not a request.
 */
static void make_baseline_path(void)
{
        snprintf(g_baseline_path, sizeof(g_baseline_path),
                 "/webhooks/stripe/%08x-0000-4000-8000-00000000b0b0", g_run);
}

/* The gateway's 429 or RateLimit-Limit on an intake answer: refused, with how to run. */
static bool intake_limited(long status, const reply *r)
{
        if (gateway_limited(status, r) || r->rate_limit_header) {
                say_rate_limited("the webhook intake (KEELSON_GATEWAY_RATE_INTAKE)");
                return true;
        }
        return false;
}

/* One baseline delivery: 404 from the service, and no RateLimit-Limit. */
static int check_baseline(CURL *c, signer *s, reply *r)
{
        char body[EVENT_MAX];
        size_t len = event_body(body, sizeof(body), -1, 1);
        long status = deliver(c, s, g_baseline_path, body, len, r);

        if (intake_limited(status, r)) {
                return EXIT_RATE_LIMIT;
        }
        if (status != 404 || r->body == NULL ||
            strstr(r->body, "unknown webhook endpoint") == NULL) {
                fprintf(stderr, "bench_webhook_intake: the baseline: HTTP %ld: %.300s\n", status,
                        r->body != NULL ? r->body : "");
                return -1;
        }
        return 0;
}

/*
 * The seed event, delivered once: it must be stored (200, not duplicate),
 * and its answer must carry no RateLimit-Limit (the intake is not limited);
 * then one baseline delivery.
 */
static int seed_and_check_limits(CURL *c)
{
        reply r = {0};
        signer s = {0};
        size_t len = event_body(g_seed_body, sizeof(g_seed_body), -1, 0);
        long status = signer_init(&s) == 0 && len > 0
                          ? deliver(c, &s, g_endpoint_path, g_seed_body, len, &r)
                          : -1;
        json_t *j = status == 200 ? json_loadb(r.body, r.len, 0, NULL) : NULL;
        int rc = -1;

        if (intake_limited(status, &r)) {
                rc = EXIT_RATE_LIMIT;
        } else if (j == NULL || json_is_true(json_object_get(j, "duplicate")) ||
                   !json_is_string(json_object_get(j, "eventId"))) {
                fprintf(stderr, "bench_webhook_intake: the seed event: HTTP %ld: %.300s\n", status,
                        r.body != NULL ? r.body : "");
        } else {
                snprintf(g_seed_event_id, sizeof(g_seed_event_id), "%s",
                         json_string_value(json_object_get(j, "eventId")));
                rc = check_baseline(c, &s, &r);
        }
        signer_free(&s);
        json_decref(j);
        free(r.body);
        return rc;
}

/* ---- a timed phase ------------------------------------------------------------------------ */

typedef enum kind { K_BASELINE, K_INTAKE, K_DUPLICATE } kind;

static const char *const kind_names[] = {"baseline (unknown endpoint, 404)", "intake",
                                         "duplicates"};

typedef struct worker {
        kind kind;
        int index;
        int64_t until_ns;
        int64_t *lat_ns; /* of the answers expected (K_BASELINE: 404; else 200) */
        size_t n, cap;
        long fresh, duplicate, wrong_id; /* 200s: stored now, "duplicate", another eventId */
        long status[STATUS_SLOTS];       /* other answers, by status; [0] none */
        char first_error[300];
} worker;

static void count_error(worker *w, long status, const reply *r)
{
        long slot = status >= 100 && status < STATUS_SLOTS ? status : 0;

        if (w->status[slot]++ == 0 && w->first_error[0] == '\0') {
                snprintf(w->first_error, sizeof(w->first_error), "HTTP %ld %.200s", status,
                         r->body != NULL ? r->body : "");
        }
        if (gateway_limited(status, r)) {
                atomic_fetch_add(&g_limited_answers, 1);
                atomic_store(&g_limited, true);
        }
}

/* Whether an answer is the one w's kind expects; a 200 is sorted into fresh, duplicate, wrong. */
static bool count_ok(worker *w, long status, const reply *r)
{
        if (w->kind == K_BASELINE) {
                return status == 404 && r->body != NULL &&
                       strstr(r->body, "unknown webhook endpoint") != NULL;
        }
        if (status != 200) {
                return false;
        }
        if (r->body == NULL || strstr(r->body, "\"duplicate\":true") == NULL) {
                w->fresh++;
        } else if (w->kind == K_DUPLICATE && strstr(r->body, g_seed_event_id) == NULL) {
                w->wrong_id++;
        } else {
                w->duplicate++;
        }
        return true;
}

/* One request of w's kind; its status. */
static long one_request(worker *w, CURL *c, signer *s, char *body, long *seq, reply *r)
{
        size_t len;

        switch (w->kind) {
        case K_BASELINE:
        case K_INTAKE:
                len = event_body(body, EVENT_MAX, w->index, ++*seq);
                return len > 0
                           ? deliver(c, s, w->kind == K_INTAKE ? g_endpoint_path : g_baseline_path,
                                     body, len, r)
                           : -1;
        case K_DUPLICATE:
                return deliver(c, s, g_endpoint_path, g_seed_body, strlen(g_seed_body), r);
        }
        return -1;
}

static void *work(void *arg)
{
        worker *w = arg;
        CURL *c = curl_easy_init();
        reply r = {0};
        signer s = {0};
        char *body = malloc(EVENT_MAX);
        long seq = 0;

        if (c == NULL || body == NULL || signer_init(&s) != 0) {
                w->status[0]++;
                snprintf(w->first_error, sizeof(w->first_error), "client set-up failed");
                w->until_ns = 0;
        }
        while (bench_now_ns() < w->until_ns && w->n < w->cap && !atomic_load(&g_limited)) {
                int64_t t0 = bench_now_ns();
                long status = one_request(w, c, &s, body, &seq, &r);
                int64_t t1 = bench_now_ns();
                if (!count_ok(w, status, &r)) {
                        count_error(w, status, &r);
                        continue;
                }
                w->lat_ns[w->n++] = t1 - t0;
        }
        signer_free(&s);
        free(body);
        free(r.body);
        curl_easy_cleanup(c);
        return NULL;
}

typedef struct phase {
        double seconds, per_s, p50_ms, p95_ms, p99_ms;
        long ok, fresh, duplicate, wrong_id, failed;
        long status[STATUS_SLOTS];
} phase;

/* Sums the clients' counts into out and prints each client's first error. */
static void gather(const worker *w, int clients, phase *out)
{
        for (int i = 0; i < clients; i++) {
                out->ok += (long)w[i].n;
                out->fresh += w[i].fresh;
                out->duplicate += w[i].duplicate;
                out->wrong_id += w[i].wrong_id;
                for (int k = 0; k < STATUS_SLOTS; k++) {
                        out->status[k] += w[i].status[k];
                        out->failed += w[i].status[k];
                }
                if (w[i].first_error[0] != '\0') {
                        fprintf(stderr, "bench_webhook_intake: %s client %d: first error %s\n",
                                kind_names[w[i].kind], i, w[i].first_error);
                }
        }
}

/* The 200s' latency percentiles of the clients' samples; frees them. */
static int percentiles(worker *w, int clients, phase *out)
{
        size_t total = 0;
        int64_t *all = malloc(((size_t)out->ok + 1) * sizeof(int64_t));

        for (int i = 0; i < clients; i++) {
                if (all != NULL) {
                        memcpy(all + total, w[i].lat_ns, w[i].n * sizeof(int64_t));
                        total += w[i].n;
                }
                free(w[i].lat_ns);
        }
        if (all == NULL) {
                return -1;
        }
        bench_sort_ns(all, total);
        if (total > 0) {
                out->p50_ms = (double)bench_percentile_ns(all, total, 50) / 1e6;
                out->p95_ms = (double)bench_percentile_ns(all, total, 95) / 1e6;
                out->p99_ms = (double)bench_percentile_ns(all, total, 99) / 1e6;
        }
        free(all);
        return 0;
}

static int run_phase(kind k, int clients, int seconds, phase *out)
{
        static worker w[CLIENTS_MAX];
        pthread_t th[CLIENTS_MAX];
        size_t cap = LATENCIES_MAX / (size_t)clients;
        int64_t start = bench_now_ns();
        int started = 0;

        memset(out, 0, sizeof(*out));
        for (int i = 0; i < clients; i++) {
                w[i] = (worker){.kind = k,
                                .index = i,
                                .until_ns = start + (int64_t)seconds * 1000000000LL,
                                .lat_ns = malloc(cap * sizeof(int64_t)),
                                .cap = cap};
                if (w[i].lat_ns == NULL || pthread_create(&th[i], NULL, work, &w[i]) != 0) {
                        free(w[i].lat_ns);
                        break;
                }
                started++;
        }
        for (int i = 0; i < started; i++) {
                pthread_join(th[i], NULL);
        }
        out->seconds = (double)(bench_now_ns() - start) / 1e9;
        gather(w, started, out);
        /* what each phase is for: 404s, events stored now, duplicates answered */
        long counted = k == K_BASELINE ? out->ok : k == K_INTAKE ? out->fresh : out->duplicate;
        out->per_s = (double)counted / out->seconds;
        return percentiles(w, started, out) == 0 && started == clients ? 0 : -1;
}

/* ---- CPU per request, per process group --------------------------------------------------- */

enum { G_GATEWAY, G_BROKER, G_WEBHOOK, G_POSTGRES, G_SELF, G_N };
static const char *const g_names[G_N] = {"gateway", "broker", "webhook", "postgres",
                                         "this program"};

/* CPU used so far by each group, in µs. */
static void cpu_snapshot(double out_us[G_N])
{
        double tick_us = bench_tick_us();
        struct rusage ru;

        out_us[G_GATEWAY] =
            tick_us * (double)bench_env_pids_ticks(g_dir, "KEELSON_IT_GATEWAY_PIDS");
        out_us[G_BROKER] = tick_us * (double)bench_pid_file_ticks(g_dir, "pids/broker.pid");
        out_us[G_WEBHOOK] =
            tick_us * (double)bench_env_pids_ticks(g_dir, "KEELSON_IT_WEBHOOK_PIDS");
        out_us[G_POSTGRES] = tick_us * (double)bench_postgres_ticks(g_dir);
        getrusage(RUSAGE_SELF, &ru);
        out_us[G_SELF] = (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec +
                         (double)ru.ru_stime.tv_sec * 1e6 + (double)ru.ru_stime.tv_usec;
}

/* CPU µs per answered request of each group between two snapshots; the stack's total. */
static double print_cpu(const char *what, const double a[G_N], const double b[G_N], long n)
{
        double stack = 0;

        printf("%s CPU per request:", what);
        for (int g = 0; g < G_N; g++) {
                double us = n > 0 ? (b[g] - a[g]) / (double)n : 0;
                if (g != G_SELF) {
                        stack += us;
                }
                printf(" %s %.0f µs,", g_names[g], us);
        }
        printf(" stack total %.0f µs\n", stack);
        return stack;
}

/* ---- what PostgreSQL holds ------------------------------------------------------------------- */

/* The endpoint's rows in webhook.received_events, and those stored pending; -1 when unknown. */
static long stored_rows(PGconn *pg, long *pending)
{
        const char *p[1] = {g_endpoint_id};
        PGresult *r = PQexecParams(pg,
                                   "SELECT count(*), count(*) FILTER (WHERE status = 1 AND type ="
                                   " 'invoice.paid') FROM webhook.received_events"
                                   " WHERE endpoint_id = $1::uuid",
                                   1, NULL, p, NULL, NULL, 0);
        long n = -1;

        *pending = -1;
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
                n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
                *pending = strtol(PQgetvalue(r, 0, 1), NULL, 10);
        } else {
                fprintf(stderr, "bench_webhook_intake: counting the rows: %s", PQerrorMessage(pg));
        }
        PQclear(r);
        return n;
}

/*
 * The seed plus one row per event answered as stored now; 0 when so, else -1.
 * The applier works through them meanwhile (billing knows none of the
 * invoices: each ends failed), so "pending" is what it had not reached yet.
 */
static int check_rows(PGconn *pg, const char *after, long answered)
{
        long pending, rows = stored_rows(pg, &pending);

        printf("after the %s: %ld rows stored for the endpoint (%ld still pending for the"
               " applier); 200 stored-now answers %ld + 1 seed = %ld: %s\n",
               after, rows, pending, answered, answered + 1,
               rows == answered + 1 ? "equal" : "DIFFERENT");
        return rows == answered + 1 ? 0 : -1;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int usage(void)
{
        fprintf(stderr,
                "usage: bench_webhook_intake --stack DIR [--clients N (1..%d, 20)]"
                " [--seconds S (1..%d, 20)] [--duplicate-seconds S (1..%d, 5)]\n",
                CLIENTS_MAX, SECONDS_MAX, SECONDS_MAX);
        return 2;
}

static int parse(int argc, char **argv)
{
        const char *dir = NULL;

        g_opt = (options){.clients = 20, .seconds = 20, .duplicate_seconds = 5};
        if (argc % 2 != 1) {
                return -1;
        }
        for (int i = 1; i + 1 < argc; i += 2) {
                const char *f = argv[i], *v = argv[i + 1];
                if (strcmp(f, "--stack") == 0) {
                        dir = v;
                } else if (strcmp(f, "--clients") == 0) {
                        g_opt.clients = atoi(v);
                } else if (strcmp(f, "--seconds") == 0) {
                        g_opt.seconds = atoi(v);
                } else if (strcmp(f, "--duplicate-seconds") == 0) {
                        g_opt.duplicate_seconds = atoi(v);
                } else {
                        return -1;
                }
        }
        if (dir == NULL || g_opt.clients < 1 || g_opt.clients > CLIENTS_MAX || g_opt.seconds < 1 ||
            g_opt.seconds > SECONDS_MAX || g_opt.duplicate_seconds < 1 ||
            g_opt.duplicate_seconds > SECONDS_MAX) {
                return -1;
        }
        snprintf(g_dir, sizeof(g_dir), "%s", dir);
        if (bench_stack_env(dir, "KEELSON_IT_GATEWAY_URL", g_opt.gateway, sizeof(g_opt.gateway)) !=
                0 ||
            bench_stack_env(dir, "KEELSON_IT_PG_DSN", g_opt.pg_dsn, sizeof(g_opt.pg_dsn)) != 0) {
                fprintf(stderr,
                        "bench_webhook_intake: no gateway URL or PostgreSQL DSN in %s/env"
                        " (a stack from deploy/local/stack.sh start --dir %s)\n",
                        dir, dir);
                return -1;
        }
        return 0;
}

static void print_statuses(const phase *p)
{
        if (p->failed == 0) {
                return;
        }
        printf("  not 200:");
        if (p->status[0] > 0) {
                printf(" no answer × %ld", p->status[0]);
        }
        for (int k = 1; k < STATUS_SLOTS; k++) {
                if (p->status[k] > 0) {
                        printf(" %d × %ld", k, p->status[k]);
                }
        }
        printf("\n");
}

static void print_phase(kind k, const phase *p)
{
        static const char *const units[] = {"req/s", "verified and stored events/s",
                                            "duplicates answered/s"};

        printf("%s: %.0f %s, p50 %.2f ms, p95 %.2f ms, p99 %.2f ms (%.1f s, %ld answered %s",
               kind_names[k], p->per_s, units[k], p->p50_ms, p->p95_ms, p->p99_ms, p->seconds,
               p->ok, k == K_BASELINE ? "404" : "200");
        if (k != K_BASELINE) {
                printf(": %ld stored now, %ld duplicate, %ld with another eventId", p->fresh,
                       p->duplicate, p->wrong_id);
        }
        printf("; %ld other answers)\n", p->failed);
        print_statuses(p);
}

/* How many pids DIR/env's comma-separated list KEY names. */
static int replicas(const char *key)
{
        char v[512];
        int n = 1;

        if (bench_stack_env(g_dir, key, v, sizeof(v)) != 0 || v[0] == '\0') {
                return 0;
        }
        for (const char *p = v; *p != '\0'; p++) {
                n += *p == ',';
        }
        return n;
}

static void print_machine(const char *when)
{
        double load[3] = {0, 0, 0};

        getloadavg(load, 3);
        printf("%s: load average %.2f %.2f %.2f on %ld cores\n", when, load[0], load[1], load[2],
               sysconf(_SC_NPROCESSORS_ONLN));
}

static int set_up(CURL *c)
{
        if (sign_up(c) != 0 || make_endpoint(c) != 0) {
                return atomic_load(&g_limited) ? EXIT_RATE_LIMIT : 1;
        }
        int rc = seed_and_check_limits(c);
        if (rc != 0) {
                return rc == EXIT_RATE_LIMIT ? EXIT_RATE_LIMIT : 1;
        }
        char durability[256];
        bench_pg_durability(g_opt.pg_dsn, durability, sizeof(durability));
        printf("bench_webhook_intake: %d clients × %d s baseline, then × %d s intake, then × %d s"
               " duplicates; %d gateway, %d webhook replicas; events of %zu bytes; %s\n",
               g_opt.clients, g_opt.seconds, g_opt.seconds, g_opt.duplicate_seconds,
               replicas("KEELSON_IT_GATEWAY_PIDS"), replicas("KEELSON_IT_WEBHOOK_PIDS"),
               strlen(g_seed_body), durability);
        print_machine("before");
        return 0;
}

/* A phase between two CPU snapshots; 0, -1 (could not run), or EXIT_RATE_LIMIT. */
static int measured(kind k, int seconds, phase *p, double cpu[2][G_N])
{
        /* on stderr as it starts, for whoever attaches a profiler to one phase */
        fprintf(stderr, "bench_webhook_intake: %s phase, %d clients × %d s\n", kind_names[k],
                g_opt.clients, seconds);
        cpu_snapshot(cpu[0]);
        int rc = run_phase(k, g_opt.clients, seconds, p);
        cpu_snapshot(cpu[1]);
        if (atomic_load(&g_limited)) {
                char what[160];
                snprintf(what, sizeof(what),
                         "the webhook intake (KEELSON_GATEWAY_RATE_INTAKE: %ld × 429 during the"
                         " %s phase)",
                         atomic_load(&g_limited_answers), kind_names[k]);
                say_rate_limited(what);
                return EXIT_RATE_LIMIT;
        }
        return rc;
}

int main(int argc, char **argv)
{
        phase base, intake, dup;
        double cb[2][G_N], ci[2][G_N], cd[2][G_N];
        int rc;

        if (parse(argc, argv) != 0) {
                return usage();
        }
        g_run = (unsigned)time(NULL) ^ ((unsigned)getpid() << 16);
        make_baseline_path();
        curl_global_init(CURL_GLOBAL_DEFAULT);
        CURL *c = curl_easy_init();
        PGconn *pg = PQconnectdb(g_opt.pg_dsn);
        if (c == NULL || PQstatus(pg) != CONNECTION_OK) {
                fprintf(stderr, "bench_webhook_intake: set-up failed: %s", PQerrorMessage(pg));
                return 1;
        }
        if ((rc = set_up(c)) != 0) {
                if (rc != EXIT_RATE_LIMIT) {
                        fprintf(stderr, "bench_webhook_intake: set-up failed\n");
                }
                return rc;
        }
        if ((rc = measured(K_BASELINE, g_opt.seconds, &base, cb)) != 0 ||
            (rc = measured(K_INTAKE, g_opt.seconds, &intake, ci)) != 0) {
                return rc == EXIT_RATE_LIMIT ? rc : 1;
        }
        int bad = check_rows(pg, "intake", intake.fresh) != 0;
        if ((rc = measured(K_DUPLICATE, g_opt.duplicate_seconds, &dup, cd)) != 0) {
                return rc == EXIT_RATE_LIMIT ? rc : 1;
        }
        bad |= check_rows(pg, "duplicates", intake.fresh + dup.fresh) != 0;
        bad |= dup.fresh != 0 || dup.wrong_id != 0 || dup.failed != 0;
        print_machine("after");
        print_phase(K_BASELINE, &base);
        print_phase(K_INTAKE, &intake);
        print_phase(K_DUPLICATE, &dup);
        printf("stored/baseline: %.2f (%.0f stored events/s over %.0f unknown-endpoint 404s/s);"
               " duplicates/baseline: %.2f\n",
               base.per_s > 0 ? intake.per_s / base.per_s : 0, intake.per_s, base.per_s,
               base.per_s > 0 ? dup.per_s / base.per_s : 0);
        double cpu_base = print_cpu("baseline", cb[0], cb[1], base.ok);
        double cpu_intake = print_cpu("intake (stored)", ci[0], ci[1], intake.ok);
        double cpu_dup = print_cpu("duplicates", cd[0], cd[1], dup.ok);
        printf("stack CPU per request over the baseline's: stored %.2f, duplicate %.2f\n",
               cpu_base > 0 ? cpu_intake / cpu_base : 0, cpu_base > 0 ? cpu_dup / cpu_base : 0);
        PQfinish(pg);
        curl_easy_cleanup(c);
        curl_global_cleanup();
        return bad ? 1 : 0;
}
