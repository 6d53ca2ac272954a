// Plans: the latest version of each code, and to billing.manage a new flat
// or per-unit plan, an edit of a code (UpdatePlan: name and trial days in
// place, a new price as a new version) and the archiving of a code (no new
// subscription on any of its versions). Metered plans with tiers are made,
// and their tiers changed, through the API.
import {billing} from './api.js';
import {cell, confirmButton, el, field, pagedTable, replace, select, Status, when} from './dom.js';
import {amount, CURRENCIES, every, PAGE_SIZE, UNITS} from './billing-ui.js';

const MODELS = {PRICE_MODEL_FLAT: 'flat', PRICE_MODEL_PER_UNIT: 'per unit', PRICE_MODEL_GRADUATED: 'metered'};

function price(p) {
  const pr = p.price || {};
  if (pr.model === 'PRICE_MODEL_GRADUATED') return `metered, ${(pr.tiers || []).length} tiers`;
  return `${amount(pr.amount, p.currency)} ${pr.model === 'PRICE_MODEL_PER_UNIT' ? 'per unit ' : ''}${every(p)}`;
}

function createForm(status, onCreated) {
  const code = el('input', {id: 'plan-code', type: 'text', required: true, maxlength: '64', pattern: '[A-Za-z0-9._\\-]+', autocomplete: 'off', spellcheck: 'false'});
  const name = el('input', {id: 'plan-name', type: 'text', maxlength: '200', autocomplete: 'off'});
  const currency = select(CURRENCIES, 'USD', {id: 'plan-currency'});
  const model = select([['PRICE_MODEL_FLAT', 'Flat: the amount per period'], ['PRICE_MODEL_PER_UNIT', 'Per unit: the amount × the quantity']],
    'PRICE_MODEL_FLAT', {id: 'plan-model'});
  const amt = el('input', {id: 'plan-amount', type: 'number', required: true, min: '0', step: '1', inputmode: 'numeric'});
  const unit = select(UNITS, 'INTERVAL_UNIT_MONTH', {id: 'plan-unit'});
  const trial = el('input', {id: 'plan-trial', type: 'number', min: '0', max: '730', step: '1', value: '0', inputmode: 'numeric'});
  const submit = el('button', {type: 'submit', id: 'plan-submit'}, 'Create plan');
  const form = el('form', {class: 'card', 'aria-labelledby': 'plan-create-h'},
    el('h2', {id: 'plan-create-h'}, 'New plan'),
    field('Code', code, '1 to 64 of A–Z, a–z, 0–9, “.”, “_”, “-”; unique in the tenant.'),
    field('Name (optional)', name),
    field('Currency', currency),
    field('Price model', model),
    field('Amount in minor units', amt, 'In cents for USD: 1999 is $19.99.'),
    field('Billed every', unit),
    field('Trial days', trial, '0: no trial.'),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Creating…');
    try {
      const r = await billing('CreatePlan', {code: code.value.trim(), name: name.value.trim(), currency: currency.value,
        intervalUnit: unit.value, intervalCount: 1, trialDays: Number(trial.value || 0),
        price: {model: model.value, amount: String(amt.value || 0)}});
      status.ok(`The plan ${r.plan.code} was created.`);
      code.value = '';
      name.value = '';
      await onCreated();
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

// UpdatePlan of p's code: the mask names what differs from the latest version.
function editForm(p, status, onDone) {
  const graduated = (p.price || {}).model === 'PRICE_MODEL_GRADUATED';
  const name = el('input', {id: 'plan-edit-name', type: 'text', maxlength: '200', autocomplete: 'off', value: p.name || ''});
  const trial = el('input', {id: 'plan-edit-trial', type: 'number', min: '0', max: '730', step: '1', inputmode: 'numeric',
    value: String(p.trialDays || 0)});
  const amt = graduated ? null : el('input', {id: 'plan-edit-amount', type: 'number', required: true, min: '0', step: '1',
    inputmode: 'numeric', value: String((p.price || {}).amount || 0)});
  const submit = el('button', {type: 'submit', id: 'plan-edit-submit'}, 'Save');
  const close = el('button', {type: 'button', class: 'secondary'}, 'Close');
  const form = el('form', {class: 'card', id: 'plan-edit', 'aria-labelledby': 'plan-edit-h'},
    el('h2', {id: 'plan-edit-h'}, `Edit plan ${p.code} (v${p.version})`),
    field('Name', name), field('Trial days', trial, '0: no trial. Changes the latest version in place.'),
    amt ? field('Amount in minor units', amt, `A new price makes version ${p.version + 1}; subscriptions stay on theirs until changed.`)
      : el('p', {class: 'hint'}, 'A metered plan\'s tiers are changed through the API.'),
    el('div', {class: 'actions'}, submit, close));
  close.addEventListener('click', () => form.remove());
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = {code: p.code, updateMask: []};
    if (name.value.trim() !== (p.name || '')) {
      body.updateMask.push('name');
      body.name = name.value.trim();
    }
    if (Number(trial.value || 0) !== Number(p.trialDays || 0)) {
      body.updateMask.push('trial_days');
      body.trialDays = Number(trial.value || 0);
    }
    if (amt && String(amt.value || 0) !== String((p.price || {}).amount || 0)) {
      body.updateMask.push('price');
      body.price = {model: p.price.model, amount: String(amt.value || 0)};
    }
    if (body.updateMask.length === 0) {
      status.ok('Nothing changed.');
      return;
    }
    submit.disabled = true;
    status.loading('Saving…');
    try {
      const r = await billing('UpdatePlan', body);
      status.ok(`The plan ${r.plan.code} is at version ${r.plan.version}: ${price(r.plan)}.`);
      form.remove();
      await onDone();
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  return form;
}

export async function plansPage(root, ctx) {
  const status = new Status();
  const archived = el('input', {type: 'checkbox', id: 'plans-archived'});
  const list = pagedTable({
    id: 'plans-list', caption: 'Plans (the latest version of each code)', status,
    headers: ['Code', 'Name', 'Version', 'Price', 'Trial', 'State', 'Created', 'Actions'], empty: 'No plans yet.',
    fetchPage: async (token) => {
      const r = await billing('ListPlans', {pageSize: PAGE_SIZE, pageToken: token, includeArchived: archived.checked});
      return {items: r.plans || [], next: r.nextPageToken};
    },
    row: (p) => el('tr', {dataset: {planCode: p.code}},
      cell(el('code', {}, p.code)), cell(p.name || '—'), cell(String(p.version)), cell(price(p)),
      cell(p.trialDays ? `${p.trialDays} days` : 'none'), cell(p.archived ? 'archived' : 'active'), cell(when(p.createdAtUnixMs)),
      el('td', {class: 'actions-cell'}, !p.archived && ctx.may('plan.update') ? editButton(p) : null,
        !p.archived && ctx.may('plan.archive') ? archiveButton(p) : null)),
  });
  const editSlot = el('div', {id: 'plan-edit-slot'});
  function editButton(p) {
    return el('button', {type: 'button', class: 'secondary', 'aria-label': `Edit ${p.code}`, onclick: () => {
      const form = editForm(p, status, () => list.pager.refresh());
      replace(editSlot, form);
      form.querySelector('input').focus();
    }}, 'Edit');
  }
  function archiveButton(p) {
    return confirmButton('Archive', `Archive ${p.code}`, async () => {
      status.loading('Archiving…');
      try {
        await billing('ArchivePlan', {code: p.code});
        status.ok(`The plan ${p.code} was archived: its subscriptions go on, no new one starts on it.`);
        await list.pager.refresh();
      } catch (err) {
        status.error(err);
      }
    }, {'aria-label': `Archive ${p.code}`});
  }
  const reload = () => {
    list.pager.reset();
    return list.pager.refresh();
  };
  archived.addEventListener('change', reload);
  if (ctx.may('plan.create')) root.append(createForm(status, reload));
  root.append(status.node, editSlot, el('section', {'aria-labelledby': 'plans-h'}, el('h2', {id: 'plans-h'}, 'Plans'),
    el('div', {class: 'check'}, archived, el('label', {for: 'plans-archived'}, 'Include archived')),
    list.node));
  await list.pager.refresh();
}
