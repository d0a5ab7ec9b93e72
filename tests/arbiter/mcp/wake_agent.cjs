// The reference design's agent as far as waking goes: `new WebSocket(WS_URL)` with the npm ws package, a turn on
// every "message" event. Here each frame is printed instead, one line each ("text <data>" or "binary <data>").
// Usage: node wake_agent.cjs <path to the ws package> <WS_URL>
const WebSocket = require(process.argv[2]);
const ws = new WebSocket(process.argv[3]);
ws.on("open", () => console.log("open"));
ws.on("message", (data, isBinary) => console.log(`${isBinary ? "binary" : "text"} ${data}`));
ws.on("close", (code) => console.log(`close ${code}`));
ws.on("error", (error) => {
  console.error(error.message);
  process.exitCode = 1;
});
