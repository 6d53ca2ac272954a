// Invoices (by state), one invoice with its lines, payments and credit
// notes and the moves its state allows (docs/api.md, "Invoices"), and the
// credit notes of the tenant.
import {billing} from './api.js';
import {cell, confirmButton, el, facts, field, pageLink, pagedTable, param, replace, select, Status, table, when} from './dom.js';
import {amount, CREDIT_NOTE_HEADERS, creditNoteRow, INVOICE_STATES, invoiceList, PAGE_SIZE, stateBadge} from './billing-ui.js';

export async function invoicesPage(root, ctx) {
  const status = new Status();
  const state = select([['', 'Every state'], ...INVOICE_STATES.map((s) => [s, s])], '', {id: 'invoices-state'});
  const list = invoiceList(ctx, status, {id: 'invoices-list', caption: 'Invoices, newest first', filter: () => ({state: state.value})});
  state.addEventListener('change', () => {
    list.pager.reset();
    list.pager.refresh();
  });
  root.append(el('div', {class: 'toolbar'}, el('label', {for: 'invoices-state'}, 'State'), state), status.node, list.node);
  await list.pager.refresh();
}

export async function creditNotesPage(root, ctx) {
  const status = new Status();
  const list = pagedTable({
    id: 'credit-notes-list', caption: 'Credit notes, newest first (amounts in the invoice\'s minor units)', status,
    headers: CREDIT_NOTE_HEADERS, empty: 'No credit notes.',
    fetchPage: async (token) => {
      const r = await billing('ListCreditNotes', {pageSize: PAGE_SIZE, pageToken: token});
      return {items: r.creditNotes || [], next: r.nextPageToken};
    },
    row: (n) => creditNoteRow(ctx, n, ''),
  });
  root.append(el('p', {class: 'hint'}, 'A credit note is issued from its invoice\'s page.'), status.node, list.node);
  await list.pager.refresh();
}

function linesTable(inv) {
  const cur = inv.currency;
  const rows = (inv.lines || []).map((l) => el('tr', {},
    cell(String(l.lineNo)), cell(l.kind), cell(l.description || ''), cell(String(l.quantity || 0)),
    el('td', {class: 'num'}, amount(l.unitAmount, cur)), el('td', {class: 'num'}, amount(l.amount, cur)),
    el('td', {class: 'num'}, amount(l.tax, cur)),
    cell(l.periodStartUnixMs ? `${when(l.periodStartUnixMs)} – ${when(l.periodEndUnixMs)}` : '—')));
  if (rows.length === 0) return el('p', {}, 'No lines.');
  return table('Lines of this invoice', ['#', 'Kind', 'Description', 'Quantity', 'Unit', 'Amount', 'Tax', 'Period'], rows);
}

function paymentsTable(inv) {
  const rows = (inv.payments || []).map((p) => el('tr', {},
    cell(when(p.createdAtUnixMs)), el('td', {class: 'num'}, amount(p.amount, inv.currency)), cell(stateBadge(p.status)),
    cell((p.method || '').replace(/_/g, ' ')), cell(p.failureCode || '—'), cell(el('code', {}, p.reference || ''))));
  if (rows.length === 0) return el('p', {}, 'No payments.');
  return table('Payments of this invoice', ['When', 'Amount', 'Status', 'Method', 'Failure', 'Reference'], rows);
}

