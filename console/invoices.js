// Invoices (by state), one invoice with its lines, payments and credit
// notes and the moves its state allows (docs/api.md, "Invoices": a draft
// takes lines and is finalized; an open one is charged, paid by hand,
// voided or written off; an open or paid one is credited), and the credit
// notes of the tenant.
import {billing} from './api.js';
import {announce, cell, confirmButton, el, facts, field, pageLink, pagedTable, param, replace, select, Status, table, when} from './dom.js';
import {amount, CREDIT_NOTE_HEADERS, creditNoteRow, INVOICE_STATES, invoiceList, manualLines, PAGE_SIZE, stateBadge} from './billing-ui.js';

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
    cell((p.method || '').replace(/_/g, ' ')), cell(p.failureCode || '—'),
    el('td', {class: 'num'}, amount(p.amountRefunded || 0, inv.currency)), cell(el('code', {}, p.reference || ''))));
  if (rows.length === 0) return el('p', {}, 'No payments.');
  return table('Payments of this invoice', ['When', 'Amount', 'Status', 'Method', 'Failure', 'Refunded', 'Reference'], rows);
}

// A paid invoice's card payment with something left to refund (CreateCreditNote's refund).
function refundable(inv) {
  return inv.state === 'paid' && (inv.payments || []).some((p) =>
    p.status === 'succeeded' && p.method === 'card' && Number(p.amountRefunded || 0) < Number(p.amount || 0));
}

function creditNoteForm(inv, status, reload) {
  const amt = el('input', {id: 'credit-amount', type: 'number', min: '0', step: '1', value: '0', inputmode: 'numeric'});
  const reason = el('input', {id: 'credit-reason', type: 'text', maxlength: '500', autocomplete: 'off'});
  const refund = refundable(inv) ? el('input', {id: 'credit-refund', type: 'checkbox'}) : null;
  const submit = el('button', {type: 'submit', id: 'credit-submit'}, 'Issue credit note');
  const form = el('form', {class: 'card', 'aria-labelledby': 'credit-h'},
    el('h3', {id: 'credit-h'}, 'Credit note'),
    field('Amount, tax included, in minor units', amt, `0 credits all that is left. ${inv.currency} minor units: 1999 is ${amount(1999, inv.currency)}.`),
    field('Reason (optional)', reason),
    refund ? el('div', {class: 'check'}, refund,
      el('label', {for: 'credit-refund'}, 'Refund it to the card the invoice was paid with, instead of the customer\'s balance')) : null,
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Issuing…');
    try {
      const body = {invoiceId: inv.id, amount: String(amt.value || 0), reason: reason.value.trim()};
      if (refund && refund.checked) body.refund = true;
      const r = await billing('CreateCreditNote', body);
      await reload(`Credit note ${r.creditNote.number} issued.`);
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  return form;
}

// RecordPayment: money received outside keelson, part or all of what remains.
function paymentForm(inv, status, reload) {
  const amt = el('input', {id: 'payment-amount', type: 'number', required: true, min: '1', max: String(inv.amountRemaining || 0),
    step: '1', value: String(inv.amountRemaining || 0), inputmode: 'numeric'});
  const ref = el('input', {id: 'payment-reference', type: 'text', maxlength: '200', autocomplete: 'off'});
  const submit = el('button', {type: 'submit', id: 'payment-submit'}, 'Record payment');
  const form = el('form', {class: 'card', 'aria-labelledby': 'payment-h'},
    el('h2', {id: 'payment-h'}, 'Payment received outside keelson'),
    field('Amount in minor units', amt, `At most the ${amount(inv.amountRemaining, inv.currency)} left to pay.`),
    field('Reference (optional)', ref, 'The transfer\'s reference, e.g. “wire 2027-001”.'),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Recording…');
    try {
      const r = await billing('RecordPayment', {id: inv.id, amount: String(amt.value || 0), reference: ref.value.trim()});
      await reload(`Recorded ${amount(r.payment.amount, inv.currency)}: the invoice is ${r.invoice.state}.`);
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  return form;
}

// A one-off draft: more lines, then finalize (optionally charging at once).
function draftForms(inv, status, reload) {
  const lines = manualLines('add', inv.currency);
  const addSubmit = el('button', {type: 'submit', id: 'add-lines-submit'}, 'Add lines');
  const add = el('form', {class: 'card', 'aria-labelledby': 'add-lines-h'},
    el('h2', {id: 'add-lines-h'}, 'More lines'), lines.node, el('div', {class: 'actions'}, addSubmit));
  add.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    addSubmit.disabled = true;
    status.loading('Adding…');
    try {
      await billing('AddInvoiceLines', {id: inv.id, lines: lines.values()});
      await reload('Lines added; every line is taxed again at the customer\'s rate.');
    } catch (err) {
      status.error(err);
      addSubmit.disabled = false;
    }
  });
  const charge = el('input', {id: 'finalize-charge', type: 'checkbox'});
  const finSubmit = el('button', {type: 'submit', id: 'finalize-submit'}, 'Finalize');
  const fin = el('form', {class: 'card', 'aria-labelledby': 'finalize-h'},
    el('h2', {id: 'finalize-h'}, 'Finalize'),
    el('p', {class: 'hint'}, 'The invoice is numbered, its lines frozen and the customer\'s credit applied.'),
    el('div', {class: 'check'}, charge, el('label', {for: 'finalize-charge'}, 'Charge the customer\'s payment method at once')),
    el('div', {class: 'actions'}, finSubmit));
  fin.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    finSubmit.disabled = true;
    status.loading('Finalizing…');
    try {
      const r = await billing('FinalizeInvoice', {id: inv.id, autoCharge: charge.checked});
      const p = r.payment;
      await reload(p && p.status === 'failed' ? `Finalized; the charge was declined (${p.failureCode}).`
        : `Finalized as ${r.invoice.number}: ${r.invoice.state}.`);
    } catch (err) {
      status.error(err);
      finSubmit.disabled = false;
    }
  });
  return inv.subscriptionId ? [fin] : [add, fin]; // lines are added to one-off drafts only
}

