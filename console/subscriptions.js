// Subscriptions: every one (by state), and one with its history and its
// invoices. Only the moves the state table allows from its state are
// offered, and only to billing.manage (docs/api.md, "Subscriptions").
import {billing} from './api.js';
import {cell, confirmButton, el, facts, pageLink, pagedTable, param, replace, select, Status, when} from './dom.js';
import {invoiceList, PAGE_SIZE, stateBadge, SUBSCRIPTION_STATES, subscriptionList} from './billing-ui.js';

export async function subscriptionsPage(root, ctx) {
  const status = new Status();
  const state = select([['', 'Every state'], ...SUBSCRIPTION_STATES.map((s) => [s, s.replace('_', ' ')])], '', {id: 'subscriptions-state'});
  const list = subscriptionList(ctx, status, {id: 'subscriptions-list', caption: 'Subscriptions, newest first',
    filter: () => ({state: state.value})});
  state.addEventListener('change', () => {
    list.pager.reset();
    list.pager.refresh();
  });
  root.append(
    el('p', {class: 'hint'}, 'A subscription is made on its customer\'s page.'),
    el('div', {class: 'toolbar'}, el('label', {for: 'subscriptions-state'}, 'State'), state),
    status.node, list.node);
  await list.pager.refresh();
}

// The moves a state allows (services/billing/states.c, as docs/api.md
// lists them), as [label, confirm label, method, request body].
function moves(s) {
  const out = [];
  if (s.state === 'active') out.push(['Pause', 'Pause now', 'PauseSubscription', {id: s.id}]);
  if (s.state === 'paused') out.push(['Resume', 'Resume now', 'ResumeSubscription', {id: s.id}]);
  if (s.state !== 'canceled') {
    if (s.cancelAtPeriodEnd) {
      out.push(['Keep after the period', 'Withdraw the cancellation', 'CancelSubscription', {id: s.id, withdraw: true}]);
    } else {
      out.push(['Cancel at period end', 'Cancel at the period\'s end', 'CancelSubscription', {id: s.id, atPeriodEnd: true}]);
    }
    out.push(['Cancel now', 'Cancel now, for good', 'CancelSubscription', {id: s.id, atPeriodEnd: false}]);
  }
  return out;
}

function historyList(status, id) {
  return pagedTable({
    id: 'subscription-history', caption: 'State history, oldest first', status,
    headers: ['#', 'When', 'Event', 'From', 'To', 'Detail'], empty: 'No history.',
    fetchPage: async (token) => {
      const r = await billing('ListSubscriptionHistory', {id, pageSize: PAGE_SIZE, pageToken: token});
      return {items: r.entries || [], next: r.nextPageToken};
    },
    row: (e) => el('tr', {},
      cell(String(e.seq)), cell(when(e.atUnixMs)), cell(e.event.replace(/_/g, ' ')),
      cell(e.fromState ? stateBadge(e.fromState) : '—'), cell(stateBadge(e.toState)), cell(e.detail || '—')),
  });
}

export async function subscriptionPage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'subscription-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'subscriptions', null, '← All subscriptions')), status.node, head);
  let s;
  try {
    s = (await billing('GetSubscription', {id})).subscription;
  } catch (err) {
    status.error(err);
    replace(head);
    return;
  }
  const heading = document.getElementById('page-title');
  if (heading) replace(heading, `Subscription to ${s.planCode}`);
  const actions = el('div', {class: 'actions', id: 'subscription-actions'});
  if (ctx.may('subscription.move')) {
    for (const [label, confirmLabel, method, body] of moves(s)) {
      actions.append(confirmButton(label, confirmLabel, async () => {
        status.loading('Working…');
        try {
          const r = await billing(method, body);
          status.ok(`The subscription is ${r.subscription.state}${r.subscription.cancelAtPeriodEnd ? ', canceled at its period\'s end' : ''}.`);
          await ctx.navigate('subscription', {replaceState: true, params: {id: s.id}});
        } catch (err) {
          status.error(err);
        }
      }));
    }
  }
  replace(head, el('div', {class: 'card'},
    facts('Subscription', [
      ['State', stateBadge(s.state)],
      ['Plan', `${s.planCode} v${s.planVersion || 1}`],
      ['Customer', pageLink(ctx, 'customer', {id: s.customerId}, el('code', {}, s.customerId))],
      ['Quantity', String(s.quantity || 1)],
      ['Current period', `${when(s.currentPeriodStartUnixMs)} – ${when(s.currentPeriodEndUnixMs)}`],
      ['Trial ends', when(s.trialEndUnixMs)],
      ['Cancels at period end', s.cancelAtPeriodEnd ? 'yes' : 'no'],
      ['Canceled', when(s.canceledAtUnixMs)],
      ['Paused', when(s.pausedAtUnixMs)],
      ['Latest invoice', s.latestInvoiceId ? pageLink(ctx, 'invoice', {id: s.latestInvoiceId}, 'open it') : ''],
      ['Created', when(s.createdAtUnixMs)], ['Id', el('code', {}, s.id)],
    ]), actions));
  const history = historyList(status, s.id);
  const invs = invoiceList(ctx, status, {id: 'subscription-invoices', caption: 'Invoices of this subscription',
    filter: () => ({subscriptionId: s.id})});
  root.append(
    el('section', {'aria-labelledby': 'sh-h'}, el('h2', {id: 'sh-h'}, 'History'), history.node),
    el('section', {'aria-labelledby': 'si-h'}, el('h2', {id: 'si-h'}, 'Invoices'), invs.node));
  await Promise.all([history.pager.refresh(), invs.pager.refresh()]);
}
