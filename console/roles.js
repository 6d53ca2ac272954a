// What the console offers to whom, in one place: every page and every
// write a page may show is a row below, with the permission it needs
// (docs/api.md, "Roles and permissions"; services/core/ks_perms.c is the
// server's copy) and, for writes on something that has a role, the rank
// rule. Pages ask may(me, action, target) and never read permissions or
// roles themselves. The server checks everything again: this table only
// keeps the console from offering what would be refused.

// Roles rank owner > admin > member > viewer.
export const ROLES = ['owner', 'admin', 'member', 'viewer'];
export function rank(role) {
  const i = ROLES.indexOf(role);
  return i < 0 ? 0 : ROLES.length - i;
}

// The pages, by the permission their reads need (null: any signed-in role).
export const PAGE_NEEDS = {
  dashboard: 'org.read',
  members: 'members.read',
  keys: 'api_keys.manage',
  audit: 'audit.read',
  tenants: null,
  customers: 'billing.read',
  customer: 'billing.read',
  plans: 'billing.read',
  subscriptions: 'billing.read',
  subscription: 'billing.read',
  invoices: 'billing.read',
  invoice: 'billing.read',
  'credit-notes': 'billing.read',
  ledger: null, // the ledger's reads are open to every role (docs/api.md, LedgerService)
  'ledger-account': null,
  webhooks: 'webhooks.read',
  'webhook-endpoint': 'webhooks.read',
  'webhook-subscription': 'webhooks.read',
  delivery: 'webhooks.read',
};

// Writes (and links into pages), by what they need. rank: the target's
// role must not be above the caller's (SetRole, RemoveMember,
// RevokeInvitation, RevokeApiKey refuse it). notSelf: not on oneself.
const OFFERS = {
  'member.set_role': {permission: 'members.set_role', rank: true},
  'member.remove': {permission: 'members.remove', rank: true, notSelf: true},
  'invitation.list': {permission: 'members.invite'},
  'invitation.create': {permission: 'members.invite'},
  'invitation.revoke': {permission: 'members.invite', rank: true},
  'api_key.create': {permission: 'api_keys.manage'},
  'api_key.revoke': {permission: 'api_keys.manage', rank: true},
  'customer.open': {permission: 'billing.read'},
  'customer.create': {permission: 'billing.manage'},
  'customer.update': {permission: 'billing.manage'},
  'customer.archive': {permission: 'billing.manage'},
  'plan.create': {permission: 'billing.manage'},
  'plan.update': {permission: 'billing.manage'},
  'plan.archive': {permission: 'billing.manage'},
  'subscription.create': {permission: 'billing.manage'},
  'subscription.change': {permission: 'billing.manage'},
  'subscription.move': {permission: 'billing.manage'}, // pause, resume, cancel
  'invoice.create': {permission: 'billing.manage'},
  'invoice.finalize': {permission: 'billing.manage'},
  'invoice.pay': {permission: 'billing.manage'}, // PayInvoice, RecordPayment
  'invoice.close': {permission: 'billing.manage'}, // VoidInvoice, MarkUncollectible
  'credit_note.create': {permission: 'billing.manage'},
  'webhook.manage': {permission: 'webhooks.manage'},
};

function holds(me, permission) {
  return !permission || Boolean(me && (me.permissions || []).includes(permission));
}

export function mayOpen(me, page) {
  return Boolean(me) && page in PAGE_NEEDS && holds(me, PAGE_NEEDS[page]);
}

// Whether the console offers action to me; target: {role, userId} of what
// it acts on, when it has them.
export function may(me, action, target = {}) {
  const offer = OFFERS[action];
  if (!offer) throw new Error(`no such offer: ${action}`);
  if (!me || !holds(me, offer.permission)) return false;
  if (offer.rank && target.role && rank(target.role) > rank(me.role)) return false;
  if (offer.notSelf && target.userId && target.userId === me.userId) return false;
  return true;
}

// The roles me may grant (Invite, SetRole, CreateApiKey): its own and below.
export function grantable(me) {
  return ROLES.filter((r) => rank(r) <= rank(me && me.role));
}
