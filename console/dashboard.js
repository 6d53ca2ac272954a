// The tenant at a glance: AdminSummaryService/GetSummary. Counts are drawn
// as labelled bars (the number is always written beside its bar, so
// nothing depends on colour or on seeing the bar at all).
//
// The billing charts are SVG (charts.js). Billing keeps no history of its
// figures, so the charts over time are computed here from the newest
// invoices (ListInvoices, newest first) of the last MONTHS months, reading
// at most INVOICE_PAGES pages of 200; the page says so, and says when the
// bound cut the window short.
import {billing, summary} from './api.js';
import {count, el, money, replace, Status, when} from './dom.js';
import {barChart, timeChart} from './charts.js';

const MONTHS = 6;
const INVOICE_PAGES = 5;
const INVOICE_PAGE_SIZE = 200;

function bars(caption, entries) {
  const max = Math.max(1, ...entries.map(([, v]) => Number(v || 0)));
  const rows = entries.map(([label, v]) => {
    const n = Number(v || 0);
    const bar = el('span', {class: 'bar', 'aria-hidden': 'true'});
    bar.style.width = `${Math.round((n / max) * 100)}%`;
    return el('tr', {},
      el('th', {scope: 'row'}, label),
      el('td', {class: 'num'}, count(n)),
      el('td', {class: 'bar-cell'}, bar));
  });
  return el('table', {class: 'bars'},
    el('caption', {}, caption),
    el('thead', {}, el('tr', {}, el('th', {scope: 'col'}, 'What'), el('th', {scope: 'col'}, 'Count'),
      el('th', {scope: 'col'}, el('span', {class: 'visually-hidden'}, 'Share')))),
    el('tbody', {}, rows));
}

function tile(label, value, id) {
  return el('div', {class: 'tile', id},
    el('span', {class: 'tile-value'}, value),
    el('span', {class: 'tile-label'}, label));
}

function amounts(list) {
  if (!list || list.length === 0) return '—';
  return list.map((m) => money(m.amount, m.currency)).join(', ');
}

function billingSection(b) {
  const state = (b && b.state) || 'unavailable';
  const section = el('section', {'aria-labelledby': 'billing-h'}, el('h2', {id: 'billing-h'}, 'Billing'));
  if (state === 'not_permitted') {
    section.append(el('p', {}, 'Billing figures are shown to owners and admins.'));
    return section;
  }
  if (state !== 'ok') {
    section.append(el('p', {role: 'status'}, 'Billing figures are unavailable right now; the rest is current.'));
    return section;
  }
  const s = b.subscriptions || {};
  section.append(
    el('div', {class: 'tiles'},
      tile('Monthly recurring revenue', amounts(b.mrr), 'tile-mrr'),
      tile('Open invoices', count(b.invoicesOpen), 'tile-invoices-open'),
      tile('Left to pay', amounts(b.openAmount), 'tile-open-amount'),
      tile('Past due', amounts(b.pastDueAmount), 'tile-past-due')),
    barChart('Subscriptions by state', [
      ['Active', s.active], ['Trialing', s.trialing], ['Past due', s.pastDue],
      ['Paused', s.paused], ['Canceled', s.canceled]], {id: 'chart-subscriptions'}),
    el('div', {id: 'billing-history'}, el('p', {class: 'loading'}, 'Loading the invoices of the last months…')));
  return section;
}

