// One TypeScript SDK client kept across an arbiter's restart: what a long-running agent sees.
//
//   node restart_client.mjs <url> <token>
//
// Connects and calls status, prints {"first": ...} as a line, then waits for a line on stdin (the test restarts the
// arbiter meanwhile), calls status again on the same client, and prints {"second": ...} or {"error": ...} with the
// transport's errors in between. It never reconnects by hand: the client has to cope by itself.
import readline from "node:readline";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "aizuchi-tests", version: "0" });
const transportErrors = [];
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const status = async () => (await client.callTool({ name: "status", arguments: {} })).structuredContent;

await client.connect(transport);
transport.onerror = (error) => transportErrors.push(String(error));
console.log(JSON.stringify({ first: await status(), sessionId: transport.sessionId ?? null }));
await lines.next();
try {
  console.log(JSON.stringify({ second: await status(), sessionId: transport.sessionId ?? null, transportErrors }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error), sessionId: transport.sessionId ?? null, transportErrors }));
}
await client.close().catch(() => {});
process.exit(0);
