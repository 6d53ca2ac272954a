// DOM helpers for the console. Every value reaches the page through
// textContent or an attribute set one by one: never through innerHTML, so
// a name stored by anyone renders as text. (The Content-Security-Policy
// also forbids string-to-HTML sinks: require-trusted-types-for 'script'.)

// el('button', {type: 'button', onclick: f, class: 'x'}, 'text', child, ...)
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') {
      node.addEventListener(name.slice(2), value);
    } else if (name === 'class') {
      node.className = value;
    } else if (name === 'dataset') {
      Object.assign(node.dataset, value);
    } else if (value === true) {
      node.setAttribute(name, '');
    } else {
      node.setAttribute(name, String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Replaces every child of node.
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

let idSeq = 0;
export function uid(prefix) {
  idSeq += 1;
  return `${prefix}-${idSeq}`;
}

// A labelled form field: <div class="field"><label for=id>…</label><input id=id …></div>
export function field(label, control, hint) {
  const id = control.id || uid('f');
  control.id = id;
  let hintNode = null;
  if (hint) {
    hintNode = el('p', {class: 'hint', id: `${id}-hint`}, hint);
    control.setAttribute('aria-describedby', hintNode.id);
  }
  return el('div', {class: 'field'}, el('label', {for: id}, label), control, hintNode);
}

export function select(options, value, attrs = {}) {
  const s = el('select', attrs);
  for (const opt of options) {
    const [v, text] = Array.isArray(opt) ? opt : [opt, opt];
    const o = el('option', {value: v}, text);
    if (v === value) o.selected = true;
    s.append(o);
  }
  return s;
}

// A region that shows what a page or form is doing: loading, an error, a result.
export class Status {
  constructor(extraClass = '') {
    this.node = el('div', {class: `status ${extraClass}`.trim(), role: 'status', 'aria-live': 'polite'});
  }
  loading(text = 'Loading…') {
    this.node.className = 'status loading';
    this.node.setAttribute('role', 'status');
    replace(this.node, text);
  }
  error(err) {
    this.node.className = 'status error';
    this.node.setAttribute('role', 'alert');
    replace(this.node, errorText(err));
  }
  ok(text) {
    this.node.className = 'status ok';
    this.node.setAttribute('role', 'status');
    replace(this.node, text);
  }
  clear() {
    this.node.className = 'status';
    replace(this.node);
  }
}

export function errorText(err) {
  if (err && err.code && err.message) return `${err.message} (${err.code})`;
  if (err && err.message) return err.message;
  return String(err);
}

// Times are int64 milliseconds as strings in proto3 JSON; absent means 0.
export function when(ms) {
  const n = Number(ms || 0);
  if (!n) return '—';
  const d = new Date(n);
  return d.toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'short'});
}

export function count(v) {
  return Number(v || 0).toLocaleString();
}

// An amount in minor units of its currency ("1999", "EUR" -> "€19.99").
export function money(amount, currency) {
  const fmt = new Intl.NumberFormat(undefined, {style: 'currency', currency});
  const digits = fmt.resolvedOptions().maximumFractionDigits;
  return fmt.format(Number(amount || 0) / 10 ** digits);
}

// A table in a scroll container that keyboard users can reach.
export function table(caption, headers, rows) {
  const t = el('table', {},
    el('caption', {}, caption),
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {scope: 'col'}, h)))),
    el('tbody', {}, rows));
  return el('div', {class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': caption}, t);
}

export function cell(...children) {
  return el('td', {}, ...children);
}

// Previous/next by page token: keeps the tokens of the pages before.
export class Pager {
  constructor(label, load) {
    this.label = label;
    this.load = load; // (token) => Promise<nextPageToken>
    this.tokens = [''];
    this.next = '';
    this.prevBtn = el('button', {type: 'button', class: 'secondary', onclick: () => this.go(-1)}, 'Previous page');
    this.nextBtn = el('button', {type: 'button', class: 'secondary', onclick: () => this.go(1)}, 'Next page');
    this.where = el('span', {class: 'page-no'});
    this.node = el('nav', {class: 'pager', 'aria-label': label}, this.prevBtn, this.where, this.nextBtn);
  }
  async go(step) {
    if (step > 0 && this.next) this.tokens.push(this.next);
    if (step < 0 && this.tokens.length > 1) this.tokens.pop();
    await this.refresh();
  }
  async refresh() {
    const token = this.tokens[this.tokens.length - 1];
    this.next = (await this.load(token)) || '';
    this.prevBtn.disabled = this.tokens.length <= 1;
    this.nextBtn.disabled = !this.next;
    replace(this.where, `Page ${this.tokens.length}`);
  }
  reset() {
    this.tokens = [''];
  }
}

// SVG elements, built as the HTML ones are: attributes one by one, text as
// text nodes (charts.js draws the dashboard's charts with it).
const SVG_NS = 'http://www.w3.org/2000/svg';
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    node.setAttribute(name, String(value));
  }
  append(node, children);
  return node;
}

