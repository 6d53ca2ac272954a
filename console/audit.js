// The audit log, newest first, paged, filtered by the server (ListAudit's
// action and actorUserId): every page is of the filtered log. The filters a
// page was read with are kept until they are applied again, so that paging
// goes on under them (a page token is good only with its own filters).
import {auth} from './api.js';
import {cell, el, pagedTable, select, Status, when} from './dom.js';

const PAGE_SIZE = 25;
// The actions auth writes (docs/api.md, "ListAudit"); the server refuses any other.
const ACTIONS = ['tenant.created', 'invitation.created', 'invitation.accepted', 'invitation.revoked',
  'member.role_set', 'member.removed', 'api_key.created', 'api_key.revoked'];
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

// detailJson is a JSON object of names, emails and roles: shown as "key: value" text.
function details(json) {
  try {
    const obj = JSON.parse(json || '{}');
    const parts = Object.entries(obj).map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`);
    return parts.join(', ') || '—';
  } catch (err) {
    return json || '—';
  }
}

export async function auditPage(root) {
  const status = new Status();
  const action = select([['', 'All actions'], ...ACTIONS.map((a) => [a, a])], '', {id: 'audit-action'});
  const actor = el('input', {id: 'audit-actor', type: 'search', autocomplete: 'off', maxlength: '36',
    placeholder: 'a user id', spellcheck: 'false'});
  const apply = el('button', {type: 'submit', class: 'secondary', id: 'audit-apply'}, 'Filter');
  const form = el('form', {class: 'toolbar', role: 'search', 'aria-label': 'Filter the audit log'},
    el('label', {for: 'audit-action'}, 'Action'), action,
    el('label', {for: 'audit-actor'}, 'Actor (user id)'), actor, apply);
  let applied = {};

  const list = pagedTable({
    id: 'audit-list', caption: 'Audit log entries', status, label: 'Audit log pages',
    headers: ['When', 'Action', 'Actor', 'Target', 'Details', 'Request id'],
    empty: 'No entries.',
    fetchPage: async (token) => {
      const r = await auth('ListAudit', {pageSize: PAGE_SIZE, pageToken: token, ...applied});
      status.clear();
      return {items: r.entries || [], next: r.nextPageToken};
    },
    row: (e) => el('tr', {},
      cell(when(e.occurredAtUnixMs)),
      cell(e.action),
      cell(e.actorUserId ? `user ${e.actorUserId}` : e.actorApiKeyId ? `API key ${e.actorApiKeyId}` : '—'),
      cell(`${e.targetType || ''} ${e.targetId || ''}`.trim() || '—'),
      cell(details(e.detailJson)),
      cell(el('code', {}, e.requestId || ''))),
  });

  // Reads the filters afresh and shows their first page.
  function reload() {
    const who = actor.value.trim();
    if (who && !UUID.test(who)) {
      status.error(new Error('The actor is a user id (a UUID), as the Actor column shows it.'));
      actor.focus();
      return;
    }
    applied = {};
    if (action.value) applied.action = action.value;
    if (who) applied.actorUserId = who.toLowerCase();
    list.pager.reset();
    list.pager.refresh();
  }
  action.addEventListener('change', reload);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    reload();
  });
  root.append(form, status.node, list.node);
  await list.pager.refresh();
}
