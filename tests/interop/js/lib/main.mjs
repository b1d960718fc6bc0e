// Runs one command: routing event, node, command, summary line, exit code.

import { emit, errorText, log, parseArgs, routing, routingEvent, StepError, UsageError, withTimeout } from "./cli.mjs";

const EXIT_OK = 0;
const EXIT_FAILED = 1;
const EXIT_USAGE = 2;

let finished = false;

function finish(state, code) {
  if (finished) return;
  finished = true;
  emit(state.summary);
  // libp2p keeps timers and sockets alive; exit explicitly (stdout writes to pipes/files are synchronous).
  process.exit(code);
}

export async function main(argv) {
  const state = { summary: { command: argv[0] ?? null, ok: false, error: null } };
  let parsed;
  try {
    parsed = parseArgs(argv);
  } catch (err) {
    state.summary.error = err instanceof UsageError ? err.message : errorText(err);
    finish(state, EXIT_USAGE);
    return;
  }
  const { command, opts } = parsed;
  const s = state.summary;
  s.peer = opts.peer;
  s.content_topic = opts.contentTopic;
  s.cluster_id = opts.clusterId;
  s.num_shards_in_cluster = opts.shards;
  s.connected = false;

  let r;
  try {
    r = routing(opts);
  } catch (err) {
    s.error = `routing: ${errorText(err)}`;
    finish(state, EXIT_USAGE);
    return;
  }
  s.pubsub_topic = r.pubsubTopic;
  s.shard = r.shard;
  s.autosharding = r.autosharding;
  emit(routingEvent(opts, r));

  // Hard stop, whatever hangs (a stream the peer never closes, a stuck stop()).
  const budget = (opts.timeout * 3 + (command === "filter" ? opts.seconds : 0) + opts.linger + 15) * 1000;
  const watchdog = setTimeout(() => {
    s.error = s.error ?? `watchdog: command did not finish within ${budget / 1000} s`;
    s.ok = false;
    finish(state, EXIT_FAILED);
  }, budget);
  watchdog.unref?.();

  process.on("unhandledRejection", (err) => log(`unhandled rejection (ignored): ${errorText(err)}`));
  process.on("uncaughtException", (err) => {
    log(err?.stack ?? err);
    s.ok = false;
    s.error = s.error ?? `uncaught exception: ${errorText(err)}`;
    finish(state, EXIT_FAILED);
  });
  // SIGINT/SIGTERM: a command in its collection window (filter) ends the window early and
  // finishes normally; anywhere else the summary so far is printed with an error, exit 1.
  for (const sig of ["SIGINT", "SIGTERM"]) {
    process.on(sig, () => {
      if (state.onSignal) {
        log(`${sig}: ending the collection window early`);
        state.onSignal(sig);
        return;
      }
      s.ok = false;
      s.error = s.error ?? `interrupted by ${sig}`;
      finish(state, EXIT_FAILED);
    });
  }

  let node;
  let code = EXIT_FAILED;
  try {
    if (command === "relay-publish") {
      const relay = await import("./relay.mjs");
      node = await relay.createRelay(opts, r);
      await relay.cmdRelayPublish(node, opts, r, state);
    } else {
      const light = await import("./light.mjs");
      node = await light.createNode(opts, r, command === "px");
      const run = {
        info: light.cmdInfo,
        filter: light.cmdFilter,
        store: light.cmdStore,
        lightpush: light.cmdLightpush,
        px: light.cmdPx,
      }[command];
      await run(node, opts, r, state);
    }
    s.ok = true;
    code = EXIT_OK;
  } catch (err) {
    s.ok = false;
    s.error = err instanceof StepError ? err.message : `unexpected: ${errorText(err)}`;
    if (!(err instanceof StepError)) log(err?.stack ?? err);
  }
  if (command === "info") {
    // info succeeds when it connected and identified the peer.
    s.ok = Boolean(s.connected && s.protocols);
    code = s.ok ? EXIT_OK : EXIT_FAILED;
  }
  if (node) {
    try {
      await withTimeout(node.stop(), 5000, "node stop");
    } catch (err) {
      log(`stopping the node: ${errorText(err)}`);
    }
  }
  finish(state, code);
}
