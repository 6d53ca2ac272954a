/*
 * Input rules of the auth service that are its own: passwords, the default
 * tenant name, uuids. The rules every service shares (UTF-8, e-mail
 * addresses, names) are core's (ks_text.h). Pure functions (no I/O, no
 * allocation) so that services/auth/tests/test_auth_validate.c checks them
 * without a database.
 */
#include "auth.h"

#include <stdio.h>
#include <string.h>

static int invalid(char *err, size_t err_len, const char *msg)
{
        snprintf(err, err_len, "%s", msg);
        return KS_INVALID_ARGUMENT;
}

int auth_password_validate(const char *password, char *err, size_t err_len)
{
        size_t len = password ? strlen(password) : 0;
        long chars;

        if (len > AUTH_PASSWORD_BYTES_MAX) {
                return invalid(err, err_len, "password: at most 1024 bytes");
        }
        chars = ks_utf8_count(password ? password : "", len);
        if (chars < 0) {
                return invalid(err, err_len, "password: not valid UTF-8");
        }
        if (chars < AUTH_PASSWORD_CHARS_MIN) {
                return invalid(err, err_len, "password: at least 8 characters");
        }
        return KS_OK;
}

void auth_default_tenant_name(const char *email, char *out, size_t out_len)
{
        static const char suffix[] = "'s workspace";
        const size_t suffix_len = sizeof(suffix) - 1;
        const char *at = strchr(email, '@');
        size_t local_len = at ? (size_t)(at - email) : strlen(email);
        size_t i = 0, keep = 0;
        long chars = 0;
        uint32_t cp;

        if (out_len <= suffix_len) {
                if (out_len > 0) {
                        out[0] = '\0';
                }
                return;
        }
        /* Whole code points only, within both the byte and the character bound. */
        while (i < local_len && chars < AUTH_NAME_CHARS_MAX - (long)suffix_len) {
                if (ks_utf8_next(email, local_len, &i, &cp) != 0 || i > out_len - 1 - suffix_len) {
                        break;
                }
                keep = i;
                chars++;
        }
        memcpy(out, email, keep);
        memcpy(out + keep, suffix, suffix_len + 1);
}

bool auth_uuid_valid(const char *s)
{
        return ks_uuid_valid(s);
}
