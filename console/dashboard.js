// The tenant at a glance: AdminSummaryService/GetSummary. Counts are drawn
// as labelled bars (the number is always written beside its bar, so
// nothing depends on colour or on seeing the bar at all).
import {summary} from './api.js';
import {count, el, money, replace, Status, when} from './dom.js';

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
    bars('Subscriptions by state', [
      ['Active', s.active], ['Trialing', s.trialing], ['Past due', s.pastDue],
      ['Paused', s.paused], ['Canceled', s.canceled]]));
  return section;
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
    } catch (err) {
      status.error(err);
    } finally {
      content.removeAttribute('aria-busy');
    }
  }
  again.addEventListener('click', load);
  await load();
}
