// The broker's web console: polls /console/state.json and draws it; the query panel runs sow and
// sow_and_subscribe through the AMPS JavaScript client (window.amps, served from /console/vendor/amps.js)
// over the broker's websocket transport. Plain browser JavaScript, no build step.
'use strict';

const WINDOW_SECONDS = 600;  // the most the chart shows: the Admin port keeps the same ten minutes of samples
const MIN_WINDOW_SECONDS = 60;  // the least: a young broker's few samples are not squeezed into a corner
let interval = 2;  // <Admin><Interval> seconds (set from the server)
let points = 301;  // the most points kept: WINDOW_SECONDS / interval + 1
const history = [];  // {taken_at, in, out} per statistics sample, oldest first
let lastTaken = null;
let websockets = [];
// Topics not named in the config are counted together under this name (see the footnote in index.html).
const OTHER = '_other';
const OTHER_TITLE = 'Every topic not named in the config (its SOW or TransactionLog topics), counted together: ' +
  'topic names become metric labels, and one label per topic a client publishes to would grow the metrics ' +
  'without bound. Name a topic in the config to count it on its own.';

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ''));
  return node;
};
const num = (x, digits = 0) => (x === null || x === undefined ? '–' : Number(x).toLocaleString(undefined,
  { maximumFractionDigits: digits, minimumFractionDigits: digits }));
const seconds = (x) => (x === null || x === undefined ? '–' : x < 0.1 ? `${num(x * 1000)} ms` : `${num(x, 2)} s`);
const bytes = (n) => (n >= 1 << 20 ? `${num(n / (1 << 20), 1)} MB` : n >= 1024 ? `${num(n / 1024, 1)} KB` : `${n} B`);
const ago = (epoch) => {
  if (!epoch) return 'never';
  const s = Math.max(0, Date.now() / 1000 - epoch);
  return s < 60 ? `${s.toFixed(0)} s ago` : s < 3600 ? `${(s / 60).toFixed(0)} min ago` : new Date(epoch * 1000).toLocaleString();
};

function fillTable(id, rows) {
  const body = $(`#${id} tbody`);
  body.replaceChildren(...rows);
}

function setPoints(seconds) {
  if (!(seconds > 0)) return;
  interval = seconds;
  points = Math.max(2, Math.ceil(WINDOW_SECONDS / interval) + 1);
}

// The age of the sample a response shows (X-Statistics-Age): "sample late" past twice the interval.
function showAge(age, state) {
  const late = $('#sample-late');
  const every = state.interval_setting;
  if (every > 0 && age > 2 * every) {
    late.textContent = `sample late (${age.toFixed(1)} s)`;
    late.title = `The newest statistics sample is ${age.toFixed(1)} s old; <Admin><Interval> is ${every} s. ` +
      `The last sample took ${seconds(state.sample_duration)}: the broker's event loop is busy.`;
    late.hidden = false;
  } else {
    late.hidden = true;
  }
}

function topicRow(t) {
  const other = t.name === OTHER;
  const totals = `${num(t.messages_received)} received · ${num(t.messages_delivered)} delivered since start`;
  return el('tr', { 'data-topic': t.name, title: other ? `${OTHER_TITLE}\n${totals}` : totals },
    el('td', { class: 'name' }, other ? el('span', { class: 'other' }, `${OTHER} (unlisted topics)`) : t.name),
    el('td', { class: 'num sow-records' }, num(t.sow_records)),
    el('td', { class: 'num in-rate' }, num(t.in_per_sec, 1)), el('td', { class: 'num out-rate' }, num(t.out_per_sec, 1)));
}

function journalRow(f, i, files) {
  const current = files.findIndex((g) => g.state === 'current');
  const label = f.state === 'current' ? '◀ current'
    : f.state === 'preallocated' ? `preallocated${current >= 0 && i === current + 1 ? ' (next)' : ''}` : f.state;
  return el('tr', { 'data-file': f.name, 'data-state': f.state, class: f.state === 'current' ? 'current' : '' },
    el('td', {}, f.name), el('td', { class: `state-${f.state}` }, label), el('td', { class: 'num' }, bytes(f.size)));
}