// A page's query parameters (/console/customer?id=…).
export function param(name) {
  return new URLSearchParams(window.location.search).get(name) || '';
}

// A link to another console page that the router follows without a reload.
// ctx.navigate is passed in to keep this module free of the router.
export function pageLink(ctx, page, params, ...children) {
  const qs = new URLSearchParams(params || {}).toString();
  const href = `/console/${page}${qs ? `?${qs}` : ''}`;
  const a = el('a', {href}, ...children);
  a.addEventListener('click', (ev) => {
    if (ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey || ev.altKey) return;
    ev.preventDefault();
    ctx.navigate(page, {params});
  });
  return a;
}

// A definition list of [label, value] pairs: one object's fields.
export function facts(label, pairs) {
  const dl = el('dl', {class: 'facts', 'aria-label': label});
  for (const [k, v] of pairs) {
    if (v === undefined || v === null) continue;
    dl.append(el('dt', {}, k), el('dd', {}, v === '' ? '—' : v));
  }
  return dl;
}

// A button that asks once more, in place, before doing something final.
// While the action runs both buttons are disabled, so a double click or a
// repeated Enter calls it once; Escape (or Cancel) steps back. Focus moves
// to the confirmation, and back to the first button when the row stays.
export function confirmButton(label, confirmLabel, action, attrs = {}) {
  const wrap = el('span', {class: 'confirm'});
  const start = el('button', {type: 'button', class: 'danger', ...attrs}, label);
  let yes = null; // the confirmation, while it is shown
  const back = () => {
    yes = null;
    replace(wrap, start);
    start.focus();
  };
  start.addEventListener('click', () => {
    yes = el('button', {type: 'button', class: 'danger'}, confirmLabel);
    const no = el('button', {type: 'button', class: 'secondary'}, 'Cancel');
    const mine = yes;
    mine.addEventListener('click', async () => {
      if (mine.disabled) return;
      mine.disabled = true;
      no.disabled = true;
      try {
        await action();
      } finally {
        if (wrap.isConnected && yes === mine) {
          const lost = document.activeElement === document.body || wrap.contains(document.activeElement);
          yes = null;
          replace(wrap, start);
          if (lost) start.focus();
        }
      }
    });
    no.addEventListener('click', back);
    replace(wrap, yes, no);
    yes.focus();
  });
  wrap.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Escape' || !yes || yes.disabled) return;
    ev.preventDefault();
    back();
  });
  wrap.append(start);
  return wrap;
}

// A paged list: a Pager whose page is rows of a table (or a line that says
// there are none), with the list marked busy while it loads and a Connect
// error shown in status. fetchPage(token) -> {items, next}.
export function pagedTable({id, caption, headers, empty, status, fetchPage, row, label}) {
  const list = el('div', {id}, el('p', {class: 'loading'}, 'Loading…'));
  const pager = new Pager(label || `${caption} pages`, async (token) => {
    list.setAttribute('aria-busy', 'true');
    try {
      const {items, next} = await fetchPage(token);
      replace(list, items.length === 0 ? el('p', {}, empty) : table(caption, headers, items.map(row)));
      return next;
    } catch (err) {
      status.error(err);
      replace(list, el('p', {}, 'This list could not be loaded.'));
      return '';
    } finally {
      list.removeAttribute('aria-busy');
    }
  });
  return {list, pager, node: el('div', {}, list, pager.node)};
}

// Shows text as the outcome in the first status region of the page shown
// now: for a write whose page is drawn again after it (ctx.navigate to the
// same page), so the result is still said once the new page is in place.
export function announce(text) {
  const node = document.querySelector('main .page .status');
  if (!node) return;
  node.className = 'status ok';
  node.setAttribute('role', 'status');
  replace(node, text);
}
