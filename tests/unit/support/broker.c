#include "broker.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define PORT_TRIES 20

int test_broker_start(ks_broker **out, char *base, size_t base_len)
{
        static bool seeded;

        if (!seeded) {
                srand((unsigned)getpid() ^ (unsigned)time(NULL));
                seeded = true;
        }
        for (int attempt = 0; attempt < PORT_TRIES; attempt++) {
                snprintf(base, base_len, "tcp://127.0.0.1:%d", 15000 + rand() % 16900);
                if (ks_broker_start(out, base) == KS_OK) {
                        return 0;
                }
        }
        *out = NULL;
        return -1;
}
