// Shared plumbing for the interop CLI: flags, JSON-lines output, routing, messages, the watchdog.
//
// stdout carries only JSON lines (one object per line, the last one the summary); everything
// else (our logs, js-waku's console.info banners, libp2p noise) goes to stderr.

import { randomBytes } from "node:crypto";

import { utils, waku as wakuCore } from "@waku/sdk";

// Route every console method that would print to stdout onto stderr, so nothing but our JSON
// lines ever reaches stdout (js-waku prints console.info banners from createLibp2p).
for (const name of ["log", "info", "debug", "trace", "dir", "table"]) {
  console[name] = (...args) => console.error(...args);
}

export const COMMANDS = ["info", "filter", "store", "lightpush", "relay-publish", "px"];

const DEFAULTS = {
  peer: undefined,
  clusterId: 1,
  shards: 8,
  contentTopic: "/interop/1/test/proto",
  pubsubTopic: undefined,
  timeout: 60,
  prefix: undefined,
  // filter
  seconds: 10,
  keepaliveMs: 60_000,
  // store
  pageSize: undefined,
  forward: true,
  maxPages: 1000,
  hashes: undefined, // comma-separated hex message hashes: a lookup by hash
  timeStartMs: undefined, // a time window, as js-waku takes it: Dates (milliseconds)
  timeEndMs: undefined,
  // lightpush / relay-publish
  count: 1,
  lightpushVersion: "auto",
  linger: 2,
};

// flag name -> [option key, kind]
const FLAGS = {
  "--peer": ["peer", "string"],
  "--cluster-id": ["clusterId", "int"],
  "--shards": ["shards", "int"],
  "--content-topic": ["contentTopic", "string"],
  "--pubsub-topic": ["pubsubTopic", "string"],
  "--timeout": ["timeout", "number"],
  "--prefix": ["prefix", "string"],
  "--seconds": ["seconds", "number"],
  "--keepalive-ms": ["keepaliveMs", "int"],
  "--page-size": ["pageSize", "int"],
  "--max-pages": ["maxPages", "int"],
  "--hashes": ["hashes", "string"],
  "--time-start-ms": ["timeStartMs", "number"],
  "--time-end-ms": ["timeEndMs", "number"],
  "--count": ["count", "int"],
  "--lightpush-version": ["lightpushVersion", "string"],
  "--linger": ["linger", "number"],
};

export class UsageError extends Error {}

/** A step of the command failed: the summary carries `error` and the exit code is 1. */
export class StepError extends Error {}

export function parseArgs(argv) {
  const [command, ...rest] = argv;
  if (!command || command === "-h" || command === "--help") {
    throw new UsageError(`usage: interop.mjs <${COMMANDS.join("|")}> --peer <multiaddr> [flags] (see README.md)`);
  }
  if (!COMMANDS.includes(command)) {
    throw new UsageError(`unknown command ${JSON.stringify(command)}; expected one of ${COMMANDS.join(", ")}`);
  }
  const opts = { ...DEFAULTS };
  for (let i = 0; i < rest.length; i++) {
    let arg = rest[i];
    let value;
    const eq = arg.indexOf("=");
    if (arg.startsWith("--") && eq > 0) {
      value = arg.slice(eq + 1);
      arg = arg.slice(0, eq);
    }
    if (arg === "--forget-peer-shards") {
      // filter: after the metadata handshake, drop the peer's shards from js-waku's peer store, so
      // that js-waku picks the peer for any pubsub topic (as it does a peer whose metadata it has
      // not got) and the peer itself answers a subscription on a shard it does not serve.
      if (value !== undefined) throw new UsageError(`${arg} takes no value`);
      opts.forgetPeerShards = true;
      continue;
    }
    if (arg === "--forward" || arg === "--backward") {
      if (value !== undefined) throw new UsageError(`${arg} takes no value`);
      opts.forward = arg === "--forward";
      continue;
    }
    const spec = FLAGS[arg];
    if (!spec) throw new UsageError(`unknown flag ${arg}`);
    if (value === undefined) {
      if (i + 1 >= rest.length) throw new UsageError(`${arg} needs a value`);
      value = rest[++i];
    }
    const [key, kind] = spec;
    if (kind === "int") {
      if (!/^-?\d+$/.test(value)) throw new UsageError(`${arg} needs an integer, got ${JSON.stringify(value)}`);
      opts[key] = Number.parseInt(value, 10);
    } else if (kind === "number") {
      const n = Number(value);
      if (value === "" || !Number.isFinite(n)) throw new UsageError(`${arg} needs a number, got ${JSON.stringify(value)}`);
      opts[key] = n;
    } else {
      opts[key] = value;
    }
  }
  if (!opts.peer) throw new UsageError("--peer <multiaddr> is required");
  if (opts.shards < 1) throw new UsageError("--shards must be >= 1");
  if (opts.clusterId < 0) throw new UsageError("--cluster-id must be >= 0");
  if (opts.timeout <= 0) throw new UsageError("--timeout must be > 0");
  if (opts.count < 0) throw new UsageError("--count must be >= 0");
  if (opts.pageSize !== undefined && opts.pageSize < 1) throw new UsageError("--page-size must be >= 1");
  if (!["auto", "v3", "v2"].includes(opts.lightpushVersion)) {
    throw new UsageError("--lightpush-version must be auto, v3 or v2");
  }
  if (opts.prefix === undefined) opts.prefix = randomBytes(4).toString("hex");
  return { command, opts };
}

