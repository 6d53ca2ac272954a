/*
 * ks_list: paged list methods, keyset-paged behind an opaque page token
 * (as Google's AIP-158 describes them).
 *
 *   page_size   0 asks for the list's default; above its maximum is coerced
 *               to the maximum; negative is invalid_argument.
 *   page_token  empty for the first page, else a previous reply's
 *               next_page_token: the sort key of the last row it showed.
 *               A token that is garbage, was altered, or comes from another
 *               list or another scope (a tenant; for a list bound to its
 *               filters, other filters) is invalid_argument
 *               "page_token: not from this list".
 *   next_page_token  empty on the last page. The query fetches one row more
 *               than the page: that row's presence says a next page exists.
 *
 * A list describes itself once (ks_list_spec): its name, page sizes, the
 * result columns that form its sort key, and how a row becomes a reply
 * item. A request then goes:
 *
 *   ks_list_page_begin   reads page_size and page_token into the page's
 *                        query parameters: $1..$n_keys the cursor (on the
 *                        first page each key's `first`), then the LIMIT
 *                        (page_size + 1);
 *   (the caller)         runs its query with p->params, followed by its own
 *                        filter parameters, in its own transaction;
 *   ks_list_page_finish  takes the result: the page's items and its
 *                        next_page_token, for the reply;
 *   ks_list_page_clear   frees all of it (the items point into the result).
 *
 * The token's check is a plain digest, not a secret MAC: a token grants
 * nothing (the caller's transaction bounds every row it can reach), it only
 * makes a wrong token fail clearly instead of paging from a wrong place.
 *
 * A whole list method of a tenant (ks_list_method: its page, its SQL, the
 * field of its reply that holds the items) is one call, ks_list_reply: the
 * steps above around the service's own tenant transaction, then the reply
 * built through the reply's descriptor (ks_list_reply_page).
 */
#ifndef KS_LIST_H
#define KS_LIST_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ks_code.h"
#include "ks_method.h" /* ks_call */
#include "ks_pg.h"     /* ks_pg_stmt */

#define KS_LIST_PAGE_SIZE_DEFAULT 50
#define KS_LIST_PAGE_SIZE_MAX     200
#define KS_LIST_KEYS_MAX          2   /* columns in a sort key */
#define KS_LIST_KEY_BYTES_MAX     40  /* one key as text, NUL included: a uuid is 36 */
#define KS_LIST_TOKEN_BYTES_MAX   128 /* a page token, NUL included; longer is refused unread */
#define KS_LIST_FILTERS_MAX       4   /* a method's own parameters after the page's */
#define KS_LIST_BINDING_BYTES_MAX 256 /* a token's binding to its filters, NUL included */

/* The wire messages of the two refusals. */
#define KS_LIST_PAGE_SIZE_NEGATIVE_MSG "page_size: must not be negative"
#define KS_LIST_TOKEN_FOREIGN_MSG      "page_token: not from this list"

typedef enum ks_list_key_kind {
        KS_LIST_KEY_INT64 = 1, /* the decimal text of a signed 64-bit integer */
        KS_LIST_KEY_UUID = 2,  /* the 36-character text form of a uuid */
} ks_list_key_kind;

typedef struct ks_list_key {
        ks_list_key_kind kind;
        int column; /* its column in the page query's result */
        /*
         * The first page's cursor for this key: a value before every row in
         * the list's order, so that the query's keyset condition is the same
         * on every page, "(created_ms, id) < ($1, $2)", and the index scan
         * starts at the cursor whatever statistics the plan was made on (a
         * generic plan of "$1 IS NULL OR ..." may read and sort all of a
         * tenant's rows, and every page past the first reads the rows before
         * it). NULL: the query is given NULL and must handle it.
         */
        const char *first;
} ks_list_key;

/* First-page cursors of a newest-first list: past every real key. */
#define KS_LIST_FIRST_DESC_INT64 "9223372036854775807"
#define KS_LIST_FIRST_DESC_UUID  "ffffffff-ffff-ffff-ffff-ffffffffffff"
/* Of an oldest-first list by a 64-bit sequence. */
#define KS_LIST_FIRST_ASC_INT64 "-9223372036854775808"

/*
 * Of a list by a timestamptz given as unix microseconds through an interval
 * (timestamptz 'epoch' + $1 * interval '1 microsecond'): the interval takes
 * no INT64_MAX; these are the years 287168 and 4369 BC.
 */
#define KS_LIST_FIRST_DESC_MICROS "9000000000000000000"
#define KS_LIST_FIRST_ASC_MICROS  "-200000000000000000"
#define KS_LIST_FIRST_ASC_UUID    "00000000-0000-0000-0000-000000000000"

