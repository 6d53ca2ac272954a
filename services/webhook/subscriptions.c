/*
 * Webhook subscriptions: CreateWebhookSubscription, GetWebhookSubscription,
 * ListWebhookSubscriptions, UpdateWebhookSubscription,
 * RotateWebhookSubscriptionSecret.
 *
 * A subscription is a URL of the tenant's and the topics POSTed to it
 * (deliver.c sends, signed with the subscription's secrets). A URL is
 * checked as the sender checks it (sender.h, wh_url_check), and one whose
 * host is a literal address the operator's address policy refuses is
 * refused here at once; a host name is not resolved here: the sender checks
 * every address it connects to. Topics are those of topics.c.
 *
 * Secrets are made here (keelson signs, so keelson chooses them) and shown
 * once, in the answer that made them; a subscription lists its signing
 * secrets by id and last four characters. A rotation keeps at most two
 * signing, as for intake endpoints (endpoints.c): the new one, and the
 * newest of the others until the time the rotation gives it, so that a
 * subscriber that updates its secret in that time refuses no delivery.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>

#include "ks_crypto.h"
#include "ks_text.h"
#include "sender.h"
#include "webhook.h"

#define NOT_FOUND_MSG "webhook subscription not found"

/* A subscription's topics travel as one column each: no parsing of array text, no allocation. */
_Static_assert(WH_SUB_TOPICS_MAX == 32, "SUB_TOPICS names 32 columns");
#define SUB_TOPICS                                                                                 \
        "topics[1], topics[2], topics[3], topics[4], topics[5], topics[6], topics[7], topics[8],"  \
        " topics[9], topics[10], topics[11], topics[12], topics[13], topics[14], topics[15],"      \
        " topics[16], topics[17], topics[18], topics[19], topics[20], topics[21], topics[22],"     \
        " topics[23], topics[24], topics[25], topics[26], topics[27], topics[28], topics[29],"     \
        " topics[30], topics[31], topics[32]"
#define SUB_COLUMNS                                                                                \
        "id, url, description, enabled, disabled_reason, COALESCE(failing_since_ms, 0),"           \
        " created_ms, updated_ms, cardinality(topics), " SUB_TOPICS
#define SUB_TOPIC_COLUMN 9 /* the first of SUB_TOPICS */
#define SECRET_ACTIVE    "(expires_ms IS NULL OR expires_ms > webhook.now_ms())"
#define SECRETS_MAX      8 /* signing at once: two after a rotation; room for what rotations race */
#define QUOTE_BYTES_MAX  64 /* of a client's text quoted in an error */

static const char sql_insert[] =
    "WITH s AS (INSERT INTO webhook.subscriptions (tenant_id, url, topics, description,"
    " created_ms, updated_ms) VALUES (webhook.ctx_tenant(), $1, $2::text[], $3, webhook.now_ms(),"
    " webhook.now_ms()) RETURNING id, created_ms)"
    " INSERT INTO webhook.subscription_secrets (tenant_id, subscription_id, secret, created_ms)"
    " SELECT webhook.ctx_tenant(), id, $4, created_ms FROM s RETURNING subscription_id";

static const char sql_get[] = "SELECT " SUB_COLUMNS " FROM webhook.subscriptions"
                              " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid";

static const char sql_secrets[] =
    "SELECT id, right(rtrim(secret, '='), 4), created_ms, COALESCE(expires_ms, 0)"
    " FROM webhook.subscription_secrets WHERE tenant_id = webhook.ctx_tenant()"
    " AND subscription_id = $1::uuid AND " SECRET_ACTIVE " ORDER BY created_ms DESC, id DESC";

/* ---- the reply ------------------------------------------------------------------------------ */

/* A subscription and its topics' pointers: first, so that a list's items point at it. */
typedef struct sub_view {
        Keelson__Webhook__V1__WebhookSubscription s;
        char *topics[WH_SUB_TOPICS_MAX];
} sub_view;

