// Customers: the list (paged, by email address), a new customer
// (billing.manage), and one customer with its subscriptions and invoices;
// to billing.manage it also offers an edit of its fields (UpdateCustomer),
// a new subscription on a plan of its currency and a one-off invoice.
import {billing} from './api.js';
import {announce, cell, confirmButton, el, facts, field, pageLink, pagedTable, param, replace, select, Status, when} from './dom.js';
import {amount, CURRENCIES, invoiceList, manualLines, PAGE_SIZE, stateBadge, subscriptionList} from './billing-ui.js';

const TEST_CARDS = [['', 'None (invoices wait to be paid by hand)'], ['pm_card_visa', 'pm_card_visa (succeeds)'],
  ['pm_card_chargeDeclined', 'pm_card_chargeDeclined (declined)']];

function createForm(ctx, status, onCreated) {
  const email = el('input', {id: 'customer-email', type: 'email', required: true, maxlength: '254', autocomplete: 'off'});
  const name = el('input', {id: 'customer-name', type: 'text', maxlength: '200', autocomplete: 'off'});
  const currency = select(CURRENCIES, 'USD', {id: 'customer-currency'});
  const tax = el('input', {id: 'customer-tax', type: 'number', min: '0', max: '10000', step: '1', value: '0', inputmode: 'numeric'});
  const pm = select(TEST_CARDS, 'pm_card_visa', {id: 'customer-pm'});
  const submit = el('button', {type: 'submit', id: 'customer-submit'}, 'Create customer');
  const form = el('form', {class: 'card', 'aria-labelledby': 'customer-create-h'},
    el('h2', {id: 'customer-create-h'}, 'New customer'),
    field('Email', email),
    field('Name (optional)', name),
    field('Currency', currency, 'Fixed for good: its plans, invoices and ledger are in it.'),
    field('Tax rate (basis points)', tax, '725 is 7.25%.'),
    field('Payment method', pm, 'A payment provider token (the built-in mock provider\'s test cards); never a card number.'),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Creating…');
    try {
      const body = {email: email.value.trim(), name: name.value.trim(), currency: currency.value,
        taxRateBp: Number(tax.value || 0), defaultPaymentMethod: pm.value};
      const r = await billing('CreateCustomer', body);
      status.ok(`The customer ${r.customer.email} was created.`);
      email.value = '';
      name.value = '';
      await onCreated(r.customer);
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export async function customersPage(root, ctx) {
  const status = new Status();
  const filter = el('input', {id: 'customers-email', type: 'search', autocomplete: 'off', maxlength: '254'});
  const archived = el('input', {type: 'checkbox', id: 'customers-archived'});
  const apply = el('button', {type: 'submit', class: 'secondary'}, 'Filter');
  const filterForm = el('form', {class: 'toolbar', role: 'search', 'aria-label': 'Filter customers'},
    el('label', {for: 'customers-email'}, 'Email address'), filter, apply,
    el('span', {class: 'check'}, archived, el('label', {for: 'customers-archived'}, 'Include archived')));
  const list = pagedTable({
    id: 'customers-list', caption: 'Customers, newest first', status,
    headers: ['Name', 'Email', 'Currency', 'Credit', 'State', 'Created'],
    empty: 'No customers.',
    fetchPage: async (token) => {
      const r = await billing('ListCustomers', {pageSize: PAGE_SIZE, pageToken: token,
        email: filter.value.trim(), includeArchived: archived.checked});
      return {items: r.customers || [], next: r.nextPageToken};
    },
    row: (c) => el('tr', {dataset: {customerId: c.id}},
      cell(pageLink(ctx, 'customer', {id: c.id}, c.name || '(no name)')),
      cell(c.email), cell(c.currency), cell(amount(c.creditBalance, c.currency)),
      cell(c.archived ? 'archived' : 'active'), cell(when(c.createdAtUnixMs))),
  });
  const reload = () => {
    list.pager.reset();
    return list.pager.refresh();
  };
  filterForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    reload();
  });
  archived.addEventListener('change', reload);
  if (ctx.may('customer.create')) root.append(createForm(ctx, status, reload));
  root.append(status.node, el('section', {'aria-labelledby': 'customers-h'},
    el('h2', {id: 'customers-h'}, 'Customers'), filterForm, list.node));
  await list.pager.refresh();
}

// A new subscription for this customer: a plan of its currency by code.
async function subscribeForm(ctx, c, status, onDone) {
  const r = await billing('ListPlans', {pageSize: 200});
  const plans = (r.plans || []).filter((p) => p.currency === c.currency && !p.archived);
  const form = el('form', {class: 'card', 'aria-labelledby': 'subscribe-h'}, el('h2', {id: 'subscribe-h'}, 'New subscription'));
  if (plans.length === 0) {
    form.append(el('p', {}, `No plan in ${c.currency} yet: `, pageLink(ctx, 'plans', null, 'create one'), '.'));
    return form;
  }
  const plan = select(plans.map((p) => [p.code, `${p.name || p.code} (${p.code} v${p.version})`]), plans[0].code, {id: 'subscribe-plan'});
  const quantity = el('input', {id: 'subscribe-quantity', type: 'number', min: '1', max: '1000000', value: '1', inputmode: 'numeric'});
  const trial = select([['0', 'The plan\'s'], ['-1', 'None']], '0', {id: 'subscribe-trial'});
  const submit = el('button', {type: 'submit', id: 'subscribe-submit'}, 'Subscribe');
  form.append(field('Plan', plan), field('Quantity', quantity, 'Per-unit plans only; 1 for the others.'),
    field('Trial', trial), el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Subscribing…');
    try {
      const s = await billing('CreateSubscription', {customerId: c.id, planCode: plan.value,
        quantity: String(quantity.value || 1), trialDays: Number(trial.value)});
      status.ok(`Subscribed to ${s.subscription.planCode}: ${s.subscription.state}.`);
      await onDone(s);
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

// UpdateCustomer: the mask names the fields that differ from the stored ones.
function editForm(c, status, onDone) {
  const email = el('input', {id: 'edit-email', type: 'email', required: true, maxlength: '254', autocomplete: 'off', value: c.email});
  const name = el('input', {id: 'edit-name', type: 'text', maxlength: '200', autocomplete: 'off', value: c.name || ''});
  const tax = el('input', {id: 'edit-tax', type: 'number', min: '0', max: '10000', step: '1', inputmode: 'numeric',
    value: String(c.taxRateBp || 0)});
  const exempt = el('input', {id: 'edit-exempt', type: 'checkbox', checked: Boolean(c.taxExempt)});
  const pm = el('input', {id: 'edit-pm', type: 'text', maxlength: '255', autocomplete: 'off', spellcheck: 'false',
    value: c.defaultPaymentMethod || '', list: 'edit-pm-cards'});
  const cards = el('datalist', {id: 'edit-pm-cards'}, TEST_CARDS.filter(([v]) => v).map(([v, t]) => el('option', {value: v}, t)));
  const submit = el('button', {type: 'submit', id: 'edit-submit'}, 'Save changes');
  const form = el('form', {class: 'card', 'aria-labelledby': 'edit-h'},
    el('h2', {id: 'edit-h'}, 'Edit customer'),
    field('Email', email), field('Name', name),
    field('Tax rate (basis points)', tax, '725 is 7.25%; ignored while tax exempt.'),
    el('div', {class: 'check'}, exempt, el('label', {for: 'edit-exempt'}, 'Tax exempt')),
    field('Payment method', pm, 'A provider token; empty: invoices wait to be paid by hand.'), cards,
    el('p', {class: 'hint'}, `The currency (${c.currency}) never changes.`),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = {id: c.id, updateMask: []};
    const set = (maskName, key, value, stored) => {
      if (value === stored) return;
      body.updateMask.push(maskName);
      body[key] = value;
    };
    set('email', 'email', email.value.trim(), c.email);
    set('name', 'name', name.value.trim(), c.name || '');
    set('tax_rate_bp', 'taxRateBp', Number(tax.value || 0), Number(c.taxRateBp || 0));
    set('tax_exempt', 'taxExempt', exempt.checked, Boolean(c.taxExempt));
    set('default_payment_method', 'defaultPaymentMethod', pm.value.trim(), c.defaultPaymentMethod || '');
    if (body.updateMask.length === 0) {
      status.ok('Nothing changed.');
      return;
    }
    submit.disabled = true;
    status.loading('Saving…');
    try {
      await billing('UpdateCustomer', body);
      await onDone(`Saved: ${body.updateMask.join(', ').replace(/_/g, ' ')}.`);
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  return form;
}

// A one-off invoice: a draft with its lines, opened at once to be finalized.
function invoiceForm(ctx, c, status) {
  const desc = el('input', {id: 'oneoff-description', type: 'text', maxlength: '500', autocomplete: 'off'});
  const lines = manualLines('oneoff', c.currency);
  const submit = el('button', {type: 'submit', id: 'oneoff-submit'}, 'Create draft invoice');
  const form = el('form', {class: 'card', 'aria-labelledby': 'oneoff-h'},
    el('h2', {id: 'oneoff-h'}, 'New one-off invoice'),
    el('p', {class: 'hint'}, `A draft in ${c.currency}, taxed at the customer's rate; finalize it on its page.`),
    field('Description (optional)', desc), lines.node,
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Creating the draft…');
    try {
      const r = await billing('CreateInvoice', {customerId: c.id, description: desc.value.trim(), lines: lines.values()});
      await ctx.navigate('invoice', {params: {id: r.invoice.id}});
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  return form;
}

export async function customerPage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'customer-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'customers', null, '← All customers')), status.node, head);
  let c;
  try {
    c = (await billing('GetCustomer', {id})).customer;
  } catch (err) {
    status.error(err);
    replace(head);
    return;
  }
  const heading = document.getElementById('page-title');
  if (heading) replace(heading, `Customer ${c.name || c.email}`);
  const actions = el('div', {class: 'actions'});
  if (ctx.may('customer.archive') && !c.archived) {
    actions.append(confirmButton('Archive', `Archive ${c.email}`, async () => {
      status.loading('Archiving…');
      try {
        await billing('ArchiveCustomer', {id: c.id});
        status.ok('The customer was archived: no new subscription or invoice.');
        await ctx.navigate('customer', {replaceState: true, params: {id: c.id}});
      } catch (err) {
        status.error(err);
      }
    }));
  }
  replace(head, el('div', {class: 'card'},
    facts('Customer', [
      ['Name', c.name || ''], ['Email', c.email], ['Currency', c.currency],
      ['Tax', c.taxExempt ? 'exempt' : `${(Number(c.taxRateBp || 0) / 100).toFixed(2)}%`],
      ['Payment method', c.defaultPaymentMethod || 'none'],
      ['Credit balance', amount(c.creditBalance, c.currency)],
      ['State', stateBadge(c.archived ? 'archived' : 'active')],
      ['Created', when(c.createdAtUnixMs)], ['Id', el('code', {}, c.id)],
      ['Metadata', Object.entries(c.metadata || {}).map(([k, v]) => `${k}: ${v}`).join(', ')],
    ]), actions));
  const subs = subscriptionList(ctx, status, {id: 'customer-subscriptions', caption: 'Subscriptions of this customer', filter: () => ({customerId: c.id})});
  const invs = invoiceList(ctx, status, {id: 'customer-invoices', caption: 'Invoices of this customer', filter: () => ({customerId: c.id})});
  if (ctx.may('customer.update')) {
    root.append(editForm(c, status, async (done) => {
      await ctx.navigate('customer', {replaceState: true, params: {id: c.id}});
      announce(done);
    }));
  }
  if (ctx.may('invoice.create') && !c.archived) root.append(invoiceForm(ctx, c, status));
  if (ctx.may('subscription.create') && !c.archived) {
    try {
      root.append(await subscribeForm(ctx, c, status, async () => {
        subs.pager.reset();
        invs.pager.reset();
        await Promise.all([subs.pager.refresh(), invs.pager.refresh()]);
      }));
    } catch (err) {
      status.error(err);
    }
  }
  root.append(
    el('section', {'aria-labelledby': 'cs-h'}, el('h2', {id: 'cs-h'}, 'Subscriptions'), subs.node),
    el('section', {'aria-labelledby': 'ci-h'}, el('h2', {id: 'ci-h'}, 'Invoices'), invs.node));
  await Promise.all([subs.pager.refresh(), invs.pager.refresh()]);
}
