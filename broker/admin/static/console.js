// The broker's web console: polls /console/state.json and draws it; the query panel runs sow and
// sow_and_subscribe through the AMPS JavaScript client (window.amps, served from /console/vendor/amps.js)
// over the broker's websocket transport. Plain browser JavaScript, no build step.
'use strict';

const POINTS = 120;
const history = [];  // {t, in, out} per statistics sample
let lastTaken = null;
let websockets = [];

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

function render(state) {
  $('#instance-name').textContent = state.instance.name || '';
  $('#instance-meta').textContent = `v${state.instance.version} · pid ${state.instance.pid} · up ${ago(state.instance.start_time).replace(' ago', '')}`;
  $('#total-in').textContent = num(state.totals.in_per_sec, 1);
  $('#total-out').textContent = num(state.totals.out_per_sec, 1);
  $('#total-clients').textContent = state.totals.clients;
  websockets = state.websockets || [];

  fillTable('topics', state.topics.map((t) => el('tr', { 'data-topic': t.name },
    el('td', {}, t.name), el('td', { class: 'num sow-records' }, num(t.sow_records)),
    el('td', { class: 'num in-rate' }, num(t.in_per_sec, 1)), el('td', { class: 'num out-rate' }, num(t.out_per_sec, 1)),
    el('td', { class: 'num' }, num(t.messages_received)), el('td', { class: 'num' }, num(t.messages_delivered)))));

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
    fillTable('journal', j.files.slice().reverse().map((f) => el('tr', {},
      el('td', {}, f.name), el('td', { class: `state-${f.state}` }, f.state), el('td', { class: 'num' }, bytes(f.size)))));
  }
  fillTable('actions', state.actions.map((a) => el('tr', { 'data-action': a.name },
    el('td', {}, a.name), el('td', { class: 'num' }, num(a.runs)), el('td', { class: 'num' }, num(a.failures)),
    el('td', {}, ago(a.last_run_start)), el('td', { class: 'num' }, a.last_run_duration === null ? '–' : `${a.last_run_duration.toFixed(2)} s`),
    el('td', {}, a.running ? 'running' : ''))));

  if (state.taken_at !== lastTaken && state.interval) {
    history.push({ in: state.totals.in_per_sec, out: state.totals.out_per_sec });
    if (history.length > POINTS) history.shift();
    drawChart();
  }
  lastTaken = state.taken_at;
}

function drawChart() {
  const svg = $('#rate-chart');
  const W = 800, H = 180, pad = 6;
  const peak = Math.max(1, ...history.map((p) => Math.max(p.in, p.out)));
  const step = 10 ** Math.floor(Math.log10(peak * 1.25));
  const top = Math.ceil((peak * 1.25) / step) * step;  // headroom, rounded to a readable figure
  // The newest point at the right edge; older ones scroll left.
  const x = (i) => W - pad - (W - 2 * pad) * ((history.length - 1 - i) / (POINTS - 1));
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
  svg.dataset.lastIn = last.in; svg.dataset.lastOut = last.out; svg.dataset.points = history.length;
  $('#chart-scale').textContent = `top of the chart: ${num(top, 1)}/s · one point per statistics sample`;
}

async function poll() {
  try {
    const r = await fetch('/console/state.json', { cache: 'no-store' });
    if (r.ok) render(await r.json());
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
poll();
