// Subscriptions: every one (by state), and one with its history and its
// invoices. Only the moves the state table allows from its state are
// offered, and only to billing.manage (docs/api.md, "Subscriptions"). A
// change of plan or quantity is previewed first (PreviewChange: the exact
// lines it would make now) and made only on a confirmation of that preview.
import {billing} from './api.js';
import {announce, cell, confirmButton, el, facts, field, pageLink, pagedTable, param, replace, select, Status, table, when} from './dom.js';
import {amount, every, invoiceList, PAGE_SIZE, stateBadge, SUBSCRIPTION_STATES, subscriptionList} from './billing-ui.js';

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

const PRORATIONS = [['create_prorations', 'Prorate onto the next invoice'], ['always_invoice', 'Prorate and invoice now'],
  ['none', 'No proration']];

function previewTable(p) {
  const cur = p.currency;
  const rows = (p.lines || []).map((l) => el('tr', {},
    cell(l.description || ''), cell(String(l.quantity || 0)), el('td', {class: 'num'}, amount(l.unitAmount, cur)),
    el('td', {class: 'num'}, amount(l.amount, cur)), el('td', {class: 'num'}, amount(l.tax, cur)),
    cell(l.periodStartUnixMs ? `${when(l.periodStartUnixMs)} – ${when(l.periodEndUnixMs)}` : '—')));
  return el('div', {},
    rows.length === 0 ? el('p', {}, 'The change makes no lines (no proration, or in a trial).')
      : table('Lines the change would make now', ['Description', 'Quantity', 'Unit', 'Amount', 'Tax', 'Period'], rows),
    facts('Totals of the change', [['Subtotal', amount(p.subtotal, cur)], ['Tax', amount(p.tax, cur)],
      ['Total', amount(p.total, cur)], ['Prorated from', when(p.prorationTimeUnixMs)]]));
}

// ChangeSubscription, confirmed on its preview: the plans of the
// subscription's currency (ChangeSubscription takes no other), each with its
// interval (another one starts a new cycle, invoiced at once), the quantity,
// how to prorate. Editing any of them drops the preview.
async function changeForm(ctx, s, status) {
  const r = await billing('ListPlans', {pageSize: 200});
  const plans = (r.plans || []).filter((p) => !p.archived && p.currency === s.currency);
  const plan = select([['', `Keep ${s.planCode} v${s.planVersion || 1}`],
    ...plans.map((p) => [p.code, `${p.name || p.code} (${p.code} v${p.version}, ${every(p)})`])], '', {id: 'change-plan'});
  const quantity = el('input', {id: 'change-quantity', type: 'number', min: '1', max: '1000000', step: '1',
    value: String(s.quantity || 1), inputmode: 'numeric'});
  const proration = select(PRORATIONS, 'create_prorations', {id: 'change-proration'});
  const preview = el('button', {type: 'submit', id: 'change-preview-submit'}, 'Preview the change');
  const shown = el('div', {id: 'change-preview', 'aria-live': 'polite'});
  const form = el('form', {class: 'card', 'aria-labelledby': 'change-h'},
    el('h2', {id: 'change-h'}, 'Change plan or quantity'),
    field('Plan', plan, `Plans in ${s.currency}. One billed on another interval starts a new billing cycle now, invoiced at once.`),
    field('Quantity', quantity, 'Per-unit plans only; 1 for the others.'),
    field('Proration', proration),
    el('div', {class: 'actions'}, preview), shown);
  const request = () => {
    const body = {id: s.id, prorationBehavior: proration.value};
    if (plan.value) body.planCode = plan.value;
    if (String(quantity.value) !== String(s.quantity || 1)) body.quantity = String(quantity.value || 1);
    return body;
  };
  for (const input of [plan, quantity, proration]) input.addEventListener('input', () => replace(shown));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = request();
    preview.disabled = true;
    status.loading('Previewing…');
    try {
      const p = await billing('PreviewChange', body);
      status.clear();
      const confirm = el('button', {type: 'button', id: 'change-confirm'}, 'Make this change');
      confirm.addEventListener('click', async () => {
        confirm.disabled = true;
        status.loading('Changing…');
        try {
          const c = await billing('ChangeSubscription', body);
          const inv = c.invoice ? `; invoiced as ${c.invoice.number} (${c.invoice.state})` : '';
          await ctx.navigate('subscription', {replaceState: true, params: {id: s.id}});
          announce(`Changed to ${c.subscription.planCode} v${c.subscription.planVersion}, quantity ${c.subscription.quantity || 1}${inv}.`);
        } catch (err) {
          status.error(err);
          confirm.disabled = false;
        }
      });
      replace(shown, el('h3', {}, 'Preview'), previewTable(p), el('div', {class: 'actions'}, confirm));
    } catch (err) {
      status.error(err);
      replace(shown);
    } finally {
      preview.disabled = false;
    }
  });
  return form;
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
          await ctx.navigate('subscription', {replaceState: true, params: {id: s.id}});
          announce(`The subscription is ${r.subscription.state}${r.subscription.cancelAtPeriodEnd ? ', canceled at its period\'s end' : ''}.`);
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
  if (ctx.may('subscription.change') && ['trialing', 'active', 'past_due'].includes(s.state)) {
    try {
      root.append(await changeForm(ctx, s, status));
    } catch (err) {
      status.error(err);
    }
  }
  const history = historyList(status, s.id);
  const invs = invoiceList(ctx, status, {id: 'subscription-invoices', caption: 'Invoices of this subscription',
    filter: () => ({subscriptionId: s.id})});
  root.append(
    el('section', {'aria-labelledby': 'sh-h'}, el('h2', {id: 'sh-h'}, 'History'), history.node),
    el('section', {'aria-labelledby': 'si-h'}, el('h2', {id: 'si-h'}, 'Invoices'), invs.node));
  await Promise.all([history.pager.refresh(), invs.pager.refresh()]);
}
