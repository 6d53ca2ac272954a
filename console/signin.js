// Sign in, sign up, and accept an invitation. The session token never
// reaches this code: the gateway moves it into the HttpOnly cookie and
// blanks it in the reply.
import {auth} from './api.js';
import {el, field, Status} from './dom.js';

function passwordInput(id, autocomplete) {
  return el('input', {id, name: id, type: 'password', required: true, minlength: '8', autocomplete});
}

export function signInPage(root, ctx) {
  const status = new Status();
  const email = el('input', {id: 'signin-email', name: 'email', type: 'email', required: true, autocomplete: 'username'});
  const password = passwordInput('signin-password', 'current-password');
  password.removeAttribute('minlength');
  const submit = el('button', {type: 'submit', id: 'signin-submit'}, 'Sign in');
  const form = el('form', {class: 'card narrow', 'aria-labelledby': 'page-title', novalidate: false},
    field('Email', email),
    field('Password', password),
    el('div', {class: 'actions'}, submit),
    status.node,
    el('p', {}, 'No account yet? ', ctxLink(ctx, 'signup', 'Sign up')),
    el('p', {}, 'Invited to a tenant? ', ctxLink(ctx, 'accept', 'Accept the invitation')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Signing in…');
    try {
      await auth('Login', {email: email.value, password: password.value});
      password.value = '';
      await ctx.signedIn();
    } catch (err) {
      status.error(err);
      submit.disabled = false;
      password.focus();
    }
  });
  root.append(form);
  email.focus();
}

export function signUpPage(root, ctx) {
  const status = new Status();
  const email = el('input', {id: 'signup-email', name: 'email', type: 'email', required: true, autocomplete: 'username'});
  const password = passwordInput('signup-password', 'new-password');
  const display = el('input', {id: 'signup-display', name: 'displayName', type: 'text', maxlength: '200', autocomplete: 'name'});
  const tenant = el('input', {id: 'signup-tenant', name: 'tenantName', type: 'text', maxlength: '200', autocomplete: 'organization'});
  const submit = el('button', {type: 'submit', id: 'signup-submit'}, 'Create account');
  const form = el('form', {class: 'card narrow', 'aria-labelledby': 'page-title'},
    field('Email', email),
    field('Password', password, 'At least 8 characters.'),
    field('Your name (optional)', display),
    field('Workspace name (optional)', tenant, 'Your first tenant; you will be its owner.'),
    el('div', {class: 'actions'}, submit),
    status.node,
    el('p', {}, 'Have an account? ', ctxLink(ctx, 'signin', 'Sign in')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Creating your account…');
    try {
      await auth('SignUp', {
        email: email.value,
        password: password.value,
        displayName: display.value,
        tenantName: tenant.value,
      });
      status.loading('Signing in…');
      await auth('Login', {email: email.value, password: password.value});
      password.value = '';
      await ctx.signedIn();
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  root.append(form);
  email.focus();
}

// The link of an invitation mail: /console/accept?token=…. The token is
// taken out of the address at once (history, bookmarks), kept in the form.
export function acceptPage(root, ctx) {
  const status = new Status();
  const given = ctx.params.get('token') || '';
  if (given) window.history.replaceState({}, '', '/console/accept');
  const token = el('input', {id: 'accept-token', name: 'token', type: 'text', required: true, value: given,
    autocomplete: 'off', spellcheck: 'false', maxlength: '512'});
  const password = passwordInput('accept-password', 'new-password');
  password.removeAttribute('minlength');
  const display = el('input', {id: 'accept-display', name: 'displayName', type: 'text', maxlength: '200', autocomplete: 'name'});
  const submit = el('button', {type: 'submit', id: 'accept-submit'}, 'Accept and sign in');
  const form = el('form', {class: 'card narrow', 'aria-labelledby': 'page-title'},
    field('Invitation code', token, 'From the link in the invitation mail.'),
    field('Password', password,
      'New to keelson: the password of your new account (at least 8 characters). Already have an account: its password.'),
    field('Your name (optional, new accounts)', display),
    el('div', {class: 'actions'}, submit),
    status.node,
    el('p', {}, 'Have an account in this tenant already? ', ctxLink(ctx, 'signin', 'Sign in')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    submit.disabled = true;
    status.loading('Accepting the invitation…');
    try {
      await auth('AcceptInvitation', {token: token.value.trim(), password: password.value, displayName: display.value});
      password.value = '';
      token.value = '';
      await ctx.signedIn();
    } catch (err) {
      status.error(err);
      submit.disabled = false;
    }
  });
  root.append(form);
  (given ? password : token).focus();
}

function ctxLink(ctx, name, text) {
  const a = el('a', {href: `/console/${name}`}, text);
  a.addEventListener('click', (ev) => {
    ev.preventDefault();
    ctx.navigate(name);
  });
  return a;
}
