"""RLN membership from a real chain (Anvil with our WakuRlnV2Local, tests/rln_chain/): credentials
made and registered by `waku-bridge rln-keystore`, a bridge whose acceptable roots follow the
contract's root() as members register (a proof on a root that left the window is rejected,
rln_root; one on a root in it is relayed), and the bridge's own publishes proved with the Merkle
path the contract gives it."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid

import pytest
import trio

from core.config import REPO_ROOT, load_config
from ingest.metrics import BridgeMetrics
from ingest.node import Bridge
from ingest.publisher import Publisher
from ingest.rln import zk
from ingest.rln.chain import RlnChain
from ingest.rln.membership import index_bits
from ingest.rln.rules import DEFAULT_RLN_IDENTIFIER, HASHED, encode_proof, epoch_bytes, epoch_of, external_nullifier
from ingest.rln.rules import signal as rln_signal
from ingest.settings import BridgeSettings
from schemas import pipeline_records_pb2 as pr
from schemas.waku_message_pb2 import WakuMessage
from tests.integration.test_bridge import consume_all, create_topic
from tools.anvil_chain import ANVIL, ARTEFACT, BUILD, AnvilChain, built

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not built(), reason=f"the local RLN chain is not built ({ANVIL}, {ARTEFACT}): run {BUILD}"),
    pytest.mark.skipif(not zk.available(), reason="waku_rln not built (scripts/build_rln.sh)"),
]

SEED = 20261203
SHARD = "/waku/2/rs/1/0"
CT = "/rln-chain-test/1/chat/proto"
LIMIT = 5


def prove_on_chain(chain: RlnChain, index: int, secret: bytes, msg: WakuMessage, message_id: int) -> WakuMessage:
    path = chain.merkle_proof(index)
    e = epoch_bytes(epoch_of(msg.timestamp, 600))
    en = external_nullifier(e, DEFAULT_RLN_IDENTIFIER, HASHED, zk.poseidon, zk.hash_to_field)
    p, root, sx, sy, n = zk.prove(secret, LIMIT, message_id, path, index_bits(index), zk.hash_to_field(rln_signal(msg)),
                                  en)
    assert root == chain.root()
    out = WakuMessage()
    out.CopyFrom(msg)
    out.rate_limit_proof = encode_proof(p, root, e, sx, sy, n, DEFAULT_RLN_IDENTIFIER)
    return out


def test_bridge_follows_the_chain(kafka, tmp_path):
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    with AnvilChain() as anvil:
        chain = RlnChain(anvil.endpoint, anvil.contract_address, chain_id=anvil.chain_id)
        store = tmp_path / "keystore.json"
        rln_set = [f"rln.eth_client_address={anvil.endpoint}", f"rln.eth_contract_address={anvil.contract_address}",
                   f"rln.chain_id={anvil.chain_id}", f"rln.keystore_path={store}", "rln.keystore_password=pw",
                   f"rln.user_message_limit={LIMIT}"]
        cmd = [sys.executable, "-m", "ingest.cli", "rln-keystore"]
        for s in rln_set:
            cmd += ["--set", s]
        env = dict(os.environ, WAKU_RLN__ETH_PRIVATE_KEY=anvil.private_keys[1])
        made = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env)
        assert made.returncode == 0, made.stderr
        registered = json.loads(made.stdout.strip().splitlines()[-1])
        assert registered["membership_index"] == 0 and registered["user_message_limit"] == LIMIT
        assert (os.stat(store).st_mode & 0o777) == 0o600

        _, _, peer_secret, peer_commitment = zk.identity(rng.randbytes(16))
        assert chain.register(anvil.private_key, peer_commitment, LIMIT) == 1

        topic = f"test.rln.chain.{uuid.uuid4().hex[:8]}"
        create_topic(kafka, topic)
        metrics = BridgeMetrics()
        cfg = load_config([
            f"kafka.bootstrap_servers={kafka}", f"topics.messages={topic}", f"bridge.key_file={tmp_path / 'key'}",
            "bridge.listen_host=127.0.0.1", "bridge.tcp_port=0", "bridge.ws_port=-1", "bridge.metrics_port=-1",
            "bridge.cluster_id=1", f"bridge.pubsub_topics={SHARD}", "filter.enabled=false",
            "store_service.enabled=false", "rln.enabled=true", "rln.membership=chain", "rln.root_poll_s=0.2",
            "rln.acceptable_root_window=2", "rln.max_clock_gap_s=300", *rln_set], environ={})
        bridge = Bridge(BridgeSettings.from_config(cfg), metrics=metrics, out=open(os.devnull, "w"))
        t0 = time.time_ns()
        msg = [WakuMessage(payload=b"chain-%d" % i, content_topic=CT, timestamp=t0 + i) for i in range(4)]
        early = prove_on_chain(chain, 1, peer_secret, msg[0], 0)  # on the root of 2 members
        out: dict = {}

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(bridge.run)
                pub = Publisher()
                async with pub.running([SHARD]):
                    await pub.connect(str(bridge.addrs[0]))
                    await pub.wait_for_mesh(SHARD)
                    await pub.publish(early, SHARD)                    # root in the window: relayed
                    assert bridge.rln is not None
                    for _ in range(3):  # three more members, each root seen by the bridge's poll
                        chain.register(anvil.private_key, zk.identity(rng.randbytes(16))[3], LIMIT)
                        with trio.fail_after(30):
                            while chain.root() not in bridge.rln.membership.roots:
                                await trio.sleep(0.05)
                    late = prove_on_chain(chain, 1, peer_secret, msg[1], 1)
                    out["window"] = len(bridge.rln.membership.roots)
                    await pub.publish(late, SHARD)
                    await pub.publish(out["stale"], SHARD)
                    own = msg[3]
                    out["own"] = await bridge.publish(SHARD, own, own.SerializeToString())
                    with trio.fail_after(30):
                        while (metrics.value("waku_bridge_accepted_total") < 3
                               or metrics.value("waku_bridge_rejected_total", reason="rln_root") < 1):
                            await trio.sleep(0.05)
                bridge.stop()

        # a proof made now on the 2-member root: by the time it arrives 3 newer roots pushed it out
        out["stale"] = prove_on_chain(chain, 1, peer_secret, msg[2], 2)
        trio.run(main)
    assert out["window"] == 3  # acceptable_root_window + 1, as nwaku holds
    assert out["own"] is not None
    assert metrics.value("waku_bridge_rejected_total", reason="rln_root") == 1
    stored = sorted(pr.IngestRecord.FromString(r.value).message.payload for r in consume_all(kafka, topic, 3))
    assert stored == [b"chain-0", b"chain-1", b"chain-3"]