_Static_assert(offsetof(sub_view, s) == 0, "a list item is its subscription");

/* A subscription row (SUB_COLUMNS) into v; its strings point into r. */
static void sub_of(const PGresult *r, int i, sub_view *v)
{
        Keelson__Webhook__V1__WebhookSubscription *s = &v->s;
        int64_t n = ks_pg_int(r, i, 8);

        keelson__webhook__v1__webhook_subscription__init(s);
        s->id = (char *)ks_pg_text(r, i, 0);
        s->url = (char *)ks_pg_text(r, i, 1);
        s->description = (char *)ks_pg_text(r, i, 2);
        s->enabled = ks_pg_bool(r, i, 3);
        s->disabled_reason = (char *)ks_pg_text(r, i, 4);
        s->failing_since_unix_ms = ks_pg_int(r, i, 5);
        s->created_at_unix_ms = ks_pg_int(r, i, 6);
        s->updated_at_unix_ms = ks_pg_int(r, i, 7);
        s->n_topics = n > 0 && n <= WH_SUB_TOPICS_MAX ? (size_t)n : 0;
        for (size_t k = 0; k < s->n_topics; k++) {
                v->topics[k] = (char *)ks_pg_text(r, i, SUB_TOPIC_COLUMN + (int)k);
        }
        s->topics = v->topics;
}

/*
 * Replies the subscription id with its signing secrets: {subscription}, or
 * {subscription, secret} when secret is not NULL (the one just made); not_found
 * when the tenant has none such.
 */
static int reply_subscription(wh_tx *tx, const char *id, const char *secret)
{
        Keelson__Webhook__V1__SigningSecret secrets[SECRETS_MAX], *ps[SECRETS_MAX];
        PGresult *sr = NULL, *ss = NULL;
        const char *p[1] = {id};
        const ks_pg_stmt s[2] = {{.sql = sql_get, .n_params = 1, .params = p, .out = &sr},
                                 {.sql = sql_secrets, .n_params = 1, .params = p, .out = &ss}};
        sub_view v;
        int rc = wh_pipeline(tx, s, 2);

        if (rc != KS_OK) {
                return rc;
        }
        if (PQntuples(sr) == 0) {
                PQclear(sr);
                PQclear(ss);
                return ks_call_fail(tx->call, KS_NOT_FOUND, NOT_FOUND_MSG);
        }
        sub_of(sr, 0, &v);
        size_t n = (size_t)PQntuples(ss) < SECRETS_MAX ? (size_t)PQntuples(ss) : SECRETS_MAX;
        for (size_t i = 0; i < n; i++) {
                keelson__webhook__v1__signing_secret__init(&secrets[i]);
                secrets[i].id = (char *)ks_pg_text(ss, (int)i, 0);
                secrets[i].hint = (char *)ks_pg_text(ss, (int)i, 1);
                secrets[i].created_at_unix_ms = ks_pg_int(ss, (int)i, 2);
                secrets[i].expires_at_unix_ms = ks_pg_int(ss, (int)i, 3);
                ps[i] = &secrets[i];
        }
        v.s.secrets = ps;
        v.s.n_secrets = n;
        if (secret != NULL) {
                Keelson__Webhook__V1__WebhookSubscriptionSecretResponse resp =
                    KEELSON__WEBHOOK__V1__WEBHOOK_SUBSCRIPTION_SECRET_RESPONSE__INIT;
                resp.subscription = &v.s;
                resp.secret = (char *)secret;
                rc = ks_call_reply(tx->call, &resp.base);
        } else {
                Keelson__Webhook__V1__WebhookSubscriptionResponse resp =
                    KEELSON__WEBHOOK__V1__WEBHOOK_SUBSCRIPTION_RESPONSE__INIT;
                resp.subscription = &v.s;
                rc = ks_call_reply(tx->call, &resp.base);
        }
        PQclear(sr);
        PQclear(ss);
        return rc;
}

