// Node with no proxy: dns.lookup, then tls.connect to the address it gave,
// with the host as servername, trusting TEST_CA. Prints the body of
// /hello.txt and "via ADDR"; on failure, the error's code and message.
const dns = require("node:dns");
const fs = require("node:fs");
const tls = require("node:tls");

const host = process.argv[2];
const fail = (e) => { console.error(`${e.code} ${e.message}`); process.exit(1); };
dns.lookup(host, (err, address) => {
  if (err) return fail(err);
  const socket = tls.connect({ host: address, port: 443, servername: host, ca: fs.readFileSync(process.env.TEST_CA) }, () => {
    socket.write(`GET /hello.txt HTTP/1.0\r\nHost: ${host}\r\n\r\n`);
  });
  const chunks = [];
  socket.on("data", (c) => chunks.push(c));
  socket.on("error", fail);
  socket.on("end", () => {
    const [head, body] = Buffer.concat(chunks).toString().split("\r\n\r\n");
    if (!/^HTTP\/1\.[01] 200/.test(head)) return fail(new Error(head));
    process.stdout.write(body);
    console.log(`via ${address}`);
  });
});
