// Pieces the billing pages share: rows of subscriptions and invoices, the
// lists of them a page embeds (all, one customer's, one subscription's),
// and how states and amounts are written.
import {billing} from './api.js';
import {cell, el, field, money, pageLink, pagedTable, when} from './dom.js';

export const PAGE_SIZE = 20;
export const CURRENCIES = ['USD', 'EUR', 'GBP', 'JPY', 'CHF', 'CAD', 'AUD'];
export const SUBSCRIPTION_STATES = ['trialing', 'active', 'past_due', 'paused', 'canceled'];
export const INVOICE_STATES = ['draft', 'open', 'paid', 'void', 'uncollectible'];
export const UNITS = [['INTERVAL_UNIT_MONTH', 'month'], ['INTERVAL_UNIT_YEAR', 'year'], ['INTERVAL_UNIT_WEEK', 'week'], ['INTERVAL_UNIT_DAY', 'day']];

// A plan's interval in words: "every month", "every 3 months".
export function every(p) {
  const unit = (UNITS.find(([u]) => u === p.intervalUnit) || ['', '?'])[1];
  const n = p.intervalCount || 1;
  return n === 1 ? `every ${unit}` : `every ${n} ${unit}s`;
}

// A state as a word in a bordered badge: the word carries the meaning, the
// colour only repeats it.
export function stateBadge(state) {
  return el('span', {class: `state state-${String(state || 'unknown').replace(/[^a-z_]/g, '')}`}, (state || '—').replace('_', ' '));
}

function num(text) {
  return el('td', {class: 'num'}, text);
}

export function amount(v, currency) {
  if (!currency) return String(v || 0);
  try {
    return money(v, currency);
  } catch (err) {
    return `${Number(v || 0)} ${currency}`; // a code Intl does not know
  }
}

export function subscriptionRow(ctx, s) {
  return el('tr', {dataset: {subscriptionId: s.id}},
    cell(pageLink(ctx, 'subscription', {id: s.id}, `${s.planCode} v${s.planVersion || 1}`)),
    cell(stateBadge(s.state), s.cancelAtPeriodEnd ? el('span', {class: 'hint'}, ' (cancels at period end)') : null),
    cell(pageLink(ctx, 'customer', {id: s.customerId}, el('code', {}, s.customerId.slice(0, 8)))),
    cell(String(s.quantity || 1)),
    cell(`${when(s.currentPeriodStartUnixMs)} – ${when(s.currentPeriodEndUnixMs)}`),
    cell(when(s.createdAtUnixMs)));
}
export const SUBSCRIPTION_HEADERS = ['Plan', 'State', 'Customer', 'Quantity', 'Current period', 'Created'];

export function subscriptionList(ctx, status, {id, caption, filter = () => ({})}) {
  return pagedTable({
    id, caption, status, headers: SUBSCRIPTION_HEADERS, empty: 'No subscriptions.',
    fetchPage: async (token) => {
      const r = await billing('ListSubscriptions', {pageSize: PAGE_SIZE, pageToken: token, ...filter()});
      return {items: r.subscriptions || [], next: r.nextPageToken};
    },
    row: (s) => subscriptionRow(ctx, s),
  });
}

export function invoiceRow(ctx, inv) {
  return el('tr', {dataset: {invoiceId: inv.id}},
    cell(pageLink(ctx, 'invoice', {id: inv.id}, inv.number || 'Draft')),
    cell(stateBadge(inv.state)),
    cell((inv.billingReason || '').replace(/_/g, ' ')),
    num(amount(inv.total, inv.currency)),
    num(amount(inv.amountRemaining, inv.currency)),
    cell(pageLink(ctx, 'customer', {id: inv.customerId}, el('code', {}, inv.customerId.slice(0, 8)))),
    cell(when(inv.createdAtUnixMs)));
}
export const INVOICE_HEADERS = ['Number', 'State', 'Reason', 'Total', 'Left to pay', 'Customer', 'Created'];

export function invoiceList(ctx, status, {id, caption, filter = () => ({})}) {
  return pagedTable({
    id, caption, status, headers: INVOICE_HEADERS, empty: 'No invoices.',
    fetchPage: async (token) => {
      const r = await billing('ListInvoices', {pageSize: PAGE_SIZE, pageToken: token, ...filter()});
      return {items: r.invoices || [], next: r.nextPageToken};
    },
    row: (inv) => invoiceRow(ctx, inv),
  });
}

export function creditNoteRow(ctx, n, currency) {
  return el('tr', {},
    cell(n.number || '—'),
    cell(pageLink(ctx, 'invoice', {id: n.invoiceId}, el('code', {}, n.invoiceId.slice(0, 8)))),
    num(currency ? amount(n.amount, currency) : String(n.amount || 0)),
    cell((n.creditedTo || '').replace(/_/g, ' ')),
    cell(n.reason || '—'),
    cell(when(n.createdAtUnixMs)));
}
export const CREDIT_NOTE_HEADERS = ['Number', 'Invoice', 'Amount', 'Credited to', 'Reason', 'Created'];

const LINES_MAX = 20; // lines one form adds at once (the API takes 100)

// Manual lines (CreateInvoice, AddInvoiceLines): description, quantity, unit
// amount in minor units, and whether the line bears tax; more on demand.
export function manualLines(prefix, currency) {
  const box = el('div', {class: 'lines', id: `${prefix}-lines`});
  const add = el('button', {type: 'button', class: 'secondary', id: `${prefix}-add-line`}, 'Another line');
  let n = 0;
  const rows = [];
  function addRow() {
    n += 1;
    const desc = el('input', {id: `${prefix}-line-${n}-desc`, type: 'text', required: true, maxlength: '500', autocomplete: 'off'});
    const qty = el('input', {id: `${prefix}-line-${n}-qty`, type: 'number', min: '1', max: '1000000', step: '1', value: '1', inputmode: 'numeric'});
    const unit = el('input', {id: `${prefix}-line-${n}-unit`, type: 'number', required: true, step: '1', inputmode: 'numeric'});
    const exempt = el('input', {id: `${prefix}-line-${n}-exempt`, type: 'checkbox'});
    rows.push({desc, qty, unit, exempt});
    box.append(el('fieldset', {class: 'line'}, el('legend', {}, `Line ${n}`),
      field('Description', desc), field('Quantity', qty),
      field('Unit amount in minor units', unit, `May be negative (a discount). 1999 is ${amount(1999, currency)}.`),
      el('div', {class: 'check'}, exempt, el('label', {for: exempt.id}, 'No tax on this line'))));
    add.disabled = rows.length >= LINES_MAX;
    return desc;
  }
  add.addEventListener('click', () => addRow().focus());
  addRow();
  const values = () => rows.map((r) => ({description: r.desc.value.trim(), quantity: String(r.qty.value || 1),
    unitAmount: String(r.unit.value || 0), taxExempt: r.exempt.checked}));
  return {node: el('div', {}, box, el('div', {class: 'actions'}, add)), values};
}