function invoiceActions(ctx, inv, status, reload) {
  const actions = el('div', {class: 'actions', id: 'invoice-actions'});
  const act = (label, confirmLabel, method, body, done) => actions.append(confirmButton(label, confirmLabel, async () => {
    status.loading('Working…');
    try {
      const r = await billing(method, body);
      const p = r.payment;
      await reload(p && p.status === 'failed' ? `The charge was declined (${p.failureCode}).` : done);
    } catch (err) {
      status.error(err);
    }
  }));
  if (inv.state === 'open' && ctx.may('invoice.pay')) act('Charge the payment method', 'Charge now', 'PayInvoice', {id: inv.id}, 'Charged.');
  const untouched = (inv.payments || []).length === 0 && (inv.creditNotes || []).length === 0;
  if (ctx.may('invoice.close')) {
    if ((inv.state === 'open' || inv.state === 'uncollectible') && untouched) act('Void', 'Void this invoice', 'VoidInvoice', {id: inv.id}, 'Voided.');
    if (inv.state === 'open') act('Write off', 'Mark uncollectible', 'MarkUncollectible', {id: inv.id}, 'Written off.');
  }
  return actions.childNodes.length ? actions : null;
}

export async function invoicePage(root, ctx) {
  const id = param('id');
  const status = new Status();
  const head = el('div', {id: 'invoice-detail'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(el('p', {}, pageLink(ctx, 'invoices', null, '← All invoices')), status.node, head);
  const reload = async (done) => {
    await ctx.navigate('invoice', {replaceState: true, params: {id}});
    announce(done);
  };
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
      invoiceActions(ctx, inv, status, reload)),
    ...(inv.state === 'draft' && ctx.may('invoice.finalize') ? draftForms(inv, status, reload) : []),
    (inv.state === 'open' || inv.state === 'uncollectible') && ctx.may('invoice.pay') ? paymentForm(inv, status, reload) : null,
    el('section', {'aria-labelledby': 'il-h'}, el('h2', {id: 'il-h'}, 'Lines'), el('div', {id: 'invoice-lines'}, linesTable(inv))),
    el('section', {'aria-labelledby': 'ip-h'}, el('h2', {id: 'ip-h'}, 'Payments'), paymentsTable(inv)),
    el('section', {'aria-labelledby': 'in-h'}, el('h2', {id: 'in-h'}, 'Credit notes'),
      (inv.creditNotes || []).length === 0 ? el('p', {}, 'No credit notes.')
        : table('Credit notes of this invoice', CREDIT_NOTE_HEADERS, inv.creditNotes.map((n) => creditNoteRow(ctx, n, cur))),
      ctx.may('credit_note.create') && (inv.state === 'open' || inv.state === 'paid') ? creditNoteForm(inv, status, reload) : null),
  ];
  replace(head, ...parts);
}
