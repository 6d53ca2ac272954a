// Members and invitations. What the caller's role may not do is not
// offered (roles.js decides: no role change or removal without
// members.set_role / members.remove, nothing for a member ranked above the
// caller, and only roles up to the caller's own); the server checks again.
import {auth} from './api.js';
import {grantable} from './roles.js';
import {cell, confirmButton, el, field, Pager, replace, select, Status, table, when} from './dom.js';

const PAGE_SIZE = 20;

function memberRow(m, ctx, status, reload) {
  const me = ctx.me;
  const who = m.displayName ? `${m.displayName} <${m.email}>` : m.email;
  const actions = el('td', {class: 'actions-cell'});
  let roleCell = cell(m.role);
  if (ctx.may('member.set_role', m)) {
    const s = select(grantable(me), m.role, {'aria-label': `Role of ${who}`});
    const save = el('button', {type: 'button', class: 'secondary'}, 'Save role');
    save.addEventListener('click', async () => {
      status.loading('Changing the role…');
      try {
        await auth('SetRole', {userId: m.userId, role: s.value});
        status.ok(`${m.email} is now ${s.value}.`);
        await reload();
      } catch (err) {
        status.error(err);
      }
    });
    roleCell = el('td', {}, s, ' ', save);
  }
  if (ctx.may('member.remove', m)) {
    actions.append(confirmButton('Remove', `Remove ${m.email}`, async () => {
      status.loading('Removing…');
      try {
        await auth('RemoveMember', {userId: m.userId});
        status.ok(`${m.email} was removed.`);
        await reload();
      } catch (err) {
        status.error(err);
      }
    }));
  }
  return el('tr', {},
    cell(m.displayName || '—'),
    cell(m.email),
    roleCell,
    cell(when(m.joinedAtUnixMs)),
    actions);
}

function membersSection(ctx) {
  const status = new Status();
  const list = el('div', {id: 'members-list'});
  const pager = new Pager('Members pages', async (token) => {
    list.setAttribute('aria-busy', 'true');
    try {
      const r = await auth('ListMembers', {pageSize: PAGE_SIZE, pageToken: token});
      const rows = (r.members || []).map((m) => memberRow(m, ctx, status, () => pager.refresh()));
      replace(list, table('Members of this tenant', ['Name', 'Email', 'Role', 'Joined', 'Actions'], rows));
      return r.nextPageToken;
    } catch (err) {
      status.error(err);
      return '';
    } finally {
      list.removeAttribute('aria-busy');
    }
  });
  replace(list, el('p', {class: 'loading'}, 'Loading…'));
  const section = el('section', {'aria-labelledby': 'members-h'},
    el('h2', {id: 'members-h'}, 'Members'), status.node, list, pager.node);
  return {section, pager};
}

function inviteForm(ctx, status, onDone) {
  const emails = el('textarea', {id: 'invite-emails', name: 'emails', rows: '2', required: true, autocomplete: 'off'});
  const role = select(grantable(ctx.me), 'member', {id: 'invite-role', name: 'role'});
  const submit = el('button', {type: 'submit', id: 'invite-submit'}, 'Invite');
  const form = el('form', {class: 'card', 'aria-labelledby': 'invite-h'},
    el('h3', {id: 'invite-h'}, 'Invite people'),
    field('Email addresses', emails, 'One or more, separated by commas or new lines (at most 100).'),
    field('Role', role),
    el('div', {class: 'actions'}, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const list = emails.value.split(/[\s,;]+/).map((s) => s.trim()).filter(Boolean);
    if (list.length === 0) {
      status.error(new Error('Enter at least one email address.'));
      emails.focus();
      return;
    }
    submit.disabled = true;
    status.loading('Inviting…');
    try {
      const r = await auth('Invite', {emails: list, role: role.value});
      const n = (r.invitations || []).length;
      status.ok(`${n} invitation${n === 1 ? '' : 's'} sent.`);
      emails.value = '';
      await onDone();
    } catch (err) {
      status.error(err);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function invitationRow(inv, ctx, status, reload) {
  const actions = el('td', {class: 'actions-cell'});
  if ((inv.status === 'pending' || inv.status === 'expired') && ctx.may('invitation.revoke', inv)) {
    actions.append(confirmButton('Revoke', `Revoke the invitation of ${inv.email}`, async () => {
      status.loading('Revoking…');
      try {
        await auth('RevokeInvitation', {invitationId: inv.id});
        status.ok(`The invitation of ${inv.email} was revoked.`);
        await reload();
      } catch (err) {
        status.error(err);
      }
    }));
  }
  return el('tr', {},
    cell(inv.email), cell(inv.role), cell(inv.status), cell(when(inv.createdAtUnixMs)),
    cell(when(inv.expiresAtUnixMs)), actions);
}

function invitationsSection(ctx) {
  const status = new Status();
  const list = el('div', {id: 'invitations-list'});
  const closed = el('input', {type: 'checkbox', id: 'invitations-closed'});
  const pager = new Pager('Invitations pages', async (token) => {
    try {
      const r = await auth('ListInvitations', {pageSize: PAGE_SIZE, pageToken: token, includeClosed: closed.checked});
      const rows = (r.invitations || []).map((i) => invitationRow(i, ctx, status, () => pager.refresh()));
      replace(list, rows.length === 0
        ? el('p', {}, closed.checked ? 'No invitations yet.' : 'No pending invitations.')
        : table('Invitations sent', ['Email', 'Role', 'Status', 'Sent', 'Expires', 'Actions'], rows));
      return r.nextPageToken;
    } catch (err) {
      status.error(err);
      return '';
    }
  });
  replace(list, el('p', {class: 'loading'}, 'Loading…'));
  closed.addEventListener('change', () => {
    pager.reset();
    pager.refresh();
  });
  const section = el('section', {'aria-labelledby': 'invitations-h'},
    el('h2', {id: 'invitations-h'}, 'Invitations'),
    inviteForm(ctx, status, async () => {
      pager.reset();
      await pager.refresh();
    }),
    status.node,
    el('div', {class: 'check'}, closed, el('label', {for: 'invitations-closed'}, 'Show accepted, revoked and expired ones')),
    list, pager.node);
  return {section, pager};
}

export async function membersPage(root, ctx) {
  const members = membersSection(ctx);
  root.append(members.section);
  const loads = [members.pager.refresh()];
  if (ctx.may('invitation.list')) {
    const inv = invitationsSection(ctx);
    root.append(inv.section);
    loads.push(inv.pager.refresh());
  }
  await Promise.all(loads);
}
