// The official TypeScript SDK's client over Streamable HTTP, as an agent written against it connects: the token in
// the Authorization header (requestInit.headers), or in the URL and no header.
//
//   node sdk_client.mjs <url> [token]
//
// Lists the tools, calls status, consume (amount 5, "うん") and history, and prints one JSON object on stdout. A
// failure prints the error as the SDK words it on stderr and exits 1.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : undefined;
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
const client = new Client({ name: "aizuchi-tests", version: "0" });
const transportErrors = [];
try {
  await client.connect(transport);
  transport.onerror = (error) => transportErrors.push(String(error));
  const tools = (await client.listTools()).tools.map((tool) => tool.name);
  const status = await client.callTool({ name: "status", arguments: {} });
  const consume = await client.callTool({ name: "consume", arguments: { amount: 5, message: "うん" } });
  const history = await client.callTool({ name: "history", arguments: {} });
  const answer = {
    sessionId: transport.sessionId ?? null,
    protocolVersion: transport.protocolVersion ?? null,
    tools,
    status: status.structuredContent,
    consume: consume.structuredContent,
    history: history.structuredContent,
    transportErrors,
  };
  await client.close();
  console.log(JSON.stringify(answer));
} catch (error) {
  console.error(String(error));
  process.exitCode = 1;
  await client.close().catch(() => {});
}
