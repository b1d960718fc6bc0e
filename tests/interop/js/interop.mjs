#!/usr/bin/env node
// js-waku reference client for interop tests against the bridge. See README.md beside this file.
//
//   tests/interop/js/node_modules/.bin/node tests/interop/js/interop.mjs <command> --peer <multiaddr> [flags]
//
// stdout: JSON lines, the last one the summary; stderr: logs. Exit 0 ok, 1 a step failed, 2 usage.

// js-waku logs through `debug`; show its warnings and errors on stderr unless DEBUG says otherwise.
// Set before js-waku is imported (debug reads DEBUG once, at load).
if (process.env.DEBUG === undefined) process.env.DEBUG = "waku:*error,waku:*warn";

const major = Number(process.versions.node.split(".")[0]);
if (major < 22) {
  process.stdout.write(
    `${JSON.stringify({ command: process.argv[2] ?? null, ok: false, error: `node ${process.versions.node} is too old; run tests/interop/js/node_modules/.bin/node (>= 22)` })}\n`,
  );
  process.exit(2);
}

const { main } = await import("./lib/main.mjs");
await main(process.argv.slice(2));
