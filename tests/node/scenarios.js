// Scenarios for the npm `amps` JavaScript client against a broker's websocket transport.
// Usage: node scenarios.js <scenario> <ws-uri> [topic]; prints one JSON line with what the client saw.
// AMPS_JS names the folder holding node_modules/amps (the tests install it there).
'use strict';
const path = require('path');
const { Client, Command } = require(path.join(process.env.AMPS_JS, 'node_modules', 'amps'));

const [scenario, uri, topic] = process.argv.slice(2);
const DEADLINE_MS = 20000;

// Resolve once `ready()` holds (checked on every message), or at the deadline with what arrived:
// the Python test asserts on the output, so a missing message shows as a wrong list, not a hang.
function until(ready) {
  return new Promise((resolve) => {
    const start = Date.now();
    const tick = () => (ready() || Date.now() - start > DEADLINE_MS ? resolve() : setTimeout(tick, 5));
    tick();
  });
}

async function client(name) {
  const c = new Client(`${name}-${process.pid}`);
  const errors = [];
  c.errorHandler((e) => errors.push(String(e && e.message ? e.message : e)));
  await c.connect(uri);
  c.errors = errors;
  return c;
}

const row = (m) => ({
  c: m.header.command(),
  data: m.data,
  reason: m.header.reason ? m.header.reason() : undefined,
  key: m.header.sowKey ? m.header.sowKey() : undefined,
  bm: m.header.bookmark ? m.header.bookmark() : undefined,
});

const scenarios = {
  async logon() {
    const c = await client('logon');
    const out = { name: c.name(), version: c.serverVersion(), errors: c.errors };
    await c.disconnect();
    return out;
  },

  async subscribe_filter() {
    const sub = await client('sub');
    const pub = await client('pub');
    const got = [];
    await sub.subscribe((m) => got.push(row(m)), topic, '/qty > 5');
    for (const qty of [1, 10, 3, 20]) pub.publish(topic, { id: qty, qty });
    pub.publish(topic, { id: 'end', qty: 1000 });
    await until(() => got.some((r) => r.data.id === 'end'));
    const out = { got, errors: sub.errors.concat(pub.errors) };
    await sub.disconnect();
    await pub.disconnect();
    return out;
  },

  async sow() {
    const c = await client('sow');
    for (let id = 1; id <= 5; id++) c.publish(topic, { id, qty: id * 10, sym: id % 2 ? 'IBM' : 'MSFT' });
    await c.flush();
    const got = [];
    let done = false;
    await c.sow((m) => { if (m.header.command() === 'group_end') done = true; else got.push(row(m)); },
      topic, '/sym = "IBM"', { orderBy: '/id' });
    await until(() => done);
    await c.disconnect();
    return { got, errors: c.errors };
  },

  async sow_and_subscribe_oof() {
    const pub = await client('pub');
    pub.publish(topic, { id: 1, state: 'open', qty: 1 });
    pub.publish(topic, { id: 2, state: 'open', qty: 2 });
    pub.publish(topic, { id: 3, state: 'done', qty: 3 });
    await pub.flush();
    const sub = await client('sub');
    const got = [];
    await sub.sowAndSubscribe((m) => got.push(row(m)), topic, '/state = "open"', { options: 'oof', orderBy: '/id' });
    await until(() => got.some((r) => r.c === 'group_end'));
    pub.publish(topic, { id: 1, state: 'open', qty: 10 }); // changes, stays in the view
    pub.publish(topic, { id: 2, state: 'done', qty: 2 }); // leaves the view: oof
    pub.publish(topic, { id: 3, state: 'open', qty: 3 }); // enters the view
    pub.sowDelete(topic, '/id = 1'); // deleted: oof
    await until(() => got.filter((r) => r.c === 'oof').length >= 2 && got.some((r) => r.c === 'p' && r.data.id === 3));
    const out = { got, errors: sub.errors.concat(pub.errors) };
    await sub.disconnect();
    await pub.disconnect();
    return out;
  },

  async sow_delete() {
    const c = await client('del');
    for (let id = 1; id <= 4; id++) c.publish(topic, { id, qty: id });
    await c.flush();
    const ack = await c.sowDelete(topic, '/qty >= 3');
    const got = [];
    let done = false;
    await c.sow((m) => { if (m.header.command() === 'group_end') done = true; else if (m.header.command() === 'sow') got.push(m.data); },
      topic, null, { orderBy: '/id' });
    await until(() => done);
    await c.disconnect();
    return { ack: { status: ack.header.status(), deleted: ack.header.recordsDeleted ? ack.header.recordsDeleted() : undefined,
      matches: ack.header.matches ? ack.header.matches() : undefined }, remaining: got, errors: c.errors };
  },

  async bookmark_epoch() {
    const pub = await client('pub');
    for (let n = 1; n <= 3; n++) pub.publish(topic, { n });
    await pub.flush('persisted');
    const sub = await client('sub');
    const got = [];
    await sub.subscribe((m) => got.push(row(m)), topic, null, { bookmark: Client.Bookmarks.EPOCH });
    await until(() => got.length >= 3);
    pub.publish(topic, { n: 4 }); // live, after the replay
    await until(() => got.length >= 4);
    const out = { got, errors: sub.errors.concat(pub.errors) };
    await sub.disconnect();
    await pub.disconnect();
    return out;
  },

  async delta_subscribe() {
    const pub = await client('pub');
    pub.publish(topic, { id: 1, sym: 'IBM', qty: 10, px: 100.5 });
    await pub.flush();
    const sub = await client('sub');
    const got = [];
    await sub.deltaSubscribe((m) => got.push(row(m)), topic);
    pub.publish(topic, { id: 1, sym: 'IBM', qty: 20, px: 100.5 });
    pub.publish(topic, { id: 2, sym: 'MSFT', qty: 5, px: 30.0 });
    await until(() => got.length >= 2);
    const out = { got, errors: sub.errors.concat(pub.errors) };
    await sub.disconnect();
    await pub.disconnect();
    return out;
  },

  async xml_binary_mode() {
    // A message type other than json: the client says "binary" and gets its data in binary messages.
    const xmlUri = uri.replace('/amps/json', '/amps/xml');
    const sub = new Client(`xml-sub-${process.pid}`);
    await sub.connect(xmlUri);
    const pub = new Client(`xml-pub-${process.pid}`);
    await pub.connect(xmlUri);
    const got = [];
    await sub.subscribe((m) => got.push({ c: m.header.command(), binary: typeof m.data !== 'string',
      data: Buffer.from(m.data).toString() }), topic, '/order/qty > 5');
    pub.publish(topic, '<order><id>1</id><qty>1</qty></order>');
    pub.publish(topic, '<order><id>2</id><qty>10</qty></order>');
    pub.publish(topic, '<order><id>end</id><qty>99</qty></order>');
    await until(() => got.some((r) => r.data.includes('end')));
    await sub.disconnect();
    await pub.disconnect();
    return { got, errors: [] };
  },
};

scenarios[scenario]()
  // A pipe is written asynchronously: exit once the whole line is out.
  .then((out) => process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0)))
  .catch((e) => process.stdout.write(JSON.stringify({ failed: String(e && e.message ? e.message : e) }) + '\n',
    () => process.exit(1)));
