// Test vectors for services/webhook/signature.c, made by the providers' own
// libraries, so that the C tests check keelson against them and not against
// itself. Not run by CI: the vectors it prints are pasted as constants into
// services/webhook/tests/test_signature.c.
//
// Run it from an empty directory outside the repository (ES modules resolve
// packages next to the script, so copy it there):
//
//   cp <repo>/tests/vectors/webhook_signatures.mjs . && npm install stripe standardwebhooks
//   node webhook_signatures.mjs
//
// It prints each vector (secret, id, timestamp, payload as C string
// literals, and the header the library produced).
//
// The other way round, to check a Standard Webhooks signature that keelson's
// C signer made (wh_sign_standard) with the npm library's verify:
//
//   node webhook_signatures.mjs verify-standard SECRET ID TIMESTAMP PAYLOAD_JSON SIGNATURE
//   node webhook_signatures.mjs verify-stripe SECRET TIMESTAMP PAYLOAD_JSON HEADER
//
// PAYLOAD_JSON is the payload as a JSON string literal ("a\u0000b"), so that
// any byte can be passed. Both print "verified" or the library's error.
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';

const stripe = new Stripe('sk_test_unused'); // no request is ever made

// A small Stripe-like event, a body with a NUL byte and non-ASCII UTF-8, and
// an empty body.
const EVENT =
  '{"id":"evt_1PqW3r2eZvKYlo2C8dJk0aBc","object":"event","api_version":"2024-06-20",' +
  '"created":1700000000,"type":"invoice.paid","data":{"object":{"id":"in_1PqW3q2eZvKYlo2C",' +
  '"object":"invoice","amount_paid":4200,"currency":"eur"}}}';
const NUL_UTF8 = 'caf\u00e9\u0000tail';
const EMPTY = '';

// The C string literal of a JS string's UTF-8 bytes.
function cLiteral(s) {
  let out = '"';
  for (const b of Buffer.from(s, 'utf8')) {
    if (b === 0x22 || b === 0x5c) out += '\\' + String.fromCharCode(b);
    else if (b >= 0x20 && b < 0x7f) out += String.fromCharCode(b);
    else out += '\\x' + b.toString(16).padStart(2, '0') + '""';
  }
  return out + '"';
}

function stripeVector(name, secret, timestamp, payload) {
  const header = stripe.webhooks.generateTestHeaderString({ payload, secret, timestamp });
  // The library must accept its own header at that instant (it refuses an
  // empty payload before looking at the signature, so that one is not checked).
  if (payload !== '') {
    stripe.webhooks.signature.verifyHeader(payload, header, secret, 300, undefined,
      timestamp * 1000);
  }
  console.log(`/* ${name} */`);
  console.log(`{ ${cLiteral(secret)}, ${timestamp}, ${cLiteral(payload)}, ` +
    `${Buffer.byteLength(payload)}, ${cLiteral(header)} },`);
}

function standardVector(name, secret, id, timestamp, payload) {
  const wh = new Webhook(secret);
  const signature = wh.sign(id, new Date(timestamp * 1000), payload);
  console.log(`/* ${name} */`);
  console.log(`{ ${cLiteral(secret)}, ${cLiteral(id)}, ${timestamp}, ${cLiteral(payload)}, ` +
    `${Buffer.byteLength(payload)}, ${cLiteral(signature)} },`);
}

// verify() reads the clock: pin it to the webhook's own timestamp.
function atTime(timestamp, fn) {
  const real = Date.now;
  Date.now = () => timestamp * 1000;
  try {
    return fn();
  } finally {
    Date.now = real;
  }
}

function verifyStandard([secret, id, ts, payloadJson, signature]) {
  const timestamp = Number(ts);
  const headers = { 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': signature };
  atTime(timestamp, () =>
    new Webhook(secret).verify(JSON.parse(payloadJson), headers, { jsonParse: false }));
  console.log('verified');
}

function verifyStripe([secret, ts, payloadJson, header]) {
  stripe.webhooks.signature.verifyHeader(JSON.parse(payloadJson), header, secret, 300, undefined,
    Number(ts) * 1000);
  console.log('verified');
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'verify-standard') {
  verifyStandard(args);
} else if (mode === 'verify-stripe') {
  verifyStripe(args);
} else {
  console.log('/* Stripe: secret, timestamp, payload, payload bytes, Stripe-Signature (stripe-node) */');
  stripeVector('stripe-go test secret, event', 'whsec_test_secret', 1700000000, EVENT);
  stripeVector('realistic secret, event', 'whsec_5Ek3Q9yP7cVnZ0b1LmT8rXw2HdJ4gUaF', 1700000300, EVENT);
  stripeVector('rotated secret, same event and time', 'whsec_Rr7mK2pQ9vX4nB8cL1dF6gH3jT0wZ5yE',
    1700000300, EVENT);
  stripeVector('NUL and UTF-8 in the body', 'whsec_test_secret', 1700000000, NUL_UTF8);
  stripeVector('empty body', 'whsec_test_secret', 1700000000, EMPTY);

  console.log('/* Standard Webhooks: secret, id, timestamp, payload, payload bytes, signature (standardwebhooks) */');
  standardVector('the libraries\' own test vector (24-byte key)', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}');
  standardVector('32-byte key, event', 'whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=',
    'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W', 1674087231, EVENT);
  standardVector('64-byte key, event',
    'whsec_' + Buffer.from(Array.from({ length: 64 }, (_, i) => 255 - i)).toString('base64'),
    'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W', 1674087231, EVENT);
  standardVector('NUL and UTF-8 in the body', 'whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=',
    'msg_nul', 1674087231, NUL_UTF8);
  standardVector('empty body', 'whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=',
    'msg_empty', 1674087231, EMPTY);
}
