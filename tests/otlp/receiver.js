#!/usr/bin/env node
// A test OTLP/HTTP metrics receiver. It decodes each request with OpenTelemetry's own protocol
// definitions (opentelemetry-proto, compiled by protobufjs into @opentelemetry/otlp-transformer)
// and appends it, as JSON, one line per request, to OUT. Modes play a collector that works,
// refuses, is slow, or answers garbage.
//
//   node receiver.js OUT PORTFILE [ok|refuse|slow:MS|garbage]
//
// It listens on 127.0.0.1, on a free port it writes to PORTFILE, and runs until killed.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');

let root;
try {
  root = require(path.join(__dirname, 'node_modules/@opentelemetry/otlp-transformer/build/src/generated/root'));
} catch (e) {
  process.stderr.write('receiver: OpenTelemetry protocol definitions missing (npm ci in tests/otlp): ' + e.message + '\n');
  process.exit(77);
}
const Request = root.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest;
const Response = root.opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceResponse;

const [out, portFile, mode = 'ok'] = process.argv.slice(2);

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    let line;
    try {
      const msg = Request.decode(body);
      const obj = Request.toObject(msg, { longs: String, enums: String, defaults: false, arrays: true });
      line = JSON.stringify({ path: req.url, contentType: req.headers['content-type'] || '',
                              auth: req.headers['x-test-auth'] || '', request: obj });
    } catch (e) {
      line = JSON.stringify({ path: req.url, error: String(e) });
    }
    fs.appendFileSync(out, line + '\n');
    if (mode === 'refuse') {
      res.writeHead(503, { 'Content-Type': 'text/plain' });
      res.end('collector overloaded\n');
    } else if (mode.startsWith('slow:')) {
      setTimeout(() => { res.writeHead(200); res.end(Buffer.from(Response.encode({}).finish())); },
                 parseInt(mode.slice(5), 10));
    } else if (mode === 'garbage') {
      req.socket.end('\x00\x01 not http at all \xff\r\n\r\n');
    } else {
      res.writeHead(200, { 'Content-Type': 'application/x-protobuf' });
      res.end(Buffer.from(Response.encode({}).finish()));
    }
  });
});
server.listen(0, '127.0.0.1', () => {
  fs.writeFileSync(portFile + '.tmp', String(server.address().port));
  fs.renameSync(portFile + '.tmp', portFile);
});