/* ---- checks ------------------------------------------------------------------------------- */

static int subscription_id_of(ks_call *call, const char *id)
{
        /* Not one of the tenant's, exactly as one of another tenant's. */
        return ks_uuid_valid(id) ? KS_OK : ks_call_fail(call, KS_NOT_FOUND, NOT_FOUND_MSG);
}

/* How many bytes of s to quote in an error: at most QUOTE_BYTES_MAX, whole UTF-8 characters. */
static int quote_len(const char *s)
{
        size_t n = strnlen(s, QUOTE_BYTES_MAX + 1);

        if (n > QUOTE_BYTES_MAX) {
                n = QUOTE_BYTES_MAX;
                while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) {
                        n--;
                }
        }
        return (int)n;
}

/* Refuses a host that is a literal address the operator's policy refuses; a name passes. */
static int address_of(ks_call *call, const char *host)
{
        const wh_service *svc = call->service;
        union {
                struct sockaddr sa;
                struct sockaddr_in in4;
                struct sockaddr_in6 in6;
        } a;
        char text[WH_ADDR_TEXT_MAX];

        memset(&a, 0, sizeof(a));
        if (inet_pton(AF_INET, host, &a.in4.sin_addr) == 1) {
                a.in4.sin_family = AF_INET;
        } else if (inet_pton(AF_INET6, host, &a.in6.sin6_addr) == 1) {
                a.in6.sin6_family = AF_INET6;
        } else {
                return KS_OK; /* a name: the sender checks each of its addresses as it connects */
        }
        wh_addr_verdict v = wh_addr_check(&svc->cfg->allow, &a.sa);
        if (v != WH_ADDR_ALLOWED) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                    "url: %s is a %s address; deliveries may not reach it",
                                    wh_addr_format(&a.sa, text, sizeof(text)),
                                    wh_addr_verdict_name(v));
        }
        return KS_OK;
}

static int url_of(ks_call *call, const char *url)
{
        char host[WH_HOST_BYTES_MAX + 1], why[256];

        if (url[0] == '\0') {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "url: required");
        }
        if (strnlen(url, WH_SUB_URL_MAX + 1) > WH_SUB_URL_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "url: at most %d bytes",
                                    WH_SUB_URL_MAX);
        }
        int rc = wh_url_check(url, host, sizeof(host), why, sizeof(why));
        if (rc == KS_INTERNAL) {
                return ks_call_oom(call);
        }
        if (rc != KS_OK) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "url: %s", why);
        }
        return address_of(call, host);
}

/*
 * The request's topics, checked (1..WH_SUB_TOPICS_MAX, each known, each
 * once), as the text of a PostgreSQL array, every element quoted, into *out
 * (malloc'd; the caller frees it). KS_OK, or a code the call carries.
 */
static int topics_of(ks_call *call, char *const *topics, size_t n, char **out)
{
        const wh_topic *found[WH_SUB_TOPICS_MAX];
        size_t len = 3; /* "{", "}" and the NUL */

        *out = NULL;
        if (n < 1 || n > WH_SUB_TOPICS_MAX) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "topics: 1 to %d topics",
                                    WH_SUB_TOPICS_MAX);
        }
        for (size_t i = 0; i < n; i++) {
                if ((found[i] = wh_topic_find(topics[i])) == NULL) {
                        return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                            "topics: unknown topic '%.*s'", quote_len(topics[i]),
                                            topics[i]);
                }
                for (size_t j = 0; j < i; j++) {
                        if (found[j] == found[i]) {
                                return ks_call_fail(call, KS_INVALID_ARGUMENT,
                                                    "topics: '%s' given twice", found[i]->name);
                        }
                }
                len += 2 * strlen(found[i]->name) + 3; /* escaped, quoted, a comma */
        }
        char *text = malloc(len), *w = text;
        if (text == NULL) {
                return ks_call_oom(call);
        }
        *w++ = '{';
        for (size_t i = 0; i < n; i++) {
                if (i > 0) {
                        *w++ = ',';
                }
                *w++ = '"';
                for (const char *c = found[i]->name; *c != '\0'; c++) {
                        if (*c == '"' || *c == '\\') {
                                *w++ = '\\';
                        }
                        *w++ = *c;
                }
                *w++ = '"';
        }
        *w++ = '}';
        *w = '\0';
        *out = text;
        return KS_OK;
}

