// The light-node commands (info, filter, store, lightpush), on @waku/sdk 0.0.36.

import { multiaddr } from "@multiformats/multiaddr";
import { createDecoder, createEncoder, createLightNode, Protocols, waku as wakuCore } from "@waku/sdk";

import {
  bytesToText,
  emit,
  errorText,
  hashHex,
  log,
  payloadText,
  sleep,
  StepError,
  TimeoutError,
  withTimeout,
} from "./cli.mjs";

export const CODECS = {
  filter: wakuCore.FilterCodecs.SUBSCRIBE,
  filterPush: wakuCore.FilterCodecs.PUSH,
  store: wakuCore.StoreCodec,
  lightpushV3: wakuCore.LightPushCodec,
  lightpushV2: wakuCore.LightPushCodecV2,
  metadata: wakuCore.MetadataCodec,
};

export async function createNode(opts, r, peerExchange = false) {
  return createLightNode({
    defaultBootstrap: false, // no DNS discovery, peer exchange or peer cache
    discovery: peerExchange ? { peerExchange: true } : undefined, // px: js-waku's peer-exchange discovery
    networkConfig: r.networkConfig, // autosharding: { clusterId, numShardsInCluster }
    numPeersToUse: 1,
    libp2p: {
      filterMultiaddrs: false, // otherwise only /wss addresses are dialable
      hideWebSocketInfo: true, // no console.info banners
    },
    filter: { keepAliveIntervalMs: opts.keepaliveMs },
    lightPush: { autoRetry: false }, // one attempt per message, no background re-sends
  });
}

function identifyOnce(libp2p, peerIdStr) {
  let cb;
  const promise = new Promise((resolve) => {
    cb = (evt) => {
      if (!peerIdStr || evt.detail.peerId.toString() === peerIdStr) resolve(evt.detail);
    };
    libp2p.addEventListener("peer:identify", cb);
  });
  return { promise, cancel: () => libp2p.removeEventListener("peer:identify", cb) };
}

/**
 * Dial --peer, wait for identify, run the metadata handshake and js-waku's own waitForPeers gate.
 * `needs` is { protocol: Protocols.X, codecs: [...] (any one suffices) } or null (info).
 * Returns { peerId, protocols, metadata }; state.summary gets the connection facts.
 */
export async function connect(node, opts, r, needs, state) {
  const timeoutMs = opts.timeout * 1000;
  const deadline = Date.now() + timeoutMs;
  const left = () => Math.max(1, deadline - Date.now());
  const ma = multiaddr(opts.peer);
  const peerIdStr = ma.getPeerId();
  const ident = identifyOnce(node.libp2p, peerIdStr);

  // js-waku's gate, started before dialing so that it takes its peer:identify path (started with a
  // connection already open it only checks metadata of already-identified peers and may resolve at once).
  let gate = null;
  if (needs) {
    gate = node.waitForPeers([needs.protocol], timeoutMs).then(
      () => ({ ok: true }),
      (err) => ({ ok: false, error: errorText(err) }),
    );
  }

  log(`dialing ${opts.peer}`);
  let conn;
  try {
    conn = await withTimeout(node.libp2p.dial(ma), left(), `dial ${opts.peer}`);
  } catch (err) {
    ident.cancel();
    throw new StepError(`dial failed: ${errorText(err)}`);
  }
  state.summary.connected = true;
  let identified;
  try {
    identified = await withTimeout(ident.promise, left(), "identify of the peer");
  } catch (err) {
    throw new StepError(`identify failed: ${errorText(err)}`);
  } finally {
    ident.cancel();
  }
  const peerId = identified.peerId;
  const protocols = [...identified.protocols].sort();
  state.summary.peer_id = peerId.toString();
  state.summary.protocols = protocols;
  emit({
    event: "connected",
    local_peer_id: node.libp2p.peerId.toString(),
    peer_id: peerId.toString(),
    remote_addr: conn.remoteAddr.toString(),
    encryption: conn.encryption,
    multiplexer: conn.multiplexer,
    agent_version: identified.agentVersion,
    protocol_version: identified.protocolVersion,
    protocols,
  });

  const metadata = await metadataHandshake(node, peerId, protocols, opts, r, left());
  state.summary.metadata = metadata;
  emit({ event: "metadata", ...metadata });

  if (needs) {
    const have = needs.codecs.filter((c) => protocols.includes(c));
    if (have.length === 0) {
      throw new StepError(`peer does not support ${needs.codecs.join(" or ")} (needed for ${needs.protocol})`);
    }
    if (metadata.supported && metadata.error) {
      throw new StepError(`metadata handshake failed: ${metadata.error}`);
    }
    const res = await withTimeout(gate, left(), `js-waku waitForPeers([${needs.protocol}])`).catch((err) => ({
      ok: false,
      error: errorText(err),
    }));
    if (!res.ok) throw new StepError(`js-waku waitForPeers([${needs.protocol}]) failed: ${res.error}`);
    emit({ event: "peer_ready", protocol: needs.protocol, codecs: have });
  }
  return { peerId, protocols, metadata };
}