function render(state) {
  $('#instance-name').textContent = state.instance.name || '';
  $('#instance-meta').textContent = `v${state.instance.version} · pid ${state.instance.pid} · up ${ago(state.instance.start_time).replace(' ago', '')}`;
  $('#total-in').textContent = num(state.totals.in_per_sec, 1);
  $('#total-out').textContent = num(state.totals.out_per_sec, 1);
  $('#total-clients').textContent = state.totals.clients;
  websockets = state.websockets || [];

  fillTable('topics', state.topics.map(topicRow));
  $('#other-note').hidden = !state.topics.some((t) => t.name === OTHER);

  fillTable('clients', state.clients.map((c) => el('tr', { 'data-client': c.name },
    el('td', {}, c.name || c.id), el('td', {}, c.remote), el('td', { class: 'num queued' }, bytes(c.queued_bytes)),
    el('td', { class: 'num' }, num(c.messages_in)), el('td', { class: 'num' }, num(c.messages_out)),
    el('td', {}, ...(c.subscriptions.length ? c.subscriptions.map((s) => el('div', { class: 'sub' },
      `${s.kind} ${s.topic}${s.filter ? ` [${s.filter}]` : ''}`)) : [el('span', { class: 'muted' }, 'none')]),
    c.subscription_count > c.subscriptions.length ? el('div', { class: 'muted' }, `… ${c.subscription_count} in all`) : ''))));

  const j = state.journal;
  if (j) {
    $('#journal-summary').textContent = `last sequence ${num(j.last_sequence)} · durable ${num(j.durable_sequence)} · ` +
      `${bytes(j.bytes)} on disk${j.disk_full ? ' · DISK FULL: publishes to logged topics are refused' : ''}`;
    // Oldest to newest, as the log is written: the current file, then the preallocated ones after it.
    fillTable('journal', j.files.map(journalRow));
  }
  fillTable('actions', state.actions.length === 0 ? [el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no actions configured'))]
    : state.actions.map((a) => el('tr', { 'data-action': a.name },
    el('td', {}, a.name), el('td', { class: 'num' }, num(a.runs)), el('td', { class: 'num' }, num(a.failures)),
    el('td', {}, ago(a.last_run_start)), el('td', { class: 'num' }, a.last_run_duration === null ? '–' : `${a.last_run_duration.toFixed(2)} s`),
    el('td', {}, a.running ? 'running' : ''))));

  renderAccess(state.access);
  setPoints(state.interval_setting);
  if (state.taken_at !== lastTaken && state.interval && !history.some((p) => p.taken_at === state.taken_at)) {
    history.push({ taken_at: state.taken_at, in: state.totals.in_per_sec, out: state.totals.out_per_sec });
    while (history.length > points) history.shift();
  }
  lastTaken = state.taken_at;
  drawChart(state);
}

// -- administration: only what this user may do (state.access: its Admin rights and the actions it may run) --
let shownAccess = '';

async function administer(path, label, required) {
  const query = new URLSearchParams();
  for (const name of required) {
    const value = window.prompt(`${label}: ${name}?`);
    if (value === null) return;
    query.set(name, value);
  }
  $('#admin-result').textContent = `${label}: running…`;
  try {
    const r = await fetch(`${path}${required.length ? `?${query}` : ''}`, { method: 'POST', cache: 'no-store' });
    $('#admin-result').textContent = `${label}: ${r.status} ${(await r.text()).trim()}`;
  } catch (e) { $('#admin-result').textContent = `${label}: ${e.message || e}`; }
}

function renderAccess(access) {
  const text = JSON.stringify(access || null);
  if (text === shownAccess) return;  // rebuilt only when the rights change: a click is never lost
  shownAccess = text;
  const buttons = [];
  if (access && access.rights.includes('reset')) {
    for (const kind of ['authentication', 'entitlement']) {
      buttons.push(el('button', { type: 'button', 'data-admin': `reset-${kind}` }, `Reload ${kind} file`));
      buttons[buttons.length - 1].addEventListener('click',
        () => administer(`/amps/administrator/authorization/${kind}/reset`, `Reload ${kind} file`, []));
    }
  }
  for (const a of (access ? access.run : [])) {
    const label = a.shutdown ? `Shut down (${a.name})` : a.name;
    const button = el('button', { type: 'button', 'data-admin': a.path, class: a.shutdown ? 'danger' : '' }, label);
    button.addEventListener('click', () => {
      if (a.shutdown && !window.confirm('Shut the broker down?')) return;
      administer(a.path, label, a.required);
    });
    buttons.push(button);
  }
  $('#admin-buttons').replaceChildren(...buttons);
  $('#admin-section').hidden = buttons.length === 0;
  $('#admin-who').textContent = access && access.user ? `${access.user}: ${access.rights.join(', ') || 'no Admin right'}` : '';
}

function drawChart(state) {
  const svg = $('#rate-chart');
  const W = 800, H = 180, pad = 6;
  const peak = Math.max(1, ...history.map((p) => Math.max(p.in, p.out)));
  const step = 10 ** Math.floor(Math.log10(peak * 1.25));
  const top = Math.ceil((peak * 1.25) / step) * step;  // headroom, rounded to a readable figure
  // The newest point at the right edge; older ones scroll left.
  // As wide as the history (one minute at least, ten at most): the newest point at the right edge.
  const span = Math.min(points, Math.max(Math.ceil(MIN_WINDOW_SECONDS / interval) + 1, history.length)) - 1;
  const x = (i) => W - pad - (W - 2 * pad) * ((history.length - 1 - i) / span);
  const y = (v) => H - pad - (H - 2 * pad) * (v / top);
  const line = (key, color, width) => {
    const d = history.map((p, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(p[key]).toFixed(1)}`).join(' ');
    const path = document.createElementNS('http://www.w3.org/2000/svg', 'path');
    path.setAttribute('d', d); path.setAttribute('fill', 'none'); path.setAttribute('stroke', color);
    path.setAttribute('stroke-width', width); path.setAttribute('class', `series-${key}`);
    path.setAttribute('vector-effect', 'non-scaling-stroke');
    return path;
  };
  // out drawn wide underneath, in thin on top: equal rates (one subscriber) stay both visible.
  svg.replaceChildren(line('out', '#d2691e', 5), line('in', '#2b7bb9', 2));
  const last = history[history.length - 1];
  if (!last) return;
  svg.dataset.lastIn = last.in; svg.dataset.lastOut = last.out; svg.dataset.points = history.length;
  const every = state && state.interval_setting ? ` (every ${num(state.interval_setting, 0)} s` +
    `${state.sample_duration !== null && state.sample_duration !== undefined ? `, the last took ${seconds(state.sample_duration)}` : ''})` : '';
  const minutes = (span * interval) / 60;
  $('#chart-start').textContent = `${minutes >= 1 ? `${num(minutes, minutes % 1 ? 1 : 0)} min` : `${num(span * interval)} s`} ago`;
  $('#chart-scale').textContent = `top: ${num(top, 1)}/s · one point per statistics sample${every}`;
}

// The last ten minutes the Admin port kept: drawn at once, before the first live state.
async function loadHistory() {
  try {
    const r = await fetch('/console/history.json', { cache: 'no-store' });
    if (!r.ok) return;
    const h = await r.json();
    setPoints(h.interval_setting);
    history.splice(0, history.length, ...h.points.slice(-points).map((p) => ({ taken_at: p.taken_at, in: p.in, out: p.out })));
    $('#rate-chart').dataset.historyPoints = history.length;  // drawn before the first live state
    if (history.length) drawChart(null);
  } catch (e) { /* the broker is restarting: the live states fill the chart */ }
}

async function poll() {
  try {
    const r = await fetch('/console/state.json', { cache: 'no-store' });
    if (r.ok) {
      const state = await r.json();
      render(state);
      showAge(Number(r.headers.get('x-statistics-age') || 0), state);
    }
  } catch (e) { /* the broker is restarting: try again */ }
  setTimeout(poll, 1000);
}

// -- query panel -----------------------------------------------------------------------------------------
let client = null;
const rows = new Map();  // SOW key -> <tr>

function logLine(text) {
  const list = $('#query-log');
  list.prepend(el('li', {}, `${new Date().toLocaleTimeString()} ${text}`));
  while (list.children.length > 200) list.lastChild.remove();
}

function status(text) { $('#query-status').textContent = text; }

function upsert(key, data) {
  const text = typeof data === 'string' ? data : JSON.stringify(data);
  let tr = rows.get(key);
  if (tr) {
    tr.lastChild.textContent = text;
    tr.className = ''; void tr.offsetWidth; tr.className = 'changed';
    logLine(`changed ${key}`);
  } else {
    tr = el('tr', { 'data-key': key, class: 'added' }, el('td', {}, key), el('td', {}, text));
    rows.set(key, tr);
    $('#query-results tbody').append(tr);
    logLine(`added ${key}`);
  }
}

function remove(key, reason) {
  const tr = rows.get(key);
  if (tr) { tr.remove(); rows.delete(key); }
  logLine(`left ${key} (${reason || 'oof'})`);
}

function onMessage(m) {
  const c = m.header.command();
  if (c === 'sow' || c === 'p' || c === 'publish') upsert(m.header.sowKey() || `#${rows.size + 1}`, m.data);
  else if (c === 'oof') remove(m.header.sowKey(), m.header.reason());
  else if (c === 'group_end') status(`${rows.size} records; ${$('#query-mode').value === 'sow' ? 'done' : 'live'}`);
}

async function stop() {
  if (client) { const c = client; client = null; try { await c.disconnect(); } catch (e) { /* gone */ } }
  $('#query-stop').disabled = true;
}

async function run(event) {
  event.preventDefault();
  await stop();
  rows.clear();
  $('#query-results tbody').replaceChildren();
  if (window.ampsMissing || !window.amps) {
    status('The AMPS JavaScript client is not installed: run `broker install-js-client` and reload.');
    return;
  }
  if (!websockets.length) { status('This broker has no websocket transport: add <Protocol>websocket</Protocol> to a Transport.'); return; }
  const topic = $('#query-topic').value.trim();
  const filter = $('#query-filter').value.trim() || undefined;
  const mode = $('#query-mode').value;
  if (!topic) { status('Name a topic.'); return; }
  const user = $('#query-user').value.trim();
  const credentials = user ? `${encodeURIComponent(user)}:${encodeURIComponent($('#query-password').value)}@` : '';
  const where = `${location.hostname}:${websockets[0].port}/amps/json`;
  const uri = `ws://${credentials}${where}`;  // the client logs on with the URI's user and password
  status(`connecting to ws://${user ? `${user}@` : ''}${where}…`);
  try {
    client = new window.amps.Client(`console-${Date.now()}`);
    client.errorHandler((e) => status(`error: ${e.message || e}`));
    await client.connect(uri);
    status('querying…');
    if (mode === 'sow') await client.sow(onMessage, topic, filter);
    else await client.sowAndSubscribe(onMessage, topic, filter, { options: 'oof' });
    $('#query-stop').disabled = false;
  } catch (e) {
    status(`failed: ${e.message || e}`);
    await stop();
  }
}

$('#query-form').addEventListener('submit', run);
$('#query-stop').addEventListener('click', () => { stop(); status('stopped'); });
loadHistory().then(poll);
