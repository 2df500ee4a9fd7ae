// A foreign peer of the StackUp contract on RabbitMQ, written with Node's
// amqplib. Same plan and report as ../python/peer.py (read that file's
// docstring): bind its own queues and print "ready", publish without
// eventpipe's headers, serve a request queue as the AI server does (a reject
// without requeue for the sessions listed in rejectSessions), collect, and
// print one JSON line.
'use strict';
const amqp = require('amqplib');
const crypto = require('crypto');
const readline = require('readline');

function typed(v) {
  if (typeof v === 'boolean') return { type: 'bool', value: v };
  if (typeof v === 'number') return { type: Number.isInteger(v) ? 'int' : 'float', value: v };
  if (typeof v === 'string') return { type: 'str', value: v };
  if (Buffer.isBuffer(v)) return { type: 'bytes', value: v.toString('utf8') };
  if (Array.isArray(v)) return { type: 'list', value: v.map(typed) };
  if (v === null || v === undefined) return { type: 'void', value: null };
  if (v instanceof Date) return { type: 'timestamp', value: v.toISOString() };
  if (typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) out[k] = typed(x);
    return { type: 'table', value: out };
  }
  return { type: typeof v, value: String(v) };
}

function report(msg) {
  let body = msg.content.toString('utf8');
  try { body = JSON.parse(body); } catch (_) { /* text */ }
  const p = msg.properties;
  const headers = {};
  for (const [k, v] of Object.entries(p.headers || {})) headers[k] = typed(v);
  return {
    body, exchange: msg.fields.exchange, routingKey: msg.fields.routingKey,
    messageId: p.messageId, correlationId: p.correlationId, contentType: p.contentType,
    contentEncoding: p.contentEncoding, deliveryMode: p.deliveryMode, headers,
  };
}

// The plan spells a typed header as {"int": 2} or {"str": "2"}.
function headerValue(h) {
  if (h && typeof h === 'object' && Object.keys(h).length === 1) {
    const [kind, v] = Object.entries(h)[0];
    return kind === 'int' ? Number(v) : String(v);
  }
  return h;
}

async function main() {
  const rl = readline.createInterface({ input: process.stdin });
  const line = await new Promise((resolve) => rl.once('line', resolve));
  rl.close();
  const plan = JSON.parse(line);
  const conn = await amqp.connect(plan.url);
  const ch = await conn.createConfirmChannel();
  await ch.prefetch(10);
  const result = { collected: {}, served: [] };
  const expect = plan.expect || {};
  let resolveDone;
  const done = new Promise((resolve) => { resolveDone = resolve; });
  const check = () => {
    if (Object.entries(expect).every(([n, c]) => (result.collected[n] || []).length >= c)) resolveDone();
  };

  for (const b of plan.bind || []) {
    result.collected[b.name] = [];
    const q = await ch.assertQueue('', { exclusive: true, autoDelete: true });
    await ch.bindQueue(q.queue, b.exchange, b.routingKey);
    await ch.consume(q.queue, (msg) => {
      result.collected[b.name].push(report(msg));
      ch.ack(msg);
      check();
    });
  }
  process.stdout.write('ready\n');

  for (const p of plan.publish || []) {
    const headers = {};
    for (const [k, v] of Object.entries(p.headers || {})) headers[k] = headerValue(v);
    ch.publish(p.exchange, p.routingKey, Buffer.from(p.body), {
      messageId: p.messageId, contentType: p.contentType, persistent: true, headers,
    });
  }
  await ch.waitForConfirms();

  if (plan.serve) {
    const serve = plan.serve;
    let served = 0;
    await new Promise((resolve, reject) => {
      ch.consume(serve.queue, (msg) => {
        try {
          const env = JSON.parse(msg.content.toString('utf8'));
          const sid = env.payload.sessionId;
          if ((serve.rejectSessions || []).includes(sid)) {
            result.served.push({ rejected: env.messageId });
            ch.nack(msg, false, false); // reject without requeue: dead-lettered by the broker
          } else {
            const cb = {
              messageId: crypto.randomUUID(), messageType: 'callback.questions', version: 'v1', traceId: env.traceId,
              publishedAt: new Date().toISOString(), publisher: 'ai-server',
              payload: { sessionId: sid, kind: 'POOL', status: 'OK', questions: [
                { category: 'CS_FUNDAMENTAL', question: `peer question for ${sid}`, jobCategory: null, targetEvidence: '', expectedSignal: '' }] },
              context: env.context || {},
            };
            ch.publish('stackup.ai-to-core', 'callback.questions', Buffer.from(JSON.stringify(cb)), {
              messageId: cb.messageId, correlationId: env.messageId, contentType: 'application/json',
              contentEncoding: 'utf-8', persistent: true,
            });
            result.served.push({ answered: env.messageId, report: report(msg) });
            ch.ack(msg);
          }
        } catch (err) {
          ch.nack(msg, false, false);
        }
        served++;
        if (served >= serve.count) resolve();
      }).catch(reject);
    });
    await ch.waitForConfirms();
  }

  check();
  const timeout = new Promise((resolve) => setTimeout(() => resolve('timeout'), plan.timeoutMs || 30000));
  if (await Promise.race([done.then(() => 'done'), timeout]) === 'timeout') {
    result.error = `timed out waiting for ${JSON.stringify(expect)}`;
  }
  process.stdout.write(JSON.stringify(result) + '\n');
  await conn.close();
  process.exit(0);
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ error: String(err && err.stack || err) }) + '\n');
  process.exit(1);
});
