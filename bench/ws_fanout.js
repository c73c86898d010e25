// W5 over WebSocket: `clients` connections of the npm amps client, each subscribed to `topic`; prints
// "ready" once all are subscribed, then one JSON line when each got `expected` messages (or at the timeout):
// {"counts": [...], "last_ns": [...], "latencies": [...], "cpu_s": ...} with latencies = receive time - the
// document's send time (bench/messages.py: {"ts":<time.time_ns()>,...}), in nanoseconds, and cpu_s this
// process's CPU seconds from "ready" to the last message (whether the subscriber is the limit).
// Usage: AMPS_JS=<folder with node_modules/amps> node ws_fanout.js <ws-uri> <topic> <clients> <expected> <timeout-s>
'use strict';
const path = require('path');
const { Client } = require(path.join(process.env.AMPS_JS, 'node_modules', 'amps'));

const [uri, topic, clientsText, expectedText, timeoutText] = process.argv.slice(2);
const clients = Number(clientsText), expected = Number(expectedText);
const nowNs = () => (performance.timeOrigin + performance.now()) * 1e6;

(async () => {
  const counts = new Array(clients).fill(0), lastNs = new Array(clients).fill(0), latencies = [];
  const opened = [];
  let finished = 0;
  let finish;
  const allDone = new Promise((resolve) => { finish = resolve; });
  for (let i = 0; i < clients; i++) {
    const c = new Client(`ws-fanout-${process.pid}-${i}`);
    await c.connect(uri);
    opened.push(c);
    await c.subscribe((m) => {
      const now = nowNs();
      latencies.push(now - m.data.ts);
      if (++counts[i] === expected) {
        lastNs[i] = now;
        if (++finished === clients) finish();
      }
    }, topic);
  }
  process.stdout.write('ready\n');
  const cpu0 = process.cpuUsage();
  await Promise.race([allDone, new Promise((r) => setTimeout(r, Number(timeoutText) * 1000))]);
  const cpu = process.cpuUsage(cpu0);
  const out = JSON.stringify({ counts, last_ns: lastNs, latencies: latencies.map(Math.round),
    cpu_s: (cpu.user + cpu.system) / 1e6 }) + '\n';
  await Promise.all(opened.map((c) => c.disconnect().catch(() => {})));
  // A pipe is written asynchronously: exit once the whole line is out.
  process.stdout.write(out, () => process.exit(0));
})().catch((e) => { process.stdout.write(`error ${e && e.message ? e.message : e}\n`); process.exit(1); });