/* The keys of a newest-first list (time in unix ms, then id) and of an oldest-first sequence. */
#define KS_LIST_DESC_INT64(col)                                                                    \
        {                                                                                          \
                KS_LIST_KEY_INT64, (col), KS_LIST_FIRST_DESC_INT64                                 \
        }
#define KS_LIST_DESC_UUID(col)                                                                     \
        {                                                                                          \
                KS_LIST_KEY_UUID, (col), KS_LIST_FIRST_DESC_UUID                                   \
        }
#define KS_LIST_ASC_INT64(col)                                                                     \
        {                                                                                          \
                KS_LIST_KEY_INT64, (col), KS_LIST_FIRST_ASC_INT64                                  \
        }
/* A timestamptz key in microseconds, newest or oldest first, and an oldest-first id. */
#define KS_LIST_DESC_MICROS(col)                                                                   \
        {                                                                                          \
                KS_LIST_KEY_INT64, (col), KS_LIST_FIRST_DESC_MICROS                                \
        }
#define KS_LIST_ASC_MICROS(col)                                                                    \
        {                                                                                          \
                KS_LIST_KEY_INT64, (col), KS_LIST_FIRST_ASC_MICROS                                 \
        }
#define KS_LIST_ASC_UUID(col)                                                                      \
        {                                                                                          \
                KS_LIST_KEY_UUID, (col), KS_LIST_FIRST_ASC_UUID                                    \
        }

/* The keyset condition of a newest-first list on (time_col, id_col), both keys always given. */
#define KS_LIST_BEFORE(time_col, id_col) " AND (" time_col ", " id_col ") < ($1::int8, $2::uuid)"

/* Fills one reply item (item_size bytes, zeroed) from one row of the page. */
typedef void (*ks_list_item_fn)(void *item, const PGresult *res, int row);

typedef struct ks_list_spec {
        /* A token is valid for this list only: by convention the method's
         * full name, "keelson.auth.v1.AuthService/ListMembers". */
        const char *name;
        int page_size_default; /* 1..page_size_max */
        int page_size_max;
        int n_keys; /* 1..KS_LIST_KEYS_MAX */
        ks_list_key keys[KS_LIST_KEYS_MAX];
        size_t item_size;
        ks_list_item_fn item;
} ks_list_spec;

#define KS_LIST_DIGEST_BYTES 32

typedef struct ks_list_page {
        const ks_list_spec *spec;
        int page_size;
        /* The query's first parameters: the cursor's keys, then the limit. */
        const char *params[KS_LIST_KEYS_MAX + 1];
        int n_params;
        /* Filled by ks_list_page_finish: */
        PGresult *res; /* owned */
        size_t n_items;
        void **items; /* n_items pointers, for the reply's repeated field */
        char next_page_token[KS_LIST_TOKEN_BYTES_MAX];
        /* Private: */
        uint8_t scope_digest[KS_LIST_DIGEST_BYTES];
        char keys[KS_LIST_KEYS_MAX][KS_LIST_KEY_BYTES_MAX];
        char limit[16];
        void *item_block;
} ks_list_page;

/*
 * The page size to use: size_default for 0, size_max above size_max, -1
 * when requested is negative.
 */
int ks_list_page_size(int64_t requested, int size_default, int size_max) KS_MUST_CHECK;

/*
 * A page token for spec and scope (NULL or "" for none) resuming after the
 * row whose sort key is keys[0..n_keys-1] (text, as the query returns it).
 * Returns 0, or -1 when a key is not of its kind or out is too small
 * (KS_LIST_TOKEN_BYTES_MAX always suffices).
 */
int ks_list_token_encode(const ks_list_spec *spec, const char *scope, const char *const *keys,
                         char *out, size_t out_len) KS_MUST_CHECK;

/*
 * Reads a token made by ks_list_token_encode for the same spec and scope
 * into keys (n_keys of them). Returns 0, or -1 for anything else: garbage,
 * a token altered in any byte, one of another list or scope.
 */
int ks_list_token_decode(const ks_list_spec *spec, const char *scope, const char *token,
                         char keys[][KS_LIST_KEY_BYTES_MAX]) KS_MUST_CHECK;

/*
 * Starts a page: *p is initialised (ks_list_page_clear it in every case).
 * Returns KS_OK, or KS_INVALID_ARGUMENT with *err set to the message to send
 * (KS_LIST_PAGE_SIZE_NEGATIVE_MSG, KS_LIST_TOKEN_FOREIGN_MSG).
 */
int ks_list_page_begin(ks_list_page *p, const ks_list_spec *spec, int32_t page_size,
                       const char *page_token, const char *scope, const char **err) KS_MUST_CHECK;

