// relay-publish, on @waku/sdk 0.0.27 (installed as the alias "waku-sdk-relay"): the last @waku/sdk
// release that ships createRelayNode (@waku/relay 0.0.14 on libp2p 1.x, gossipsub 13).

import { multiaddr } from "@multiformats/multiaddr";
import { createEncoder, Protocols, waitForRemotePeer } from "waku-sdk-relay";
import { createRelayNode } from "waku-sdk-relay/relay";

import { emit, errorText, hashHex, log, payloadText, sleep, StepError, withTimeout } from "./cli.mjs";

const RELAY_CODEC = "/vac/waku/relay/2.0.0";
const METADATA_CODEC = "/vac/waku/metadata/1.0.0";

export async function createRelay(opts, r) {
  // Static sharding on exactly the one shard we publish to: the metadata request then carries
  // { clusterId, shards: [shard] } and gossipsub subscribes to that single pubsub topic.
  const node = await createRelayNode({
    defaultBootstrap: false,
    networkConfig: { clusterId: opts.clusterId, shards: [r.shard] },
    libp2p: { filterMultiaddrs: false, hideWebSocketInfo: true },
  });
  await node.start();
  return node;
}

export async function cmdRelayPublish(node, opts, r, state) {
  const s = state.summary;
  s.published = 0;
  s.hashes = [];
  s.failures = [];
  if (node.pubsubTopics[0] !== r.pubsubTopic) {
    throw new StepError(`relay node derived ${node.pubsubTopics[0]}, expected ${r.pubsubTopic}`);
  }
  const timeoutMs = opts.timeout * 1000;
  const deadline = Date.now() + timeoutMs;
  const left = () => Math.max(1, deadline - Date.now());
  const ma = multiaddr(opts.peer);
  const peerIdStr = ma.getPeerId();

  let cb;
  const identified = new Promise((resolve) => {
    cb = (evt) => {
      if (!peerIdStr || evt.detail.peerId.toString() === peerIdStr) resolve(evt.detail);
    };
    node.libp2p.addEventListener("peer:identify", cb);
  });
  // js-waku's gate for relay: resolves once the pubsub topic has a gossipsub mesh peer.
  const gate = waitForRemotePeer(node, [Protocols.Relay], timeoutMs).then(
    () => ({ ok: true }),
    (err) => ({ ok: false, error: errorText(err) }),
  );

  log(`dialing ${opts.peer}`);
  let conn;
  try {
    conn = await withTimeout(node.libp2p.dial(ma), left(), `dial ${opts.peer}`);
  } catch (err) {
    node.libp2p.removeEventListener("peer:identify", cb);
    throw new StepError(`dial failed: ${errorText(err)}`);
  }
  s.connected = true;
  let ident;
  try {
    ident = await withTimeout(identified, left(), "identify of the peer");
  } catch (err) {
    throw new StepError(`identify failed: ${errorText(err)}`);
  } finally {
    node.libp2p.removeEventListener("peer:identify", cb);
  }
  const protocols = [...ident.protocols].sort();
  s.peer_id = ident.peerId.toString();
  s.protocols = protocols;
  emit({
    event: "connected",
    local_peer_id: node.libp2p.peerId.toString(),
    peer_id: s.peer_id,
    remote_addr: conn.remoteAddr.toString(),
    encryption: conn.encryption,
    multiplexer: conn.multiplexer,
    agent_version: ident.agentVersion,
    protocol_version: ident.protocolVersion,
    protocols,
  });
  if (!protocols.includes(RELAY_CODEC)) throw new StepError(`peer does not support ${RELAY_CODEC}`);

  if (protocols.includes(METADATA_CODEC)) {
    let md;
    try {
      const res = await withTimeout(
        node.libp2p.services.metadata.confirmOrAttemptHandshake(ident.peerId),
        left(),
        "metadata handshake",
      );
      md = res.error
        ? { supported: true, error: String(res.error) }
        : { supported: true, cluster_id: res.shardInfo.clusterId ?? null, shards: [...(res.shardInfo.shards ?? [])] };
    } catch (err) {
      md = { supported: true, error: errorText(err) };
    }
    s.metadata = md;
    emit({ event: "metadata", ...md });
  } else {
    s.metadata = { supported: false };
    emit({ event: "metadata", supported: false });
  }

  const res = await withTimeout(gate, left(), "gossipsub mesh with the peer").catch((err) => ({
    ok: false,
    error: errorText(err),
  }));
  if (!res.ok) throw new StepError(`no gossipsub mesh peer on ${r.pubsubTopic}: ${res.error}`);
  const mesh = node.relay.getMeshPeers(r.pubsubTopic).map(String);
  emit({ event: "peer_ready", protocol: Protocols.Relay, pubsub_topic: r.pubsubTopic, mesh_peers: mesh });

  const encoder = createEncoder({ contentTopic: opts.contentTopic, pubsubTopic: r.pubsubTopic });
  for (let i = 0; i < opts.count; i++) {
    const payload = payloadText(opts.prefix, i);
    const message = { payload: new TextEncoder().encode(payload), timestamp: new Date() };
    const hash = hashHex(r.pubsubTopic, await encoder.toProtoObj(message));
    let result;
    try {
      result = await node.relay.send(encoder, message);
    } catch (err) {
      result = { successes: [], failures: [{ error: errorText(err) }] };
    }
    const recipients = result.successes.map(String);
    const errors = result.failures.map((f) => String(f.error));
    const ok = recipients.length > 0;
    if (ok) {
      s.published += 1;
      s.hashes.push(hash);
    } else {
      s.failures.push({ index: i, payload, hash, errors: errors.length ? errors : ["no recipients"] });
    }
    emit({ event: "published", index: i, payload, hash, ok, recipients, errors });
  }
  // Give gossipsub time to flush before the connection is closed.
  await sleep(opts.linger * 1000);
  if (s.published !== opts.count) {
    throw new StepError(`${opts.count - s.published} of ${opts.count} relay publishes reached no peer`);
  }
}
