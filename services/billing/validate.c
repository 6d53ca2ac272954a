/*
 * Billing's input rules that need no database: each answers true, or false
 * with the message the client gets (invalid_argument), naming the field.
 * Addresses and names follow the rules every service shares (ks_text.h).
 */
#include "billing.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ks_crypto.h"
#include "ks_text.h"

static bool refuse(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool refuse(char *err, size_t err_len, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
        return false;
}

bool bl_uuid_valid(const char *s)
{
        return s != NULL && ks_uuid_valid(s);
}

bool bl_id_valid(const char *field, const char *id, char *err, size_t err_len)
{
        if (bl_uuid_valid(id)) {
                return true;
        }
        return refuse(err, err_len, "%s: must be a uuid", field);
}

bool bl_email_valid(const char *email, char *out, size_t out_len, char *err, size_t err_len)
{
        char lower[BL_EMAIL_BYTES_MAX + 1];
        size_t start, len;

        ks_trim_bounds(email != NULL ? email : "", &start, &len);
        if (len == 0) {
                return refuse(err, err_len, "email: required");
        }
        if (len > BL_EMAIL_BYTES_MAX || len >= out_len) {
                return refuse(err, err_len, "email: at most %d bytes", BL_EMAIL_BYTES_MAX);
        }
        memcpy(out, email + start, len);
        out[len] = '\0';
        /* The rules are those of a normalised address; case is kept as given. */
        if (ks_email_normalize(out, lower, sizeof(lower)) != 0 ||
            ks_email_validate(lower, err, err_len) != KS_OK) {
                return false;
        }
        return true;
}

bool bl_name_valid(const char *field, const char *name, int chars_max, char *out, size_t out_len,
                   char *err, size_t err_len)
{
        return ks_name_normalize(field, name != NULL ? name : "", chars_max, out, out_len, err,
                                 err_len) == KS_OK;
}

static bool code_char(char c)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
}

bool bl_plan_code_valid(const char *code, char *err, size_t err_len)
{
        size_t n = code != NULL ? strlen(code) : 0;

        if (n == 0 || n > BL_PLAN_CODE_MAX) {
                return refuse(err, err_len, "code: 1 to %d characters of [A-Za-z0-9._-]",
                              BL_PLAN_CODE_MAX);
        }
        for (size_t i = 0; i < n; i++) {
                if (!code_char(code[i])) {
                        return refuse(err, err_len, "code: 1 to %d characters of [A-Za-z0-9._-]",
                                      BL_PLAN_CODE_MAX);
                }
        }
        return true;
}

bool bl_event_id_valid(const char *id)
{
        size_t n = id != NULL ? strlen(id) : 0;

        if (n == 0 || n > BL_EVENT_ID_MAX) {
                return false;
        }
        for (size_t i = 0; i < n; i++) {
                if (!code_char(id[i]) && id[i] != ':') {
                        return false;
                }
        }
        return true;
}

bool bl_payment_method_valid(const char *field, const char *pm, char *err, size_t err_len)
{
        size_t n = pm != NULL ? strlen(pm) : 0;

        if (n > BL_PAYMENT_METHOD_MAX) {
                return refuse(err, err_len, "%s: at most %d bytes", field, BL_PAYMENT_METHOD_MAX);
        }
        for (size_t i = 0; i < n; i++) {
                if (pm[i] <= 0x20 || pm[i] > 0x7e) {
                        return refuse(err, err_len, "%s: printable ASCII without spaces", field);
                }
        }
        return true;
}

bool bl_tax_valid(int32_t rate_bp, char *err, size_t err_len)
{
        if (rate_bp < 0 || rate_bp > BL_BASIS_POINTS) {
                return refuse(err, err_len, "tax_rate_bp: 0 to %d basis points", BL_BASIS_POINTS);
        }
        return true;
}

bool bl_metadata_valid(const bl_kv *kv, size_t n, bool allow_empty_values, char *err,
                       size_t err_len)
{
        if (n > BL_METADATA_KEYS_MAX) {
                return refuse(err, err_len, "metadata: at most %d keys", BL_METADATA_KEYS_MAX);
        }
        for (size_t i = 0; i < n; i++) {
                size_t k = strlen(kv[i].key), v = strlen(kv[i].value);
                if (k == 0 || k > BL_METADATA_KEY_MAX) {
                        return refuse(err, err_len, "metadata: keys of 1 to %d bytes",
                                      BL_METADATA_KEY_MAX);
                }
                if (v > BL_METADATA_VALUE_MAX || (v == 0 && !allow_empty_values)) {
                        return refuse(err, err_len, "metadata: values of 1 to %d bytes",
                                      BL_METADATA_VALUE_MAX);
                }
        }
        return true;
}
