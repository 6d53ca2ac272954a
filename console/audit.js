// The audit log, newest first, paged; a filter over the page shown.
import {auth} from './api.js';
import {cell, el, Pager, replace, select, Status, table, when} from './dom.js';

const PAGE_SIZE = 25;
const ACTIONS = ['tenant.created', 'invitation.created', 'invitation.accepted', 'invitation.revoked',
  'member.role_set', 'member.removed', 'api_key.created', 'api_key.revoked'];

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
  const list = el('div', {id: 'audit-list'}, el('p', {class: 'loading'}, 'Loading…'));
  const filter = select([['', 'All actions'], ...ACTIONS.map((a) => [a, a])], '', {id: 'audit-action'});
  let entries = [];

  function render() {
    const shown = entries.filter((e) => !filter.value || e.action === filter.value);
    const rows = shown.map((e) => el('tr', {},
      cell(when(e.occurredAtUnixMs)),
      cell(e.action),
      cell(e.actorUserId ? `user ${e.actorUserId}` : e.actorApiKeyId ? `API key ${e.actorApiKeyId}` : '—'),
      cell(`${e.targetType || ''} ${e.targetId || ''}`.trim() || '—'),
      cell(details(e.detailJson)),
      cell(el('code', {}, e.requestId || ''))));
    replace(list, rows.length === 0 ? el('p', {}, 'No entries on this page.')
      : table('Audit log entries', ['When', 'Action', 'Actor', 'Target', 'Details', 'Request id'], rows));
  }

  const pager = new Pager('Audit log pages', async (token) => {
    list.setAttribute('aria-busy', 'true');
    try {
      const r = await auth('ListAudit', {pageSize: PAGE_SIZE, pageToken: token});
      entries = r.entries || [];
      render();
      status.clear();
      return r.nextPageToken;
    } catch (err) {
      status.error(err);
      return '';
    } finally {
      list.removeAttribute('aria-busy');
    }
  });
  filter.addEventListener('change', render);
  root.append(
    el('div', {class: 'toolbar'}, el('label', {for: 'audit-action'}, 'Show on this page'), filter),
    status.node, list, pager.node);
  await pager.refresh();
}
