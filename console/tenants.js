// The tenants the user belongs to; switching moves the session to another
// one (SwitchTenant: a new session, set as the cookie by the gateway).
import {auth} from './api.js';
import {cell, el, replace, Status, table, when} from './dom.js';

export async function tenantsPage(root, ctx) {
  const status = new Status();
  const list = el('div', {id: 'tenants-list'}, el('p', {class: 'loading'}, 'Loading…'));
  root.append(status.node, list);
  let r;
  try {
    r = await auth('ListTenants', {});
  } catch (err) {
    status.error(err);
    replace(list);
    return;
  }
  const rows = (r.tenants || []).map((t) => {
    const current = t.tenantId === ctx.me.tenantId;
    const action = current ? el('span', {class: 'badge'}, 'Current')
      : el('button', {type: 'button', 'aria-label': `Switch to ${t.tenantName}`}, 'Switch');
    if (!current) {
      action.addEventListener('click', async () => {
        action.disabled = true;
        status.loading(`Switching to ${t.tenantName}…`);
        try {
          await auth('SwitchTenant', {tenantId: t.tenantId});
          await ctx.signedIn();
        } catch (err) {
          status.error(err);
          action.disabled = false;
        }
      });
    }
    return el('tr', {}, cell(t.tenantName), cell(t.role), cell(when(t.joinedAtUnixMs)), cell(action));
  });
  replace(list, table('Your tenants', ['Tenant', 'Your role', 'Joined', 'Actions'], rows));
}
