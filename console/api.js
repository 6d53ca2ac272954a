// The console's only way to the gateway: Connect unary calls with JSON
// bodies, from this origin. The session is the HttpOnly cookie
// __Host-keelson_session, which the browser sends and page scripts cannot
// read; X-Keelson-Console: 1 is what lets the gateway accept it
// (docs/api.md, "The admin console").

export class ConnectError extends Error {
  constructor(code, message, status) {
    super(message);
    this.name = 'ConnectError';
    this.code = code;
    this.status = status;
  }
}

const TIMEOUT_MS = 15000;

export async function call(service, method, body = {}) {
  let res;
  try {
    res = await fetch(`/${service}/${method}`, {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: {
        'Content-Type': 'application/json',
        'Connect-Protocol-Version': '1',
        'Connect-Timeout-Ms': String(TIMEOUT_MS),
        'X-Keelson-Console': '1',
      },
      body: JSON.stringify(body),
    });
  } catch (err) {
    throw new ConnectError('unavailable', 'the gateway cannot be reached', 0);
  }
  let data = null;
  try {
    data = await res.json();
  } catch (err) {
    data = null;
  }
  if (!res.ok) {
    const code = data && typeof data.code === 'string' ? data.code : 'unknown';
    const message = data && typeof data.message === 'string' ? data.message : `HTTP ${res.status}`;
    const e = new ConnectError(code, message, res.status);
    if (code === 'unauthenticated') window.dispatchEvent(new CustomEvent('keelson:signed-out'));
    throw e;
  }
  return data || {};
}

export const auth = (method, body) => call('keelson.auth.v1.AuthService', method, body);
export const summary = (method, body) => call('keelson.summary.v1.AdminSummaryService', method, body);
export const billing = (method, body) => call('keelson.billing.v1.BillingService', method, body);
export const ledger = (method, body) => call('keelson.ledger.v1.LedgerService', method, body);
export const webhook = (method, body) => call('keelson.webhook.v1.WebhookService', method, body);

// Whether the last page load left a session (a hint only: the cookie itself
// is unreadable here). It spares a signed-out visitor a 401 from WhoAmI.
const HINT = 'keelson.console.signed-in';
export const sessionHint = {
  get: () => window.localStorage.getItem(HINT) === '1',
  set: (on) => (on ? window.localStorage.setItem(HINT, '1') : window.localStorage.removeItem(HINT)),
};
