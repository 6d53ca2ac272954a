// API keys: create (the key is shown once, with a copy button), list, revoke.
import {auth} from './api.js';
import {grantable} from './roles.js';
import {cell, el, field, Pager, replace, select, Status, table, when} from './dom.js';

const PAGE_SIZE = 20;

function keyStatus(k) {
  if (Number(k.revokedAtUnixMs || 0)) return 'revoked';
  const exp = Number(k.expiresAtUnixMs || 0);
  if (exp && exp <= Date.now()) return 'expired';
  return 'active';
}

// The new key, once: a read-only field to select, a copy button, and a
// button that forgets it. Nothing keeps it after that.
function shownOnce(created, onDismiss) {
  const input = el('input', {id: 'new-key', type: 'text', readonly: true, value: created.key, spellcheck: 'false', autocomplete: 'off'});
  const copied = el('span', {class: 'hint', role: 'status', 'aria-live': 'polite', id: 'copy-status'});
  const copy = el('button', {type: 'button', id: 'copy-key'}, 'Copy');
  copy.addEventListener('click', async () => {
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      replace(copied, 'Copied to the clipboard.');
    } catch (err) {
      replace(copied, 'Selected: press Ctrl+C (⌘C) to copy.');
    }
  });
  const done = el('button', {type: 'button', class: 'secondary', id: 'dismiss-key'}, 'I have stored it');
  const panel = el('div', {class: 'card notice', id: 'key-once', role: 'region', 'aria-labelledby': 'key-once-h'},
    el('h3', {id: 'key-once-h'}, `New key “${created.apiKey.name}”`),
    el('p', {}, 'This is the only time the key is shown. Store it now: keelson keeps only its hash.'),
    field('API key', input),
    el('div', {class: 'actions'}, copy, done, copied));
  done.addEventListener('click', () => {
    input.value = '';
    panel.remove();
    onDismiss();
  });
  return {panel, input};
}

export async function keysPage(root, ctx) {
  const status = new Status();
  const once = el('div', {id: 'key-once-slot'});
  const list = el('div', {id: 'keys-list'}, el('p', {class: 'loading'}, 'Loading…'));
  const revoked = el('input', {type: 'checkbox', id: 'keys-revoked'});

  const name = el('input', {id: 'key-name', name: 'name', type: 'text', required: true, maxlength: '200', autocomplete: 'off'});
  const role = select(grantable(ctx.me), 'member', {id: 'key-role', name: 'role'});
  const expires = el('input', {id: 'key-expires', name: 'expires', type: 'date'});
  const submit = el('button', {type: 'submit', id: 'key-submit'}, 'Create key');
  const form = el('form', {class: 'card', 'aria-labelledby': 'key-create-h'},
    el('h2', {id: 'key-create-h'}, 'Create a key'),
    field('Name', name, 'What uses it, e.g. “ci” or “billing export”.'),
    field('Role', role, 'The key acts with this role; at most your own.'),
    field('Expires (optional)', expires, 'Empty: the key never expires.'),
    el('div', {class: 'actions'}, submit));

  const pager = new Pager('API key pages', async (token) => {
    list.setAttribute('aria-busy', 'true');
    try {
      const r = await auth('ListApiKeys', {pageSize: PAGE_SIZE, pageToken: token, includeRevoked: revoked.checked});
      const rows = (r.apiKeys || []).map((k) => keyRow(k));
      replace(list, rows.length === 0 ? el('p', {}, 'No keys.')
        : table('API keys of this tenant', ['Name', 'Prefix', 'Role', 'Status', 'Created', 'Last used', 'Expires', 'Actions'], rows));
      return r.nextPageToken;
    } catch (err) {
      status.error(err);
      return '';
    } finally {
      list.removeAttribute('aria-busy');
    }
  });

  function keyRow(k) {
    const st = keyStatus(k);
    const actions = el('td', {class: 'actions-cell'});
    if (st === 'active' && ctx.may('api_key.revoke', k)) {
      const b = el('button', {type: 'button', class: 'danger', 'aria-label': `Revoke ${k.name}`}, 'Revoke');
      b.addEventListener('click', async () => {
        b.disabled = true;
        status.loading('Revoking…');
        try {
          await auth('RevokeApiKey', {apiKeyId: k.id});
          status.ok(`The key “${k.name}” was revoked.`);
          await pager.refresh();
        } catch (err) {
          status.error(err);
          b.disabled = false;
        }
      });
      actions.append(b);
    }
    return el('tr', {dataset: {keyId: k.id}},
      cell(k.name), cell(el('code', {}, k.prefix || '')), cell(k.role), cell(st),
      cell(when(k.createdAtUnixMs)), cell(when(k.lastUsedAtUnixMs)), cell(when(k.expiresAtUnixMs)), actions);
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Creating…');
    const body = {name: name.value.trim(), role: role.value};
    if (expires.value) body.expiresAtUnixMs = String(new Date(`${expires.value}T23:59:59`).getTime());
    try {
      const created = await auth('CreateApiKey', body);
      const shown = shownOnce(created, () => name.focus());
      replace(once, shown.panel);
      status.ok(`The key “${created.apiKey.name}” was created.`);
      name.value = '';
      expires.value = '';
      shown.input.focus();
      shown.input.select();
      pager.reset();
      await pager.refresh();
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  revoked.addEventListener('change', () => {
    pager.reset();
    pager.refresh();
  });

  root.append(form, status.node, once,
    el('section', {'aria-labelledby': 'keys-h'},
      el('h2', {id: 'keys-h'}, 'Keys'),
      el('div', {class: 'check'}, revoked, el('label', {for: 'keys-revoked'}, 'Show revoked keys')),
      list, pager.node));
  await pager.refresh();
}