function creditNoteForm(inv, status, reload) {
  const amt = el('input', {id: 'credit-amount', type: 'number', min: '0', step: '1', value: '0', inputmode: 'numeric'});
  const reason = el('input', {id: 'credit-reason', type: 'text', maxlength: '500', autocomplete: 'off'});
  const submit = el('button', {type: 'submit', id: 'credit-submit'}, 'Issue credit note');
  const form = el('form', {class: 'card', 'aria-labelledby': 'credit-h'},
    el('h3', {id: 'credit-h'}, 'Credit note'),
    field('Amount, tax included, in minor units', amt, `0 credits all that is left. ${inv.currency} minor units: 1999 is ${amount(1999, inv.currency)}.`),
    field('Reason (optional)', reason),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Issuing…');
    try {
      const r = await billing('CreateCreditNote', {invoiceId: inv.id, amount: String(amt.value || 0), reason: reason.value.trim()});
      status.ok(`Credit note ${r.creditNote.number} issued.`);
      await reload();
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  return form;
}

function invoiceActions(inv, status, reload) {
  const actions = el('div', {class: 'actions', id: 'invoice-actions'});
  const act = (label, confirmLabel, method, body, done) => actions.append(confirmButton(label, confirmLabel, async () => {
    status.loading('Working…');
    try {
      const r = await billing(method, body);
      const p = r.payment;
      status.ok(p && p.status === 'failed' ? `The charge was declined (${p.failureCode}).` : done);
      await reload();
    } catch (err) {
      status.error(err);
    }
  }));
  if (inv.state === 'open') act('Charge the payment method', 'Charge now', 'PayInvoice', {id: inv.id}, 'Charged.');
  const untouched = (inv.payments || []).length === 0 && (inv.creditNotes || []).length === 0;
  if ((inv.state === 'open' || inv.state === 'uncollectible') && untouched) act('Void', 'Void this invoice', 'VoidInvoice', {id: inv.id}, 'Voided.');
  if (inv.state === 'open') act('Write off', 'Mark uncollectible', 'MarkUncollectible', {id: inv.id}, 'Written off.');
  return actions;
}

export async function invoicePage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'invoice-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'invoices', null, '← All invoices')), status.node, head);
  const reload = () => ctx.navigate('invoice', {replaceState: true, params: {id}});
  let inv;
  try {
    inv = (await billing('GetInvoice', {id})).invoice;
  } catch (err) {
    status.error(err);
    replace(head);
    return;
  }
  const heading = document.getElementById('page-title');
  if (heading) replace(heading, `Invoice ${inv.number || '(draft)'}`);
  const cur = inv.currency;
  const parts = [
    el('div', {class: 'card'},
      facts('Invoice', [
        ['State', stateBadge(inv.state)],
        ['Reason', (inv.billingReason || '').replace(/_/g, ' ')],
        ['Customer', pageLink(ctx, 'customer', {id: inv.customerId}, el('code', {}, inv.customerId))],
        ['Subscription', inv.subscriptionId ? pageLink(ctx, 'subscription', {id: inv.subscriptionId}, el('code', {}, inv.subscriptionId)) : 'one-off'],
        ['Subtotal', amount(inv.subtotal, cur)], ['Tax', amount(inv.tax, cur)], ['Total', amount(inv.total, cur)],
        ['Credit applied', amount(inv.balanceApplied, cur)], ['Due', amount(inv.amountDue, cur)],
        ['Paid', amount(inv.amountPaid, cur)], ['Credited', amount(inv.amountCredited, cur)],
        ['Left to pay', amount(inv.amountRemaining, cur)],
        ['Period', inv.periodStartUnixMs ? `${when(inv.periodStartUnixMs)} – ${when(inv.periodEndUnixMs)}` : '—'],
        ['Created', when(inv.createdAtUnixMs)], ['Finalized', when(inv.finalizedAtUnixMs)],
        ['Paid at', when(inv.paidAtUnixMs)], ['Voided', when(inv.voidedAtUnixMs)],
        ['Automatic charges', String(inv.attemptCount || 0)], ['Next retry', when(inv.nextAttemptUnixMs)],
        ['Description', inv.description || ''], ['Id', el('code', {}, inv.id)],
      ]),
      ctx.may('invoice.pay') ? invoiceActions(inv, status, reload) : null),
    el('section', {'aria-labelledby': 'il-h'}, el('h2', {id: 'il-h'}, 'Lines'), el('div', {id: 'invoice-lines'}, linesTable(inv))),
    el('section', {'aria-labelledby': 'ip-h'}, el('h2', {id: 'ip-h'}, 'Payments'), paymentsTable(inv)),
    el('section', {'aria-labelledby': 'in-h'}, el('h2', {id: 'in-h'}, 'Credit notes'),
      (inv.creditNotes || []).length === 0 ? el('p', {}, 'No credit notes.')
        : table('Credit notes of this invoice', CREDIT_NOTE_HEADERS, inv.creditNotes.map((n) => creditNoteRow(ctx, n, cur))),
      ctx.may('credit_note.create') && (inv.state === 'open' || inv.state === 'paid') ? creditNoteForm(inv, status, reload) : null),
  ];
  replace(head, ...parts);
}