/** The /vac/waku/metadata/1.0.0 exchange as js-waku does it (request {clusterId, shards: []}). */
async function metadataHandshake(node, peerId, protocols, opts, r, timeoutMs) {
  if (!protocols.includes(CODECS.metadata)) {
    return { supported: false, note: "peer does not advertise /vac/waku/metadata/1.0.0; js-waku then treats the peer as on every shard" };
  }
  const service = node.libp2p.services.metadata;
  try {
    const res = await withTimeout(service.confirmOrAttemptHandshake(peerId), timeoutMs, "metadata handshake");
    if (res.error || !res.shardInfo) {
      return { supported: true, error: String(res.error ?? "no shard info") };
    }
    const { clusterId, shards } = res.shardInfo;
    return {
      supported: true,
      // js-waku decodes an empty answer (peer closed the stream) as success with no cluster id.
      ...(clusterId === undefined ? { empty_response: true } : {}),
      cluster_id: clusterId ?? null,
      shards: [...(shards ?? [])],
      same_cluster: clusterId === opts.clusterId,
      on_shard: clusterId === opts.clusterId && (shards ?? []).includes(r.shard),
    };
  } catch (err) {
    return { supported: true, error: errorText(err) };
  }
}

// ---------------------------------------------------------------------------------- commands

export async function cmdInfo(node, opts, r, state) {
  await connect(node, opts, r, null, state);
  // js-waku assesses health 100 ms (debounced) after each peer:identify.
  await sleep(500);
  state.summary.health = node.health ?? null;
  state.summary.waku_is_connected = node.isConnected(); // always false on Node >= 21 (see README)
  state.summary.libp2p_connections = node.libp2p.getConnections().length;
}

export async function cmdFilter(node, opts, r, state) {
  const s = state.summary;
  s.received = 0;
  s.hashes = [];
  const { peerId } = await connect(node, opts, r, { protocol: Protocols.Filter, codecs: [CODECS.filter] }, state);
  if (opts.forgetPeerShards) {
    await node.libp2p.peerStore.merge(peerId, { metadata: { shardInfo: undefined } });
    emit({ event: "peer_shards_forgotten", peer_id: peerId.toString() });
  }
  const decoder = createDecoder(opts.contentTopic, r.routingInfo);
  const onMessage = (msg) => {
    if (!msg) return;
    const hash = hashHex(msg.pubsubTopic, msg.proto);
    s.received += 1;
    s.hashes.push(hash);
    emit({
      event: "push",
      hash,
      payload: bytesToText(msg.payload),
      content_topic: msg.contentTopic,
      pubsub_topic: msg.pubsubTopic,
      timestamp: msg.proto.timestamp ?? null,
      arrived_ms: Date.now(), // wall clock at the callback (latency = arrived_ms - timestamp / 1e6)
    });
  };
  const timeoutMs = opts.timeout * 1000;
  const subscribed = await withTimeout(node.filter.subscribe(decoder, onMessage), timeoutMs, "filter subscribe");
  s.subscribed = subscribed;
  if (!subscribed) {
    throw new StepError("filter subscribe failed (js-waku returned false: no usable filter peer or the peer rejected it; see stderr)");
  }
  emit({ event: "ready", pubsub_topic: decoder.pubsubTopic, content_topic: decoder.contentTopic });
  log(`subscribed; collecting pushes for ${opts.seconds} s`);
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, opts.seconds * 1000);
    state.onSignal = (sig) => {
      clearTimeout(timer);
      s.interrupted = sig;
      resolve();
    };
  });
  state.onSignal = null;
  const unsubscribed = await withTimeout(node.filter.unsubscribe(decoder), timeoutMs, "filter unsubscribe").catch(
    (err) => {
      log(`unsubscribe failed: ${errorText(err)}`);
      return false;
    },
  );
  s.unsubscribed = unsubscribed;
  if (!unsubscribed) throw new StepError("filter unsubscribe failed");
}

