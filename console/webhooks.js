// Webhooks both ways: intake endpoints (a provider's events coming in) with
// the events each received, re-applied on demand; and outbound
// subscriptions (keelson's events going out) with their deliveries, each
// with its attempts, redelivered on demand. Writes need webhooks.manage.
import {webhook} from './api.js';
import {cell, confirmButton, el, facts, field, pageLink, pagedTable, param, replace, select, Status, table, when} from './dom.js';
import {stateBadge} from './billing-ui.js';

const PAGE_SIZE = 20;
const TOPICS = ['billing.invoice_finalized', 'billing.invoice_paid', 'billing.subscription_changed', 'billing.credit_note_created'];
const PROVIDERS = [['PROVIDER_STRIPE', 'Stripe'], ['PROVIDER_STANDARD', 'Standard Webhooks']];
const RECEIVED = ['PENDING', 'APPLIED', 'IGNORED', 'FAILED'];
const DELIVERY = ['PENDING', 'DELIVERED', 'FAILED'];

// RECEIVED_STATUS_APPLIED -> "applied"
function word(enumName) {
  return String(enumName || '').replace(/^(RECEIVED_STATUS|DELIVERY_STATUS|PROVIDER)_/, '').toLowerCase();
}

function endpointForm(status, onCreated) {
  const provider = select(PROVIDERS, 'PROVIDER_STRIPE', {id: 'endpoint-provider'});
  const secret = el('input', {id: 'endpoint-secret', type: 'password', required: true, autocomplete: 'off', spellcheck: 'false'});
  const description = el('input', {id: 'endpoint-description', type: 'text', maxlength: '200', autocomplete: 'off'});
  const submit = el('button', {type: 'submit', id: 'endpoint-submit'}, 'Create endpoint');
  const form = el('form', {class: 'card', 'aria-labelledby': 'endpoint-create-h'},
    el('h3', {id: 'endpoint-create-h'}, 'New intake endpoint'),
    field('Provider', provider),
    field('Signing secret', secret, 'The one the provider gave you (whsec_…); it is never shown again.'),
    field('Description (optional)', description),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Creating…');
    try {
      const r = await webhook('CreateIntakeEndpoint', {provider: provider.value, secret: secret.value, description: description.value.trim()});
      secret.value = '';
      description.value = '';
      status.ok(`The endpoint was created: point the provider at ${window.location.origin}${r.endpoint.path}`);
      await onCreated();
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

// The new subscription's signing secret, once, as keys.js shows a new key.
function secretOnce(secret) {
  const input = el('input', {id: 'new-secret', type: 'text', readonly: true, value: secret, spellcheck: 'false', autocomplete: 'off'});
  const done = el('button', {type: 'button', class: 'secondary', id: 'dismiss-secret'}, 'I have stored it');
  const panel = el('div', {class: 'card notice', role: 'region', 'aria-labelledby': 'secret-once-h'},
    el('h3', {id: 'secret-once-h'}, 'Signing secret'),
    el('p', {}, 'Shown this once: give it to the receiver, which verifies each request with it.'),
    field('Secret', input), el('div', {class: 'actions'}, done));
  done.addEventListener('click', () => {
    input.value = '';
    panel.remove();
  });
  return panel;
}

function subscriptionForm(status, slot, onCreated) {
  const url = el('input', {id: 'sub-url', type: 'url', required: true, maxlength: '2048', autocomplete: 'off', spellcheck: 'false'});
  const boxes = TOPICS.map((t, i) => {
    const box = el('input', {type: 'checkbox', id: `sub-topic-${i}`, value: t, checked: true});
    return el('div', {class: 'check'}, box, el('label', {for: box.id}, t));
  });
  const description = el('input', {id: 'sub-description', type: 'text', maxlength: '200', autocomplete: 'off'});
  const submit = el('button', {type: 'submit', id: 'sub-submit'}, 'Subscribe');
  const form = el('form', {class: 'card', 'aria-labelledby': 'sub-create-h'},
    el('h3', {id: 'sub-create-h'}, 'New webhook subscription'),
    field('URL', url, 'http:// or https://; keelson POSTs each event there, signed.'),
    el('fieldset', {}, el('legend', {}, 'Topics'), boxes),
    field('Description (optional)', description),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const topics = boxes.map((b) => b.querySelector('input')).filter((b) => b.checked).map((b) => b.value);
    submit.disabled = true;
    status.loading('Subscribing…');
    try {
      const r = await webhook('CreateWebhookSubscription', {url: url.value.trim(), topics, description: description.value.trim()});
      url.value = '';
      description.value = '';
      replace(slot, secretOnce(r.secret));
      status.ok('The subscription was created.');
      await onCreated();
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export async function webhooksPage(root, ctx) {
  const status = new Status();
  const manage = ctx.may('webhook.manage');
  const endpoints = pagedTable({
    id: 'endpoints-list', caption: 'Intake endpoints, newest first', status,
    headers: ['Endpoint', 'Provider', 'Enabled', 'Path', 'Created'], empty: 'No intake endpoints.',
    fetchPage: async (token) => {
      const r = await webhook('ListIntakeEndpoints', {pageSize: PAGE_SIZE, pageToken: token});
      return {items: r.endpoints || [], next: r.nextPageToken};
    },
    row: (e) => el('tr', {},
      cell(pageLink(ctx, 'webhook-endpoint', {id: e.id}, e.description || e.id.slice(0, 8))),
      cell(word(e.provider)), cell(e.enabled ? 'yes' : 'no'), cell(el('code', {}, e.path || '')), cell(when(e.createdAtUnixMs))),
  });
  const subs = pagedTable({
    id: 'webhook-subscriptions-list', caption: 'Webhook subscriptions, newest first', status,
    headers: ['Subscription', 'URL', 'Topics', 'Enabled', 'Failing since', 'Created'], empty: 'No webhook subscriptions.',
    fetchPage: async (token) => {
      const r = await webhook('ListWebhookSubscriptions', {pageSize: PAGE_SIZE, pageToken: token});
      return {items: r.subscriptions || [], next: r.nextPageToken};
    },
    row: (s) => el('tr', {},
      cell(pageLink(ctx, 'webhook-subscription', {id: s.id}, s.description || s.id.slice(0, 8))),
      cell(el('code', {}, s.url)), cell((s.topics || []).join(', ')),
      cell(s.enabled ? 'yes' : `no (${s.disabledReason || 'disabled'})`), cell(when(s.failingSinceUnixMs)), cell(when(s.createdAtUnixMs))),
  });
  const reload = (list) => () => {
    list.pager.reset();
    return list.pager.refresh();
  };
  const secretSlot = el('div', {id: 'secret-once-slot'});
  root.append(status.node,
    el('section', {'aria-labelledby': 'wh-in-h'}, el('h2', {id: 'wh-in-h'}, 'Incoming: intake endpoints'),
      manage ? endpointForm(status, reload(endpoints)) : null, endpoints.node),
    el('section', {'aria-labelledby': 'wh-out-h'}, el('h2', {id: 'wh-out-h'}, 'Outgoing: subscriptions'),
      manage ? subscriptionForm(status, secretSlot, reload(subs)) : null, secretSlot, subs.node));
  await Promise.all([endpoints.pager.refresh(), subs.pager.refresh()]);
}

function statusFilter(id, names, prefix) {
  return select([['', 'Every status'], ...names.map((n) => [`${prefix}_${n}`, n.toLowerCase()])], '', {id});
}

function secretsTable(secrets) {
  if (!secrets || secrets.length === 0) return el('p', {}, 'No active secret.');
  return table('Active secrets, newest first', ['Ends in', 'Created', 'Expires'],
    secrets.map((s) => el('tr', {}, cell(el('code', {}, `…${s.hint}`)), cell(when(s.createdAtUnixMs)), cell(s.expiresAtUnixMs ? when(s.expiresAtUnixMs) : 'when rotated'))));
}

export async function webhookEndpointPage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'endpoint-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'webhooks', null, '← Webhooks')), status.node, head);
  let e;
  try {
    e = (await webhook('GetIntakeEndpoint', {id})).endpoint;
  } catch (err) {
    status.error(err);
    replace(head);
    return;
  }
  replace(head, el('div', {class: 'card'}, facts('Intake endpoint', [
    ['Provider', word(e.provider)], ['Description', e.description || ''],
    ['URL for the provider', el('code', {}, `${window.location.origin}${e.path}`)],
    ['Enabled', e.enabled ? 'yes' : 'no'], ['Timestamp tolerance', `${e.toleranceS || 300} s`],
    ['Created', when(e.createdAtUnixMs)], ['Id', el('code', {}, e.id)],
  ]), secretsTable(e.secrets)));
  const filter = statusFilter('received-status', RECEIVED, 'RECEIVED_STATUS');
  const manage = ctx.may('webhook.manage');
  const events = pagedTable({
    id: 'received-list', caption: 'Events received, newest first', status,
    headers: ['Received', 'Event', 'Type', 'Status', 'Attempts', 'Last error', 'Actions'], empty: 'No events received.',
    fetchPage: async (token) => {
      const body = {pageSize: PAGE_SIZE, pageToken: token, endpointId: e.id};
      if (filter.value) body.status = filter.value;
      const r = await webhook('ListReceivedEvents', body);
      return {items: r.events || [], next: r.nextPageToken};
    },
    row: (ev) => {
      const actions = el('td', {class: 'actions-cell'});
      if (manage) {
        actions.append(confirmButton('Re-apply', `Re-apply ${ev.providerEventId}`, async () => {
          status.loading('Re-applying…');
          try {
            const r = await webhook('ReapplyReceivedEvent', {id: ev.id});
            status.ok(`The event ${r.event.providerEventId} is ${word(r.event.status)} again.`);
            await events.pager.refresh();
          } catch (err) {
            status.error(err);
          }
        }, {'aria-label': `Re-apply ${ev.providerEventId}`}));
      }
      return el('tr', {dataset: {eventId: ev.id}},
        cell(when(ev.receivedAtUnixMs)), cell(el('code', {}, ev.providerEventId)), cell(ev.type || '—'),
        cell(stateBadge(word(ev.status))), cell(String(ev.attempts || 0)), cell(ev.lastError || '—'), actions);
    },
  });
  filter.addEventListener('change', () => {
    events.pager.reset();
    events.pager.refresh();
  });
  root.append(el('section', {'aria-labelledby': 're-h'}, el('h2', {id: 're-h'}, 'Received events'),
    el('div', {class: 'toolbar'}, el('label', {for: 'received-status'}, 'Status'), filter), events.node));
  await events.pager.refresh();
}

function redeliverButton(d, status, after) {
  return confirmButton('Redeliver', `Redeliver ${d.topic} now`, async () => {
    status.loading('Redelivering…');
    try {
      await webhook('Redeliver', {id: d.id});
      status.ok('The delivery is pending again: it is attempted at once.');
      await after();
    } catch (err) {
      status.error(err);
    }
  }, {'aria-label': `Redeliver ${d.topic} of ${when(d.createdAtUnixMs)}`});
}

export async function webhookSubscriptionPage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'webhook-subscription-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'webhooks', null, '← Webhooks')), status.node, head);
  let s;
  try {
    s = (await webhook('GetWebhookSubscription', {id})).subscription;
  } catch (err) {
    status.error(err);
    replace(head);
    return;
  }
  const manage = ctx.may('webhook.manage');
  const actions = el('div', {class: 'actions'});
  if (manage) {
    const toggle = el('button', {type: 'button', class: 'secondary', id: 'sub-toggle'}, s.enabled ? 'Disable' : 'Enable');
    toggle.addEventListener('click', async () => {
      toggle.disabled = true;
      status.loading('Saving…');
      try {
        await webhook('UpdateWebhookSubscription', {id: s.id, updateMask: ['enabled'], enabled: !s.enabled});
        await ctx.navigate('webhook-subscription', {replaceState: true, params: {id: s.id}});
      } catch (err) {
        status.error(err);
        toggle.disabled = false;
      }
    });
    actions.append(toggle);
  }
  replace(head, el('div', {class: 'card'}, facts('Webhook subscription', [
    ['URL', el('code', {}, s.url)], ['Topics', (s.topics || []).join(', ')], ['Description', s.description || ''],
    ['Enabled', s.enabled ? 'yes' : `no (${s.disabledReason || 'disabled'})`],
    ['Failing since', when(s.failingSinceUnixMs)], ['Created', when(s.createdAtUnixMs)], ['Id', el('code', {}, s.id)],
  ]), secretsTable(s.secrets), actions));
  const filter = statusFilter('delivery-status', DELIVERY, 'DELIVERY_STATUS');
  const deliveries = pagedTable({
    id: 'deliveries-list', caption: 'Deliveries, newest first', status,
    headers: ['Created', 'Topic', 'Status', 'Attempts', 'Last HTTP status', 'Last error', 'Actions'], empty: 'No deliveries yet.',
    fetchPage: async (token) => {
      const body = {pageSize: PAGE_SIZE, pageToken: token, subscriptionId: s.id};
      if (filter.value) body.status = filter.value;
      const r = await webhook('ListDeliveries', body);
      return {items: r.deliveries || [], next: r.nextPageToken};
    },
    row: (d) => el('tr', {dataset: {deliveryId: d.id}},
      cell(pageLink(ctx, 'delivery', {id: d.id}, when(d.createdAtUnixMs))), cell(d.topic), cell(stateBadge(word(d.status))),
      cell(String(d.attempts || 0)), cell(d.lastHttpStatus ? String(d.lastHttpStatus) : '—'), cell(d.lastError || '—'),
      el('td', {class: 'actions-cell'}, manage ? redeliverButton(d, status, () => deliveries.pager.refresh()) : null)),
  });
  filter.addEventListener('change', () => {
    deliveries.pager.reset();
    deliveries.pager.refresh();
  });
  root.append(el('section', {'aria-labelledby': 'dl-h'}, el('h2', {id: 'dl-h'}, 'Deliveries'),
    el('div', {class: 'toolbar'}, el('label', {for: 'delivery-status'}, 'Status'), filter), deliveries.node));
  await deliveries.pager.refresh();
}

export async function deliveryPage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'delivery-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(status.node, head);
  let d;
  try {
    d = (await webhook('GetDelivery', {id})).delivery;
  } catch (err) {
    status.error(err);
    replace(head);
    return;
  }
  let body = '';
  try {
    body = new TextDecoder().decode(Uint8Array.from(atob(d.body || ''), (ch) => ch.charCodeAt(0)));
  } catch (err) {
    body = d.body || '';
  }
  const reload = () => ctx.navigate('delivery', {replaceState: true, params: {id}});
  const attempts = (d.attemptLog || []).map((a) => el('tr', {},
    cell(String(a.number)), cell(when(a.atUnixMs)), cell(a.outcome), cell(a.httpStatus ? String(a.httpStatus) : '—'),
    el('td', {class: 'num'}, `${Number(a.latencyMs || 0)} ms`), cell(a.detail || '—'), cell(a.responseExcerpt || '—')));
  replace(head,
    el('p', {}, pageLink(ctx, 'webhook-subscription', {id: d.subscriptionId}, '← Its subscription')),
    el('div', {class: 'card'}, facts('Delivery', [
      ['Topic', d.topic], ['Status', stateBadge(word(d.status))], ['Event (webhook-id)', el('code', {}, d.eventId)],
      ['Attempts', String(d.attempts || 0)], ['Next attempt', when(d.nextAttemptAtUnixMs)],
      ['Delivered', when(d.deliveredAtUnixMs)], ['Last error', d.lastError || ''], ['Created', when(d.createdAtUnixMs)],
    ]), ctx.may('webhook.manage') ? el('div', {class: 'actions'}, redeliverButton(d, status, reload)) : null),
    el('section', {'aria-labelledby': 'da-h'}, el('h2', {id: 'da-h'}, 'Attempts'),
      attempts.length === 0 ? el('p', {}, 'Not attempted yet.')
        : table('Attempts, oldest first', ['#', 'Ended', 'Outcome', 'HTTP', 'Latency', 'Detail', 'Response'], attempts)),
    el('section', {'aria-labelledby': 'db-h'}, el('h2', {id: 'db-h'}, 'Body'),
      el('pre', {class: 'body', tabindex: '0', 'aria-label': 'The JSON posted'}, body)));
}
