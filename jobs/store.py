"""Store job: waku.messages (Kafka) -> Delta `messages`, refused records -> `quarantine`."""
from __future__ import annotations

import argparse
import logging
import sys

from pipeline.config import ConfigError, add_config_arguments, config_from_args
from pipeline.kafka_io import read_topic_stream
from pipeline.session import build_session
from pipeline.store_writer import write_batch

log = logging.getLogger("waku.jobs.store")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="store", description=__doc__)
    add_config_arguments(parser)
    parser.add_argument("--available-now", action="store_true",
                        help="process everything in Kafka now, then stop (catch-up)")
    parser.add_argument("--trigger-seconds", type=float, default=1.0,
                        help="micro-batch interval when running continuously (default 1)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(config, "store")
    checkpoint = config.checkpoint_path("store")
    source = read_topic_stream(spark, config, config.get("topics.messages"),
                               max_offsets_per_trigger=args.max_offsets_per_trigger)
    writer = (source.writeStream.queryName("store")
              .option("checkpointLocation", checkpoint)
              .foreachBatch(lambda df, bid: write_batch(df, bid, config, checkpoint)))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    query = writer.start()
    log.info("store query started: checkpoint %s -> %s", checkpoint, config.table_path("messages"))
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