export async function cmdStore(node, opts, r, state) {
  const s = state.summary;
  s.messages = 0;
  s.pages = 0;
  s.hashes = [];
  s.forward = opts.forward;
  s.page_size = opts.pageSize ?? null;
  await connect(node, opts, r, { protocol: Protocols.Store, codecs: [CODECS.store] }, state);
  const decoder = createDecoder(opts.contentTopic, r.routingInfo);
  const queryOptions = { paginationForward: opts.forward };
  if (opts.pageSize !== undefined) queryOptions.paginationLimit = opts.pageSize;
  // js-waku sends a Date bound as BigInt(getTime() * 1e6), computed in float64.
  if (opts.timeStartMs !== undefined) queryOptions.timeStart = new Date(opts.timeStartMs);
  if (opts.timeEndMs !== undefined) queryOptions.timeEnd = new Date(opts.timeEndMs);
  if (opts.hashes) {
    // A lookup by hash: js-waku sends the decoder's pubsub topic along with the hashes.
    queryOptions.messageHashes = opts.hashes
      .split(",")
      .filter((h) => h)
      .map((h) => Uint8Array.from(Buffer.from(h.replace(/^0x/i, ""), "hex")));
  }
  const timeoutMs = opts.timeout * 1000;
  const seen = new Set();
  s.duplicates = 0;
  s.undecoded = 0;
  const gen = node.store.queryGenerator([decoder], queryOptions);
  try {
    while (true) {
      if (s.pages >= opts.maxPages) {
        throw new StepError(`more than --max-pages ${opts.maxPages} pages; stopped (is the cursor honoured?)`);
      }
      let step;
      try {
        step = await withTimeout(gen.next(), timeoutMs, `store page ${s.pages + 1}`);
      } catch (err) {
        if (err instanceof TimeoutError) throw new StepError(err.message);
        throw new StepError(`store query failed: ${errorText(err)}`);
      }
      if (step.done) break;
      const decoded = await Promise.all(step.value);
      const page = [];
      let undecoded = 0;
      let dupes = 0;
      for (const msg of decoded) {
        if (!msg) {
          undecoded += 1; // other content topic, version != 0 or no message body
          continue;
        }
        // js-waku sets msg.pubsubTopic from the response entry (empty when the server omits it).
        const hash = hashHex(msg.pubsubTopic || r.pubsubTopic, msg.proto);
        if (seen.has(hash)) dupes += 1;
        seen.add(hash);
        page.push(hash);
      }
      s.pages += 1;
      s.messages += page.length;
      s.undecoded += undecoded;
      s.duplicates += dupes;
      s.hashes.push(...page);
      emit({ event: "page", count: page.length, raw_count: step.value.length, undecoded, duplicates: dupes, hashes: page });
      if (page.length > 0 && dupes === page.length) {
        throw new StepError(`page ${s.pages} repeats earlier messages only; the cursor was not honoured`);
      }
    }
  } finally {
    await gen.return?.().catch(() => {});
  }
}

