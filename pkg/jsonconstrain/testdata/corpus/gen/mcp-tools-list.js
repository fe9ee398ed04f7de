// Runs an MCP server over stdio, sends initialize + tools/list, prints the result.
const { spawn } = require("child_process");
const [,, script, ...args] = process.argv;
const env = Object.assign({}, process.env, {
  BRAVE_API_KEY: "dummy", SLACK_BOT_TOKEN: "dummy", SLACK_TEAM_ID: "dummy",
  GOOGLE_MAPS_API_KEY: "dummy", GITHUB_PERSONAL_ACCESS_TOKEN: "dummy",
  MEMORY_FILE_PATH: "/tmp/corpus-work/memory.json",
});
const p = spawn("node", [script, ...args], { env, stdio: ["pipe", "pipe", "pipe"], cwd: "/tmp/corpus-work/fsroot" });
let buf = "";
let stderr = "";
p.stderr.on("data", d => stderr += d);
const send = m => p.stdin.write(JSON.stringify(m) + "\n");
p.stdout.on("data", d => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, i); buf = buf.slice(i + 1);
    if (!line.trim()) continue;
    const m = JSON.parse(line);
    if (m.id === 1) {
      send({ jsonrpc: "2.0", method: "notifications/initialized" });
      send({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} });
    } else if (m.id === 2) {
      process.stdout.write(JSON.stringify({ serverInfo: global.info, protocolVersion: global.pv, tools: m.result.tools }, null, 2));
      p.kill(); process.exit(0);
    }
    if (m.id === 1) { global.info = m.result.serverInfo; global.pv = m.result.protocolVersion; }
  }
});
send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "nvmai-corpus", version: "0" } } });
setTimeout(() => { console.error("timeout; stderr:", stderr); p.kill(); process.exit(1); }, 20000);