function monthKey(ms) {
  const d = new Date(Number(ms));
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}`;
}

function lastMonths(now) {
  const out = [];
  const d = new Date(now.getFullYear(), now.getMonth(), 1);
  for (let i = MONTHS - 1; i >= 0; i -= 1) {
    const m = new Date(d.getFullYear(), d.getMonth() - i, 1);
    out.push({key: monthKey(m.getTime()), label: m.toLocaleString(undefined, {month: 'short', year: '2-digit'}), start: m.getTime()});
  }
  return out;
}

// The newest invoices back to the first of the months shown, bounded.
async function recentInvoices(since) {
  const out = [];
  let token = '';
  for (let page = 0; page < INVOICE_PAGES; page += 1) {
    const r = await billing('ListInvoices', {pageSize: INVOICE_PAGE_SIZE, pageToken: token});
    const invs = r.invoices || [];
    for (const inv of invs) {
      if (Number(inv.createdAtUnixMs || 0) < since) return {invoices: out, complete: true};
      out.push(inv);
    }
    token = r.nextPageToken || '';
    if (!token) return {invoices: out, complete: true};
  }
  return {invoices: out, complete: false};
}

async function billingHistory(node) {
  const months = lastMonths(new Date());
  let got;
  try {
    got = await recentInvoices(months[0].start);
  } catch (err) {
    replace(node, el('p', {role: 'status'}, `The invoices could not be read: ${err.message}`));
    return;
  }
  const finalized = got.invoices.filter((inv) => inv.state !== 'draft');
  const counts = months.map((m) => ({label: m.label,
    value: finalized.filter((inv) => monthKey(inv.createdAtUnixMs) === m.key).length}));
  // Recurring revenue: what subscriptions invoiced (creation, renewal, change), per currency.
  const recurring = finalized.filter((inv) => /^subscription_(create|cycle|update)$/.test(inv.billingReason || '') && inv.state !== 'void');
  const currencies = [...new Set(recurring.map((inv) => inv.currency))].sort().slice(0, 3);
  const charts = currencies.map((cur) => timeChart(`Recurring revenue invoiced per month, ${cur}`,
    months.map((m) => {
      const v = recurring.filter((inv) => inv.currency === cur && monthKey(inv.createdAtUnixMs) === m.key)
        .reduce((a, inv) => a + Number(inv.total || 0), 0);
      return {label: m.label, value: v, text: money(v, cur)};
    }), {id: `chart-revenue-${cur}`, line: true}));
  replace(node,
    el('h3', {}, `The last ${MONTHS} months`),
    timeChart('Invoices finalized per month', counts, {id: 'chart-invoices'}),
    ...charts,
    currencies.length === 0 ? el('p', {}, 'No subscription invoices in these months.') : null,
    el('p', {class: 'hint', id: 'billing-history-note'},
      `Computed in this page from the ${count(got.invoices.length)} newest invoices (at most ${count(INVOICE_PAGES * INVOICE_PAGE_SIZE)}): `,
      'billing keeps no history of its figures, so the monthly recurring revenue above is today\'s, and the revenue ',
      'per month is what subscription invoices billed (voided ones left out), by the month they were made.',
      got.complete ? '' : ' The bound was reached: the oldest months are incomplete.'));
}

export async function dashboardPage(root) {
  const status = new Status();
  const content = el('div', {id: 'summary'});
  const again = el('button', {type: 'button', class: 'secondary', id: 'summary-refresh'}, 'Refresh');
  root.append(el('div', {class: 'toolbar'}, again), status.node, content);
  async function load() {
    status.loading();
    content.setAttribute('aria-busy', 'true');
    try {
      const s = await summary('GetSummary', {});
      const users = s.users || {};
      const members = s.members || {};
      replace(content,
        el('section', {'aria-labelledby': 'people-h'},
          el('h2', {id: 'people-h'}, 'People and keys'),
          el('div', {class: 'tiles'},
            tile('Members', count(Number(users.active || 0) + Number(users.locked || 0)), 'tile-members'),
            tile('Pending invitations', count(s.pendingInvitations), 'tile-pending'),
            tile('Active API keys', count(s.activeApiKeys), 'tile-keys'),
            tile('Locked out', count(users.locked), 'tile-locked')),
          bars('Members by role', [
            ['Owners', members.owner], ['Admins', members.admin],
            ['Members', members.member], ['Viewers', members.viewer]])),
        billingSection(s.billing),
        el('p', {class: 'hint'}, `Figures as of ${when(s.computedAtUnixMs)}.`));
      status.clear();
      const history = document.getElementById('billing-history');
      if (history) await billingHistory(history);
    } catch (err) {
      status.error(err);
    } finally {
      content.removeAttribute('aria-busy');
    }
  }
  again.addEventListener('click', load);
  await load();
}
