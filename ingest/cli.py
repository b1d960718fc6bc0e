"""``waku-bridge``: run the ingest bridge, publish WakuMessages over relay, show the peer id.

    waku-bridge run [--config FILE] [--set bridge.tcp_port=60000 ...] [nwaku's options: --cluster-id=1 ...]
    wakunode2 [nwaku's options]   (the same as waku-bridge run; ingest/nwaku_options.py)
    waku-bridge publish --peer /ip4/127.0.0.1/tcp/60000/p2p/<id> [--count N] [--rate R] ...
    waku-bridge id [--set bridge.key_file=...]
    waku-bridge filter --peer /ip4/127.0.0.1/tcp/60000/p2p/<id> --content-topic /app/1/chat/proto [--count N]
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from core.config import Config, ConfigError, add_config_arguments, config_from_args, load_config
from core.topics import DEFAULT_PUBSUB_TOPIC, check_pubsub_topic
from ingest.host import ListenError, quiet_network_errors
from ingest.identity import IdentityError, load_identity, peer_id_of
from ingest.kafka_producer import quiet_kafka_client_logs
from ingest.node import BridgeError
from ingest.nwaku_options import BASE_DEFAULTS, translate
from ingest.relay.codec import Limits

if TYPE_CHECKING:
    from ingest.settings import BridgeSettings

log = logging.getLogger("ingest.cli")
GC_GEN0_THRESHOLD = 20_000  # Python's default: 700


class PublishError(Exception):
    pass


class NwakuOptionError(Exception):
    """nwaku's options that cannot be used: one line each; exit status 1, as nwaku's."""


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        for noisy in ("kafka", "libp2p", "multiaddr", "async_service"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        quiet_network_errors()
        quiet_kafka_client_logs()


async def _stop_on_signal(stop: Callable[[], None]) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s received: shutting down", signal.Signals(signum).name)
            stop()
            return


def run_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Config:
    """`waku-bridge run`'s configuration: our layers (conf/pipeline.toml, --config, WAKU_*), then
    nwaku's options (the words argparse did not know, WAKUNODE2_*, nwaku's --config-file), then
    our --set, which wins over both."""
    return _run_config(args, environ)[0]


def _run_config(args: argparse.Namespace, environ: Mapping[str, str] | None) -> tuple[Config, str | None]:
    """The configuration and nwaku's --log-level (a logging level name, or None)."""
    env = os.environ if environ is None else environ
    ours = load_config(args.overrides, args.config, env)
    base: dict[str, Any] = {key: ours.get(key) for key in BASE_DEFAULTS}
    nwaku = translate(getattr(args, "nwaku", []), env, base)
    if nwaku.errors:
        raise NwakuOptionError("\n".join(nwaku.errors))
    for line in nwaku.ignored:
        log.info("nwaku option %s", line)
    if not nwaku.overrides:
        return ours, nwaku.log_level
    return load_config([*nwaku.overrides, *args.overrides], args.config, env), nwaku.log_level


def bridge_settings(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> BridgeSettings:
    """The BridgeSettings `waku-bridge <argv>` would run with (argv starts with "run"), without
    starting anything."""
    from ingest.settings import BridgeSettings

    return BridgeSettings.from_config(run_config(parse_args(argv), environ))


def _set_log_level(level: str, verbose: bool) -> None:
    """nwaku's --log-level, for our loggers (the third-party ones stay quiet unless -v)."""
    logging.getLogger().setLevel(logging.DEBUG if verbose else getattr(logging, level))


def cmd_run(args: argparse.Namespace) -> int:
    from ingest.node import Bridge
    from ingest.settings import BridgeSettings

    if "--version" in getattr(args, "nwaku", []):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"waku-pipeline {version('waku-pipeline')}")
        except PackageNotFoundError:
            print("waku-pipeline (not installed)")
        return 0
    config, log_level = _run_config(args, None)
    if log_level:
        _set_log_level(log_level, args.verbose)
    settings = BridgeSettings.from_config(config)
    bridge = Bridge(settings)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, bridge.stop)
            await nursery.start(bridge.run)
            _quiet_gc()
            await bridge.stopped.wait()
            nursery.cancel_scope.cancel()

    trio.run(main)
    return 0