/* A new signing secret (wh_secret_generate: "whsec_" and base64 of 32 random bytes). */
static int secret_new(ks_call *call, char *out, size_t len)
{
        return wh_secret_generate(out, len) == KS_OK
                   ? KS_OK
                   : ks_call_fail(call, KS_INTERNAL, WH_INTERNAL_MSG);
}

/* ---- CreateWebhookSubscription ------------------------------------------------------------- */

typedef struct create_args {
        const Keelson__Webhook__V1__CreateWebhookSubscriptionRequest *in;
        char *topics; /* an array's text */
        char description[WH_DESCRIPTION_BYTES];
        char secret[WH_SECRET_BYTES];
} create_args;

static int create_tx(wh_tx *tx, void *arg)
{
        create_args *a = arg;
        const char *p[4] = {a->in->url, a->topics, a->description, a->secret};
        PGresult *res = NULL;
        char id[WH_UUID_LEN + 1];
        int rc;

        if ((rc = wh_exec(tx, sql_insert, 4, p, &res)) != KS_OK) {
                return rc;
        }
        snprintf(id, sizeof(id), "%s", ks_pg_text(res, 0, 0));
        PQclear(res);
        return reply_subscription(tx, id, a->secret);
}

int wh_create_subscription(ks_call *call)
{
        create_args a = {.in = (const void *)call->in};
        int rc;

        if ((rc = url_of(call, a.in->url)) != KS_OK ||
            (rc = topics_of(call, a.in->topics, a.in->n_topics, &a.topics)) != KS_OK ||
            (rc = wh_description_of(call, a.in->description, a.description,
                                    sizeof(a.description))) != KS_OK ||
            (rc = secret_new(call, a.secret, sizeof(a.secret))) != KS_OK) {
                free(a.topics);
                return rc;
        }
        rc = wh_tx_run(call, create_tx, &a);
        free(a.topics);
        OPENSSL_cleanse(a.secret, sizeof(a.secret));
        return rc;
}

/* ---- GetWebhookSubscription ----------------------------------------------------------------- */

static int get_tx(wh_tx *tx, void *arg)
{
        return reply_subscription(tx, arg, NULL);
}

int wh_get_subscription(ks_call *call)
{
        const Keelson__Webhook__V1__GetWebhookSubscriptionRequest *in = (const void *)call->in;
        int rc = subscription_id_of(call, in->id);

        return rc != KS_OK ? rc : wh_tx_run_reads(call, get_tx, in->id);
}

/* ---- ListWebhookSubscriptions --------------------------------------------------------------- */

/* Items keep pointers into the page's result; secrets are not listed (Get has them). */
static void list_item(void *item, const PGresult *r, int i)
{
        sub_of(r, i, item);
}

static const ks_list_method list_all = {
    .page = KS_LIST_PAGE("keelson.webhook.v1.WebhookService/ListWebhookSubscriptions", sub_view,
                         list_item, KS_LIST_DESC_INT64(6), KS_LIST_DESC_UUID(0)),
    .sql = "SELECT " SUB_COLUMNS " FROM webhook.subscriptions"
           " WHERE tenant_id = webhook.ctx_tenant()" KS_LIST_BEFORE(
               "created_ms", "id") " ORDER BY created_ms DESC, id DESC LIMIT $3::int4",
    .items_field = "subscriptions",
};