export async function cmdLightpush(node, opts, r, state) {
  const s = state.summary;
  s.pushed_ok = 0;
  s.failures = [];
  s.hashes = [];
  const codecs =
    opts.lightpushVersion === "v3"
      ? [CODECS.lightpushV3]
      : opts.lightpushVersion === "v2"
        ? [CODECS.lightpushV2]
        : [CODECS.lightpushV3, CODECS.lightpushV2];
  const { peerId, protocols } = await connect(node, opts, r, { protocol: Protocols.LightPush, codecs }, state);
  // js-waku (default) only picks peers advertising v3 and sends v3; with useLegacy it picks peers
  // advertising v2 and sends v2. "auto" = v3 when the peer has it, otherwise legacy v2.
  const useLegacy =
    opts.lightpushVersion === "v2" || (opts.lightpushVersion === "auto" && !protocols.includes(CODECS.lightpushV3));
  const used = await node.lightPush.protocol.getProtocol(peerId, useLegacy);
  s.use_legacy = useLegacy;
  s.protocol = used ?? null;
  emit({ event: "lightpush_protocol", protocol: used ?? null, use_legacy: useLegacy });
  const encoder = createEncoder({ contentTopic: opts.contentTopic, routingInfo: r.routingInfo });
  const timeoutMs = opts.timeout * 1000;
  for (let i = 0; i < opts.count; i++) {
    const payload = payloadText(opts.prefix, i);
    const message = { payload: new TextEncoder().encode(payload), timestamp: new Date() };
    // The same proto message js-waku builds (explicit timestamp, so the hash is deterministic).
    const hash = hashHex(encoder.pubsubTopic, await encoder.toProtoObj(message));
    let result;
    try {
      result = await withTimeout(
        node.lightPush.send(encoder, message, { autoRetry: false, useLegacy }),
        timeoutMs,
        `lightpush of message ${i}`,
      );
    } catch (err) {
      result = { successes: [], failures: [{ error: errorText(err) }] };
    }
    const ok = result.successes.length > 0;
    if (ok) {
      s.pushed_ok += 1;
      s.hashes.push(hash);
    }
    const errors = result.failures.map((f) => String(f.error));
    if (!ok) s.failures.push({ index: i, payload, hash, errors });
    emit({ event: "pushed", index: i, payload, hash, ok, errors });
  }
  if (s.pushed_ok !== opts.count) {
    throw new StepError(`${opts.count - s.pushed_ok} of ${opts.count} lightpush requests failed`);
  }
}

/**
 * px: js-waku's peer-exchange discovery asks --peer (once identified) for peers; every peer it
 * discovers is reported (its ENR decoded by js-waku) and dialled.
 */
export async function cmdPx(node, opts, r, state) {
  const s = state.summary;
  s.peers = [];
  const seen = new Map();
  node.libp2p.addEventListener("peer:discovery", (evt) => {
    const id = evt.detail.id.toString();
    if (!seen.has(id)) seen.set(id, evt.detail.multiaddrs.map((m) => m.toString()));
  });
  const { peerId } = await connect(node, opts, r, null, state);
  const deadline = Date.now() + opts.timeout * 1000;
  while (Date.now() < deadline && [...seen.keys()].every((id) => id === peerId.toString())) await sleep(100);
  for (const [id, addrs] of seen) {
    if (id === peerId.toString()) continue;
    const p = { peer: id, addrs, connected: false };
    const target = addrs.find((a) => a.includes("/ws")) ?? addrs[0];
    try {
      if (!target) throw new Error("no address");
      const full = target.includes("/p2p/") ? target : `${target}/p2p/${id}`;
      const conn = await withTimeout(node.libp2p.dial(multiaddr(full)), 10000, `dial ${full}`);
      p.connected = conn.status === "open";
    } catch (err) {
      p.dial_error = errorText(err);
    }
    s.peers.push(p);
  }
  if (!s.peers.length) throw new StepError("peer exchange: no peer discovered");
}
