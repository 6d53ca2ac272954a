-- keelson-webhook, schema "webhook": the pending deliveries by when they are
-- due, across tenants (services/webhook/deliver.c).
--
-- Every claim step first asks whether any delivery is due, with a prepared
-- statement this index answers with one probe. Only then does it send the
-- claim, which is planned at every call (deliver.c says why): an idle
-- replica used to plan it five times a second.

CREATE INDEX deliveries_next_due ON webhook.deliveries (next_attempt_ms) WHERE status = 1;