/*
 * The page from the query's result, which the page owns from now on, on
 * success or not. Shows at most page_size rows; a next_page_token only when
 * the result holds more (it may hold page_size + 1). Returns KS_OK,
 * KS_RESOURCE_EXHAUSTED when out of memory (ks_call_oom), or KS_INTERNAL
 * when there is no result or a sort key column does not hold a key of its
 * kind (a mistake in the query).
 */
int ks_list_page_finish(ks_list_page *p, PGresult *res) KS_MUST_CHECK;

/* Frees the page's result and items; *p may be zeroed or only begun. */
void ks_list_page_clear(ks_list_page *p);

/* ---- a whole list method ------------------------------------------------ */

/*
 * A list method of the tenant: its page (ks_list_spec: name, page sizes,
 * sort key, items), its page query, and the repeated field of its reply
 * that holds the items. The query's parameters are the page's ($1..$n_keys
 * the cursor, its keys' `first` on the first page, then the LIMIT), then the method's
 * filters (at most KS_LIST_FILTERS_MAX). Who may call it is the service's
 * tenant transaction's business (its methods.def row).
 */
typedef struct ks_list_method {
        ks_list_spec page;
        const char *sql;
        const char *items_field; /* in the reply, beside its next_page_token: "members" */
} ks_list_method;

/*
 * The page of a list method named name (its full name:
 * "keelson.auth.v1.AuthService/ListMembers") with the default page sizes:
 * items of item_type filled by item_fn, sorted by the keys that follow
 * (ks_list_key initialisers, at most KS_LIST_KEYS_MAX).
 */
#define KS_LIST_PAGE(name_, item_type, item_fn, ...)                                               \
        {                                                                                          \
                .name = (name_), .page_size_default = KS_LIST_PAGE_SIZE_DEFAULT,                   \
                .page_size_max = KS_LIST_PAGE_SIZE_MAX,                                            \
                .n_keys = (int)(sizeof((ks_list_key[]){__VA_ARGS__}) / sizeof(ks_list_key)),       \
                .keys = {__VA_ARGS__}, .item_size = sizeof(item_type), .item = item_fn,            \
        }

/*
 * The service's tenant transaction: checks the caller (ks_call's caller
 * context, role, the method's permission) and runs the page query, a
 * statement whose out receives the page's rows, acting for the caller's
 * tenant: in the same pipeline as the statements that set the tenant when
 * it can (one round trip), and never more than once. Returns KS_OK, or a
 * code the call carries (its message set; a database failure mapped as the
 * service maps its own).
 */
typedef int (*ks_list_tx_fn)(ks_call *call, const ks_pg_stmt *query, void *run_arg);

/* What a service lends every one of its list methods: stated once, as a static const. */
typedef struct ks_list_runner {
        ks_list_tx_fn run; /* its tenant transaction */
        void *run_arg;     /* handed to run */
        /* Its reply to what is no fault of the client ("internal error"). */
        const char *internal_msg;
} ks_list_runner;

/*
 * A whole list method. Reads page_size and page_token (invalid_argument,
 * before anything else), runs m->sql in the service's tenant transaction
 * (r->run) with filters[0..n_filters-1] after the page's parameters, and
 * replies (the call's method's reply) with the page's items in
 * m->items_field and its next_page_token (ks_list_reply_page). A token is
 * valid in the tenant of the caller that received it only. What is no fault
 * of the client (more than KS_LIST_FILTERS_MAX filters, a sort key column
 * holding no key: a mistake in the method) is internal with
 * r->internal_msg, logged. Returns KS_OK or a code the call already carries.
 */
int ks_list_reply(ks_call *call, const ks_list_method *m, int32_t page_size, const char *page_token,
                  const char *const *filters, int n_filters, const ks_list_runner *r) KS_MUST_CHECK;

/*
 * ks_list_reply for a list whose tokens are bound to the request's filters
 * too: binding is the filters as the method spells them, one text (NULL or
 * "" for none: the tokens of ks_list_reply). A token issued under one
 * binding is refused under any other, as one of another list is
 * ("page_token: not from this list"), rather than resumed from a position
 * the other filters did not give. A binding of KS_LIST_BINDING_BYTES_MAX
 * bytes or more is the method's mistake: internal.
 */
int ks_list_reply_bound(ks_call *call, const ks_list_method *m, int32_t page_size,
                        const char *page_token, const char *const *filters, int n_filters,
                        const char *binding, const ks_list_runner *r) KS_MUST_CHECK;

/*
 * The reply of the call's method with the page in it (ks_call_reply): every
 * list reply has the repeated message field items_field and the string
 * next_page_token, set here through the reply's descriptor (a reply without
 * them is a mistake in the method: an assertion). The page keeps its items.
 * Returns ks_call_reply's code, or resource_exhausted (ks_call_oom) when out
 * of memory.
 */
int ks_list_reply_page(ks_call *call, const char *items_field,
                       const ks_list_page *page) KS_MUST_CHECK;

#endif
