// Parses the AsyncAPI document on standard input with the reference parser
// (@asyncapi/parser, pinned in package.json) and prints one JSON object:
// {"errors": [...], "warnings": [...], "messages": [{"id", "payload", "schemaFormat"}],
// "channels": [...], "operations": [...]}.
// app/asyncapi's tests run it; it exits 0 whenever it could report.
'use strict';
const { Parser } = require('@asyncapi/parser');

async function main() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  const text = Buffer.concat(chunks).toString('utf8');
  const parser = new Parser();
  const { document, diagnostics } = await parser.parse(text);
  const fmt = (d) => ({ code: d.code, message: d.message, path: (d.path || []).join('.') });
  const out = {
    errors: diagnostics.filter((d) => d.severity === 0).map(fmt),
    warnings: diagnostics.filter((d) => d.severity === 1).map(fmt),
    messages: [],
  };
  if (document) {
    for (const m of document.allMessages()) {
      out.messages.push({ id: m.id(), payload: m.hasPayload(), schemaFormat: m.schemaFormat() });
    }
    out.channels = document.channels().all().map((c) => c.id());
    out.operations = document.operations().all().map((o) => o.id());
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [{ code: 'exception', message: String(err && err.stack || err) }] }));
});