int wh_list_subscriptions(ks_call *call)
{
        const Keelson__Webhook__V1__ListWebhookSubscriptionsRequest *in = (const void *)call->in;

        return ks_list_reply(call, &list_all, in->page_size, in->page_token, NULL, 0,
                             &wh_list_runner);
}

/* ---- UpdateWebhookSubscription -------------------------------------------------------------- */

enum {
        MASK_URL = 1u << 0,
        MASK_TOPICS = 1u << 1,
        MASK_DESCRIPTION = 1u << 2,
        MASK_ENABLED = 1u << 3
};
static const char *const update_fields[] = {"url", "topics", "description", "enabled", NULL};

/* Disabled by hand: 'manual'; enabled: no reason, and its failing streak forgotten. */
static const char sql_update[] =
    "UPDATE webhook.subscriptions SET"
    " url = CASE WHEN $2::bool THEN $3 ELSE url END,"
    " topics = CASE WHEN $4::bool THEN $5::text[] ELSE topics END,"
    " description = CASE WHEN $6::bool THEN $7 ELSE description END,"
    " enabled = CASE WHEN $8::bool THEN $9::bool ELSE enabled END,"
    " disabled_reason = CASE WHEN NOT $8::bool THEN disabled_reason"
    " WHEN $9::bool THEN '' ELSE 'manual' END,"
    " failing_since_ms = CASE WHEN $8::bool AND $9::bool THEN NULL ELSE failing_since_ms END,"
    " updated_ms = webhook.now_ms()"
    " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid RETURNING id";

typedef struct update_args {
        const Keelson__Webhook__V1__UpdateWebhookSubscriptionRequest *in;
        unsigned mask;
        char *topics; /* an array's text; NULL unless the mask names topics */
        char description[WH_DESCRIPTION_BYTES];
} update_args;

static int update_tx(wh_tx *tx, void *arg)
{
        update_args *a = arg;
        const char *p[9] = {a->in->id,
                            (a->mask & MASK_URL) ? "t" : "f",
                            a->in->url,
                            (a->mask & MASK_TOPICS) ? "t" : "f",
                            a->topics,
                            (a->mask & MASK_DESCRIPTION) ? "t" : "f",
                            a->description,
                            (a->mask & MASK_ENABLED) ? "t" : "f",
                            a->in->enabled ? "t" : "f"};
        PGresult *res = NULL;
        int rc;

        if ((rc = wh_exec(tx, sql_update, 9, p, &res)) != KS_OK) {
                return rc;
        }
        int n = PQntuples(res);
        PQclear(res);
        if (n == 0) {
                return ks_call_fail(tx->call, KS_NOT_FOUND, NOT_FOUND_MSG);
        }
        return reply_subscription(tx, a->in->id, NULL);
}

/* The fields the mask names, checked as Create checks them. */
static int update_check(ks_call *call, update_args *a)
{
        int rc = KS_OK;

        if ((a->mask & MASK_URL) != 0 && (rc = url_of(call, a->in->url)) != KS_OK) {
                return rc;
        }
        if ((a->mask & MASK_TOPICS) != 0 &&
            (rc = topics_of(call, a->in->topics, a->in->n_topics, &a->topics)) != KS_OK) {
                return rc;
        }
        if ((a->mask & MASK_DESCRIPTION) != 0) {
                rc = wh_description_of(call, a->in->description, a->description,
                                       sizeof(a->description));
        }
        return rc;
}

int wh_update_subscription(ks_call *call)
{
        update_args a = {.in = (const void *)call->in};
        char err[KS_MESSAGE_MAX];
        int rc;

        if ((rc = subscription_id_of(call, a.in->id)) != KS_OK) {
                return rc;
        }
        if (!ks_mask_parse_some(a.in->update_mask, a.in->n_update_mask, update_fields, &a.mask, err,
                                sizeof(err))) {
                return ks_call_fail(call, KS_INVALID_ARGUMENT, "%s", err);
        }
        if ((rc = update_check(call, &a)) == KS_OK) {
                rc = wh_tx_run(call, update_tx, &a);
        }
        free(a.topics);
        return rc;
}

