// The ledger: a ledger's accounts with their balances and totals (its
// trial balance, paged by account id), and one account with its transfers
// (paged by timestamp, newest first) and, for accounts kept with history,
// its balance after each. Every read of LedgerService is open to every
// role (docs/api.md), so this page is offered to all.
//
// Ids and amounts are 128-bit: two uint64 halves (`x`, `xHi`) read as one
// BigInt. Billing's accounts are named by their code (docs/api.md,
// "Billing in the ledger"); the ledger of a currency is its ISO 4217 number.
import {ledger} from './api.js';
import {cell, el, facts, field, pageLink, Pager, param, replace, select, Status, table, when} from './dom.js';
import {amount} from './billing-ui.js';

const PAGE_SIZE = 25;
const LEDGERS = [[840, 'USD'], [978, 'EUR'], [826, 'GBP'], [392, 'JPY'], [756, 'CHF'], [124, 'CAD'], [36, 'AUD']];
const BILLING_CODES = {1: 'receivable', 2: 'revenue', 3: 'tax payable', 4: 'cash', 5: 'customer credit', 6: 'bad debt'};
const U64 = (1n << 64n) - 1n;

export function u128(lo, hi) {
  return (BigInt(hi || 0) << 64n) | BigInt(lo || 0);
}
function halves(v) {
  return {lo: String(v & U64), hi: String(v >> 64n)};
}
// A balance field of an account or an AccountBalance.
function bal(o, name) {
  return u128(o[name], o[`${name}Hi`]);
}
function currencyOf(ledgerNo) {
  const hit = LEDGERS.find(([n]) => n === Number(ledgerNo));
  return hit ? hit[1] : '';
}
// An amount of a ledger: money when the ledger is a known currency's, else the plain number.
function sum(v, ledgerNo) {
  const cur = currencyOf(ledgerNo);
  if (cur && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= -BigInt(Number.MAX_SAFE_INTEGER)) return amount(String(v), cur);
  return v.toLocaleString();
}
// The timestamps are nanoseconds.
function whenNs(ns) {
  return when(String(BigInt(ns || 0) / 1000000n));
}
// userData128 as a uuid (billing's customer accounts carry the customer's).
function uuidOf(v) {
  const h = v.toString(16).padStart(32, '0');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function accountName(ctx, a) {
  const name = BILLING_CODES[a.code];
  const ud = u128(a.userData128, a.userData128Hi);
  const parts = [name ? `billing: ${name}` : `code ${a.code}`];
  if (name && ud !== 0n && (a.code === 1 || a.code === 5)) {
    const id = uuidOf(ud);
    parts.push(' of ', ctx.may('customer.open') ? pageLink(ctx, 'customer', {id}, `customer ${id.slice(0, 8)}`) : `customer ${id.slice(0, 8)}`);
  }
  return parts;
}

function accountRow(ctx, a) {
  const id = u128(a.id, a.idHi);
  const dp = bal(a, 'debitsPosted');
  const cp = bal(a, 'creditsPosted');
  return el('tr', {dataset: {accountId: String(id)}},
    cell(pageLink(ctx, 'ledger-account', {id: String(id)}, el('code', {class: 'id'}, String(id)))),
    cell(...accountName(ctx, a)),
    el('td', {class: 'num'}, sum(dp, a.ledger)),
    el('td', {class: 'num'}, sum(cp, a.ledger)),
    el('td', {class: 'num'}, sum(dp - cp, a.ledger)),
    el('td', {class: 'num'}, `${sum(bal(a, 'debitsPending'), a.ledger)} / ${sum(bal(a, 'creditsPending'), a.ledger)}`));
}
const ACCOUNT_HEADERS = ['Account', 'What', 'Debits posted', 'Credits posted', 'Net (debits − credits)', 'Pending debits / credits'];

function totalsCard(r, ledgerNo) {
  const t = r.totals || {};
  return el('div', {class: 'card', id: 'trial-totals'},
    el('h3', {}, 'Totals of the ledger'),
    facts('Trial balance totals', [
      ['Accounts', Number(r.accountsTotal || 0).toLocaleString()],
      ['Debits posted', sum(bal(t, 'debitsPosted'), ledgerNo)],
      ['Credits posted', sum(bal(t, 'creditsPosted'), ledgerNo)],
      ['Debits pending', sum(bal(t, 'debitsPending'), ledgerNo)],
      ['Credits pending', sum(bal(t, 'creditsPending'), ledgerNo)],
      ['Balanced', r.balanced ? 'yes: debits equal credits' : 'NO: debits and credits differ'],
      ['As of', whenNs(t.timestamp)],
    ]));
}

export async function ledgerPage(root, ctx) {
  const status = new Status();
  const start = Number(param('ledger')) || 840;
  const known = LEDGERS.some(([n]) => n === start);
  const pick = select([...LEDGERS.map(([n, c]) => [String(n), `${c} (${n})`]), ['other', 'Another number']],
    known ? String(start) : 'other', {id: 'ledger-pick'});
  const number = el('input', {id: 'ledger-number', type: 'number', min: '1', max: '4294967295', step: '1', value: String(start), inputmode: 'numeric'});
  const numberField = field('Ledger number', number);
  numberField.hidden = known;
  pick.addEventListener('change', () => {
    numberField.hidden = pick.value !== 'other';
    if (pick.value !== 'other') number.value = pick.value;
  });
  const show = el('button', {type: 'submit', id: 'ledger-show'}, 'Show');
  const chooser = el('form', {class: 'card', 'aria-labelledby': 'ledger-pick-h'},
    el('h2', {id: 'ledger-pick-h'}, 'Which ledger'),
    field('Ledger', pick, 'Billing keeps each currency in the ledger of its ISO 4217 number.'), numberField,
    el('div', {class: 'actions'}, show));
  const lookupId = el('input', {id: 'ledger-lookup', type: 'text', inputmode: 'numeric', pattern: '[0-9]+', required: true, autocomplete: 'off'});
  const lookup = el('form', {class: 'toolbar', role: 'search', 'aria-label': 'Open an account by id'},
    el('label', {for: 'ledger-lookup'}, 'Account id'), lookupId, el('button', {type: 'submit', class: 'secondary'}, 'Open'));
  lookup.addEventListener('submit', (ev) => {
    ev.preventDefault();
    ctx.navigate('ledger-account', {params: {id: lookupId.value.trim()}});
  });

  const totals = el('div', {id: 'ledger-totals'});
  const list = el('div', {id: 'ledger-accounts'}, el('p', {class: 'loading'}, 'Loading…'));
  let ledgerNo = start;
  const pager = new Pager('Account pages', async (token) => {
    list.setAttribute('aria-busy', 'true');
    try {
      const after = token ? halves(BigInt(token)) : {lo: '0', hi: '0'};
      const r = await ledger('GetTrialBalance', {ledger: ledgerNo, limit: PAGE_SIZE, afterAccountId: after.lo, afterAccountIdHi: after.hi});
      const accounts = r.accounts || [];
      replace(totals, totalsCard(r, ledgerNo));
      replace(list, accounts.length === 0 ? el('p', {}, 'No accounts in this ledger.')
        : table(`Accounts of ledger ${ledgerNo} by id, with their balances`, ACCOUNT_HEADERS, accounts.map((a) => accountRow(ctx, a))));
      status.clear();
      if (accounts.length < PAGE_SIZE) return '';
      const last = accounts[accounts.length - 1];
      return String(u128(last.id, last.idHi));
    } catch (err) {
      status.error(err);
      replace(list);
      return '';
    } finally {
      list.removeAttribute('aria-busy');
    }
  });
  chooser.addEventListener('submit', (ev) => {
    ev.preventDefault();
    ledgerNo = Number(number.value) || 840;
    window.history.replaceState({}, '', `/console/ledger?ledger=${ledgerNo}`);
    pager.reset();
    pager.refresh();
  });
  root.append(chooser, lookup, status.node,
    el('section', {'aria-labelledby': 'trial-h'}, el('h2', {id: 'trial-h'}, 'Trial balance'), totals, list, pager.node));
  await pager.refresh();
}

function transferRow(ctx, t, selfId) {
  const dr = u128(t.debitAccountId, t.debitAccountIdHi);
  const cr = u128(t.creditAccountId, t.creditAccountIdHi);
  const other = dr === selfId ? cr : dr;
  return el('tr', {},
    cell(whenNs(t.timestamp)),
    cell(el('code', {class: 'id'}, String(u128(t.id, t.idHi)))),
    cell(dr === selfId ? 'debit' : 'credit'),
    el('td', {class: 'num'}, sum(u128(t.amount, t.amountHi), t.ledger)),
    cell(pageLink(ctx, 'ledger-account', {id: String(other)}, el('code', {class: 'id'}, String(other)))),
    cell(String(t.code)),
    cell(String(t.flags || 0)));
}

export async function ledgerAccountPage(root, ctx) {
  const status = new Status();
  const head = el('div', {id: 'account-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'ledger', null, '← The ledger')), status.node, head);
  let id;
  let a;
  try {
    id = BigInt(param('id') || '0');
    const h = halves(id);
    a = ((await ledger('LookupAccounts', {ids: [h.lo], idsHi: [h.hi]})).accounts || [])[0];
  } catch (err) {
    status.error(err instanceof SyntaxError ? new Error('The account id is a decimal number.') : err);
    replace(head);
    return;
  }
  if (!a) {
    status.error(new Error(`No account ${id} in this tenant.`));
    replace(head);
    return;
  }
  const h = halves(id);
  const dp = bal(a, 'debitsPosted');
  const cp = bal(a, 'creditsPosted');
  replace(head, el('div', {class: 'card'}, facts('Account', [
    ['Id', el('code', {class: 'id'}, String(id))],
    ['What', el('span', {}, ...accountName(ctx, a))],
    ['Ledger', `${a.ledger}${currencyOf(a.ledger) ? ` (${currencyOf(a.ledger)})` : ''}`],
    ['Debits posted', sum(dp, a.ledger)], ['Credits posted', sum(cp, a.ledger)],
    ['Balance (debits − credits)', el('strong', {id: 'account-balance'}, sum(dp - cp, a.ledger))],
    ['Debits pending', sum(bal(a, 'debitsPending'), a.ledger)], ['Credits pending', sum(bal(a, 'creditsPending'), a.ledger)],
    ['Flags', String(a.flags || 0)], ['Created', whenNs(a.timestamp)],
  ])));
  const list = el('div', {id: 'account-transfers'}, el('p', {class: 'loading'}, 'Loading…'));
  const pager = new Pager('Transfer pages', async (token) => {
    list.setAttribute('aria-busy', 'true');
    try {
      // Newest first (flags 1|2|4); the next page ends just before the last one shown.
      const r = await ledger('GetAccountTransfers', {accountId: h.lo, accountIdHi: h.hi, limit: PAGE_SIZE, flags: 7,
        timestampMax: token || '0'});
      const ts = r.transfers || [];
      replace(list, ts.length === 0 ? el('p', {}, 'No transfers.')
        : table('Transfers of this account, newest first', ['When', 'Transfer', 'Side', 'Amount', 'Other account', 'Code', 'Flags'],
          ts.map((t) => transferRow(ctx, t, id))));
      if (ts.length < PAGE_SIZE) return '';
      return String(BigInt(ts[ts.length - 1].timestamp) - 1n);
    } catch (err) {
      status.error(err);
      replace(list);
      return '';
    } finally {
      list.removeAttribute('aria-busy');
    }
  });
  root.append(el('section', {'aria-labelledby': 'at-h'}, el('h2', {id: 'at-h'}, 'Transfers'), list, pager.node));
  const loads = [pager.refresh()];
  if ((a.flags || 0) & 8) {
    const hist = el('div', {id: 'account-history'});
    root.append(el('section', {'aria-labelledby': 'ab-h'}, el('h2', {id: 'ab-h'}, 'Balance after each transfer (newest 25)'), hist));
    loads.push(ledger('GetAccountBalances', {accountId: h.lo, accountIdHi: h.hi, limit: PAGE_SIZE, flags: 7}).then((r) => {
      const rows = (r.balances || []).map((b) => el('tr', {}, cell(whenNs(b.timestamp)),
        el('td', {class: 'num'}, sum(bal(b, 'debitsPosted'), a.ledger)), el('td', {class: 'num'}, sum(bal(b, 'creditsPosted'), a.ledger))));
      replace(hist, rows.length === 0 ? el('p', {}, 'No balances yet.') : table('Balances, newest first', ['After', 'Debits posted', 'Credits posted'], rows));
    }, (err) => status.error(err)));
  }
  await Promise.all(loads);
}