def _quiet_gc() -> None:
    """After start-up: exempt the start-up objects (modules, classes: most of the heap) from
    collection, and collect the young generation less often. Full collections otherwise scan
    everything and paused the relay for 100-200 ms at a time (the p99 of the ack latency)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)


def cmd_id(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    key_pair, _ = load_identity(config.get("bridge.nodekey"), config.path("bridge.key_file"))
    print(peer_id_of(key_pair).to_base58())
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from ingest.publisher import Publisher, demo_message
    from ingest.settings import parse_peer

    config = config_from_args(args)
    limits = Limits.from_config(config)
    peers = [parse_peer(p, "--peer") for p in args.peer]
    why = check_pubsub_topic(args.pubsub_topic)
    if why:
        raise ConfigError(f"--pubsub-topic: {why}")
    stopping = trio.Event()

    async def main() -> None:
        pub = Publisher(limits=limits)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, stopping.set)
            async with pub.running([args.pubsub_topic]):
                for info in peers:
                    try:
                        await pub.connect(info, timeout=args.wait_s)
                    except trio.TooSlowError:
                        raise
                    except Exception as exc:  # noqa: BLE001 - dial errors come in many types
                        raise PublishError(f"cannot connect to {info.peer_id}: {exc}") from None
                await pub.wait_for_mesh(args.pubsub_topic, peers=len(peers), timeout=args.wait_s)
                began = time.time()
                print(json.dumps({"event": "publishing", "time": began}), flush=True)
                interval = 1.0 / args.rate if args.rate > 0 else 0.0
                next_at = time.monotonic()
                last_report = time.monotonic()
                i = 0
                while (args.count == 0 or i < args.count) and not stopping.is_set():
                    msg = demo_message(i, args.content_topic, args.payload_size, args.payload)
                    await pub.publish(msg, args.pubsub_topic)
                    i += 1
                    if interval:
                        next_at += interval
                        delay = next_at - time.monotonic()
                        if delay > 0:
                            await trio.sleep(delay)
                    elif i % 64 == 0:
                        await trio.sleep(0)  # let the sending loop run
                    if time.monotonic() - last_report >= 5:
                        last_report = time.monotonic()
                        log.info("published %d messages", i)
                # Let the last frames leave before the connection closes.
                with trio.move_on_after(args.wait_s):
                    while any(len(q) for q in pub.pubsub.peer_queues.values()):
                        await trio.sleep(0.01)
                    await trio.sleep(0.2)
                took = time.time() - began
                print(json.dumps({"event": "done", "published": i, "seconds": round(took, 3),
                                  "messages_per_s": round(i / took, 1) if took > 0 else None}), flush=True)
            nursery.cancel_scope.cancel()

    trio.run(main)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="waku-bridge", description="Waku relay -> Kafka ingest bridge")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run", help="run the bridge until SIGINT/SIGTERM (settings: [bridge] in conf/pipeline.toml)",
        allow_abbrev=False,
        epilog="Also takes nwaku's options (--cluster-id=1 --shard=0 --relay=true --rest=true ..., "
               "WAKUNODE2_<OPTION>, --config-file FILE): docs/operations.md, 'In place of nwaku'. "
               "--set wins over them.")
    add_config_arguments(run)
    run.set_defaults(func=cmd_run)

    ident = sub.add_parser("id", help="print the bridge's peer id (creates the key file if missing)")
    add_config_arguments(ident)
    ident.set_defaults(func=cmd_id)

    pub = sub.add_parser("publish", help="publish WakuMessages over relay to the given peers")
    add_config_arguments(pub)
    pub.add_argument("--peer", action="append", required=True, metavar="MULTIADDR",
                     help="peer to connect to, /.../p2p/<peer id> (repeatable)")
    pub.add_argument("--pubsub-topic", default=DEFAULT_PUBSUB_TOPIC)
    pub.add_argument("--content-topic", default="/waku-pipeline/1/demo/proto")
    pub.add_argument("--count", type=int, default=10, help="messages to publish (0: until SIGINT/SIGTERM)")
    pub.add_argument("--rate", type=float, default=0.0, help="messages per second (0: as fast as possible)")
    pub.add_argument("--payload-size", type=int, default=0, help="random payload of this many bytes")
    pub.add_argument("--payload", default="hello waku #{i}", help="text payload ({i}: message number)")
    pub.add_argument("--wait-s", type=float, default=30.0, help="how long to wait for peers and the mesh")
    pub.set_defaults(func=cmd_publish)

    from ingest.filter.client import add_filter_command
    add_filter_command(sub)  # waku-bridge filter: the filter client (docs/filter-service.md)
    from ingest.rln.register import add_keystore_command
    add_keystore_command(sub)  # waku-bridge rln-keystore: RLN credentials (docs/rln.md)
    return parser


def _single(exc: BaseException) -> BaseException:
    """The one error inside nested exception groups (trio wraps errors raised in nurseries)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Our options; the words `run` does not know are nwaku's (args.nwaku), anywhere else an error."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.nwaku = extra
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _setup_logging(args.verbose)
    try:
        return int(args.func(args))
    except BaseException as raised:  # mapped to one-line errors below
        exc = _single(raised)
        if isinstance(exc, (ConfigError, IdentityError, ListenError, BridgeError)):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, NwakuOptionError):
            print(exc, file=sys.stderr)
            return 1
        if isinstance(exc, PublishError):
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if isinstance(exc, trio.TooSlowError):
            print("error: the peers did not join the relay mesh in time (--wait-s)", file=sys.stderr)
            return 1
        if isinstance(exc, KeyboardInterrupt):
            return 130
        raise


def wakunode2_main(argv: Sequence[str] | None = None) -> int:
    """`wakunode2`: nwaku's command name for `waku-bridge run` (so nwaku-compose's run_node.sh and
    the interop suite start this node with their command lines)."""
    return main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