/* ---- RotateWebhookSubscriptionSecret ------------------------------------------------------- */

static const char sql_lock[] = "SELECT id FROM webhook.subscriptions"
                               " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid"
                               " FOR UPDATE";

/* The newest signing secret keeps signing until now + $2 s (or its own end, if sooner). */
static const char sql_retire[] =
    "UPDATE webhook.subscription_secrets s SET expires_ms = CASE WHEN s.id = n.id THEN"
    " LEAST(COALESCE(s.expires_ms, 9223372036854775807), webhook.now_ms() + $2::int8 * 1000)"
    " ELSE webhook.now_ms() END"
    " FROM (SELECT id FROM webhook.subscription_secrets WHERE tenant_id = webhook.ctx_tenant()"
    " AND subscription_id = $1::uuid AND " SECRET_ACTIVE
    " ORDER BY created_ms DESC, id DESC LIMIT 1) n"
    " WHERE s.tenant_id = webhook.ctx_tenant() AND s.subscription_id = $1::uuid"
    " AND (s.expires_ms IS NULL OR s.expires_ms > webhook.now_ms())";

static const char sql_add_secret[] =
    "INSERT INTO webhook.subscription_secrets (tenant_id, subscription_id, secret, created_ms)"
    " VALUES (webhook.ctx_tenant(), $1::uuid, $2, webhook.now_ms())";

static const char sql_touch[] = "UPDATE webhook.subscriptions SET updated_ms = webhook.now_ms()"
                                " WHERE tenant_id = webhook.ctx_tenant() AND id = $1::uuid";

typedef struct rotate_args {
        const Keelson__Webhook__V1__RotateWebhookSubscriptionSecretRequest *in;
        int64_t previous_s;
        char secret[WH_SECRET_BYTES];
} rotate_args;

static int rotate_tx(wh_tx *tx, void *arg)
{
        rotate_args *a = arg;
        PGresult *res = NULL;
        const char *id[1] = {a->in->id};
        int rc;

        /* The subscription's row serialises rotations: two at once cannot leave three secrets. */
        if ((rc = wh_exec(tx, sql_lock, 1, id, &res)) != KS_OK) {
                return rc;
        }
        int n = PQntuples(res);
        PQclear(res);
        if (n == 0) {
                return ks_call_fail(tx->call, KS_NOT_FOUND, NOT_FOUND_MSG);
        }
        ks_pg_num prev = ks_pg_num_of(a->previous_s);
        const char *pr[2] = {a->in->id, prev.s}, *pa[2] = {a->in->id, a->secret};
        const ks_pg_stmt s[3] = {{.sql = sql_retire, .n_params = 2, .params = pr},
                                 {.sql = sql_add_secret, .n_params = 2, .params = pa},
                                 {.sql = sql_touch, .n_params = 1, .params = id}};
        if ((rc = ks_pg_pipeline(tx->conn, tx->call->request_id, s, 3)) != KS_OK) {
                return wh_db_fail(tx->call, rc);
        }
        return reply_subscription(tx, a->in->id, a->secret);
}

int wh_rotate_subscription_secret(ks_call *call)
{
        rotate_args a = {.in = (const void *)call->in};
        int rc;

        if ((rc = subscription_id_of(call, a.in->id)) != KS_OK) {
                return rc;
        }
        if ((rc = wh_rotate_window(call, a.in->previous_expires_in_s, &a.previous_s)) != KS_OK) {
                return rc;
        }
        if ((rc = secret_new(call, a.secret, sizeof(a.secret))) != KS_OK) {
                return rc;
        }
        rc = wh_tx_run(call, rotate_tx, &a);
        OPENSSL_cleanse(a.secret, sizeof(a.secret));
        return rc;
}
