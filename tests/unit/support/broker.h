/*
 * A broker in the test's own process, on a random free loopback port span:
 * for unit tests that need a real broker between an RPC client and server,
 * or a publisher and subscriber.
 */
#ifndef KS_TEST_BROKER_H
#define KS_TEST_BROKER_H

#include <stddef.h>

#include "ks_broker.h"

/*
 * Starts a broker at "tcp://127.0.0.1:<port>" (written into base), trying up
 * to 20 random ports in 15000..31899. Returns 0 with *out, or -1 with *out
 * NULL. The first call seeds rand() from the pid and the time.
 */
int test_broker_start(ks_broker **out, char *base, size_t base_len);

#endif
