// A small MCP server on stdio, in Node: for the sandbox's memory bound (V8 reserves far more address
// space than it uses, so RLIMIT_AS kills it at start; a cgroup bounds what it really uses).
//   echo {text}      the text back
//   hold {mb}        allocate and touch `mb` MiB, keep it, and say so
const readline = require("readline");
const held = [];
const tools = [
  {
    name: "echo",
    description: "Say the text back.",
    inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
  },
  {
    name: "hold",
    description: "Allocate and keep some memory.",
    inputSchema: { type: "object", properties: { mb: { type: "integer", minimum: 1 } }, required: ["mb"] },
  },
];

function answer(id, result) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id, result }) + "\n");
}

function call(name, args) {
  if (name === "echo") return args.text;
  const block = Buffer.alloc(args.mb * 1024 * 1024, 1);
  held.push(block);
  return `held ${held.length * args.mb} MiB (rss ${Math.round(process.memoryUsage().rss / 1048576)} MiB)`;
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const msg = JSON.parse(line);
  if (msg.id === undefined) return; // notifications
  if (msg.method === "initialize") {
    answer(msg.id, {
      protocolVersion: msg.params.protocolVersion,
      capabilities: { tools: {} },
      serverInfo: { name: "node-test", version: process.version },
    });
  } else if (msg.method === "tools/list") {
    answer(msg.id, { tools });
  } else if (msg.method === "tools/call") {
    answer(msg.id, { content: [{ type: "text", text: call(msg.params.name, msg.params.arguments) }] });
  } else if (msg.method === "ping") {
    answer(msg.id, {});
  } else {
    process.stdout.write(
      JSON.stringify({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } }) + "\n"
    );
  }
});