// ---------------------------------------------------------------------------------- output

function jsonReplacer(_key, value) {
  if (typeof value === "bigint") return value.toString();
  if (value instanceof Uint8Array) return `0x${Buffer.from(value).toString("hex")}`;
  return value;
}

export function emit(obj) {
  process.stdout.write(`${JSON.stringify(obj, jsonReplacer)}\n`);
}

export function log(...args) {
  const ts = new Date().toISOString();
  console.error(`${ts} interop:`, ...args);
}

export function errorText(err) {
  if (err === undefined || err === null) return String(err);
  if (err instanceof AggregateError && err.errors?.length) {
    return `${err.message}: ${err.errors.map(errorText).join("; ")}`;
  }
  if (err instanceof Error) return err.code ? `${err.message} (${err.code})` : err.message;
  return typeof err === "string" ? err : JSON.stringify(err, jsonReplacer);
}

// ---------------------------------------------------------------------------------- routing

/**
 * What js-waku's autosharding (RFC 51, numShardsInCluster from --shards) derives from the content
 * topic, and the pubsub topic the command will actually use (--pubsub-topic overrides).
 */
export function routing(opts) {
  const networkConfig = { clusterId: opts.clusterId, numShardsInCluster: opts.shards };
  const auto = utils.createRoutingInfo(networkConfig, { contentTopic: opts.contentTopic });
  let routingInfo = auto;
  if (opts.pubsubTopic !== undefined) {
    // Static-sharding routing info for an explicit /waku/2/rs/<cluster>/<shard> topic.
    routingInfo = utils.StaticShardingRoutingInfo.fromPubsubTopic(opts.pubsubTopic, {
      clusterId: opts.clusterId,
    });
  }
  return {
    networkConfig,
    routingInfo,
    pubsubTopic: routingInfo.pubsubTopic,
    shard: routingInfo.shardId,
    autosharding: { cluster_id: opts.clusterId, shard: auto.shardId, pubsub_topic: auto.pubsubTopic },
  };
}

export function routingEvent(opts, r) {
  return {
    event: "routing",
    content_topic: opts.contentTopic,
    cluster_id: opts.clusterId,
    num_shards_in_cluster: opts.shards,
    autosharding: r.autosharding,
    pubsub_topic: r.pubsubTopic,
    shard: r.shard,
    pubsub_topic_overridden: opts.pubsubTopic !== undefined,
  };
}

// ---------------------------------------------------------------------------------- messages

export function payloadText(prefix, index) {
  return `${prefix}-${index}`;
}

/** 0x-hex deterministic 14/WAKU2-MESSAGE hash of a proto message (bigint ns timestamp). */
export function hashHex(pubsubTopic, protoMessage) {
  return `0x${Buffer.from(wakuCore.messageHash(pubsubTopic, protoMessage)).toString("hex")}`;
}

export function bytesToText(bytes) {
  return bytes ? Buffer.from(bytes).toString("utf8") : "";
}

// ---------------------------------------------------------------------------------- timing

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export class TimeoutError extends Error {}

export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_resolve, reject) => {
    timer = setTimeout(() => reject(new TimeoutError(`timed out after ${ms / 1000} s: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
