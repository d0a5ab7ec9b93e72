// The reference design's agents' client: the AI SDK's MCP client with nothing but a URL (the token in its path).
//
//   node ai_sdk_client.mjs <url>
//
// Lists the tools as AI SDK tools, runs consume (amount 5) and history through the tools' own execute, as a model's
// tool call would, and prints one JSON object on stdout. A failure prints the error on stderr and exits 1.
import { experimental_createMCPClient } from "@ai-sdk/mcp";

const [url] = process.argv.slice(2);
const uncaught = [];
const call = { toolCallId: "call-1", messages: [] };
let client;
try {
  client = await experimental_createMCPClient({
    transport: { type: "http", url },
    onUncaughtError: (error) => uncaught.push(String(error)),
  });
  const tools = await client.tools();
  const consume = await tools.consume.execute({ amount: 5, message: "へえ、いいね" }, call);
  const history = await tools.history.execute({}, call);
  await client.close();
  console.log(
    JSON.stringify({
      tools: Object.keys(tools),
      consume: consume.structuredContent,
      history: history.structuredContent,
      uncaught,
    }),
  );
} catch (error) {
  console.error(String(error));
  process.exitCode = 1;
  await client?.close().catch(() => {});
}
