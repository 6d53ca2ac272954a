/*
 * ks_broker_ctl: the two control messages a replica and a broker exchange
 * on the broker's back connection, so that a replica leaves the rotation
 * before it stops instead of after.
 *
 * On a back connection every message carries a backtrace whose first word
 * is a client's pipe id, and ks_sp never gives a pipe the id 0 (ks_sp.h).
 * A message whose first word is 0 is therefore no call and no reply but a
 * control message, named by the bytes after that word:
 *
 *   replica -> broker  "drain"    send me no new call; I answer what I hold
 *   broker -> replica  "drained"  nothing more will come on this connection
 *
 * A broker takes a draining replica out of its choice at once (its calls in
 * flight are still answered through it) and answers "drained"; TCP keeps
 * order, so every call the broker sent before it is already on its way and
 * none follows it. A replica that has its "drained" from every broker it
 * is connected to can finish what it holds and close with nothing lost in
 * between. With no other replica of the service connected, a broker keeps
 * new calls in its queue for the next replica to connect (ks_broker.h).
 * A peer that does not know these messages drops them (an unknown pipe, a
 * malformed request): the replica then stops as before, after
 * KS_BROKER_CTL_WAIT_MS.
 */
#ifndef KS_BROKER_CTL_H
#define KS_BROKER_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* How long a draining replica waits for every broker's "drained". */
#define KS_BROKER_CTL_WAIT_MS 1000

#define KS_BROKER_CTL_DRAIN   "\0\0\0\0drain"
#define KS_BROKER_CTL_DRAINED "\0\0\0\0drained"

/* Sizes of the two messages (the string literals' bytes without their NUL). */
#define KS_BROKER_CTL_DRAIN_LEN   (sizeof(KS_BROKER_CTL_DRAIN) - 1)
#define KS_BROKER_CTL_DRAINED_LEN (sizeof(KS_BROKER_CTL_DRAINED) - 1)

/* Whether msg is a control message: its first word names no pipe. */
static inline bool ks_broker_ctl_is(const uint8_t *msg, size_t len)
{
        return len >= 4 && msg[0] == 0 && msg[1] == 0 && msg[2] == 0 && msg[3] == 0;
}

/* Whether msg is exactly the control message ctl of ctl_len bytes. */
static inline bool ks_broker_ctl_equal(const uint8_t *msg, size_t len, const char *ctl,
                                       size_t ctl_len)
{
        return len == ctl_len && memcmp(msg, ctl, len) == 0;
}

#endif
