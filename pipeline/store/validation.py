"""The store's validation rules, declared once.

Each rule is a name, a Spark predicate that holds for a *valid* row (evaluated natively in the
JVM on the hot path, so validation costs a few column expressions, not a pass through Python),
and the great-expectations expectation that states the same rule over a stored table (used by
`audit_messages` to check the Delta store after the fact).

Rules run in declaration order; a row is quarantined with the name of the first rule it breaks.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.config import Config

# The earliest receivedTime accepted: 2020-01-01 (Waku v2 did not exist before).
MIN_RECEIVED_TIME = 1_577_836_800.0


@dataclass(frozen=True)
class Limits:
    max_message_bytes: int = 153_600
    max_meta_bytes: int = 64
    max_clock_skew_s: float = 20.0
    max_future_received_s: float = 60.0

    @classmethod
    def from_config(cls, config: Config) -> "Limits":
        return cls(
            max_message_bytes=config.get("limits.max_message_bytes"),
            max_meta_bytes=config.get("limits.max_meta_bytes"),
            max_clock_skew_s=config.get("limits.max_clock_skew_s"),
            max_future_received_s=config.get("limits.max_future_received_s"),
        )


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    valid: Callable[[Limits], Column]
    # (expectation class name in great_expectations.expectations, kwargs) for the stored table;
    # None when the rule concerns raw records that never reach the table.
    expectation: Callable[[Limits], tuple[str, dict[str, Any]]] | None = None


def _now() -> Column:
    return F.unix_micros(F.current_timestamp()) / F.lit(1e6)


def _finite(col: Column) -> Column:
    return ~F.isnan(col) & (F.abs(col) != F.lit(float("inf")))


def _message_size() -> Column:
    """Size of the WakuMessage's variable parts: what the reference nodes' 150 KiB limit bounds."""
    return (F.length("payload") + F.coalesce(F.length("meta"), F.lit(0))
            + F.octet_length("content_topic") + F.coalesce(F.length("rate_limit_proof"), F.lit(0)))


RULES: list[Rule] = [
    Rule("undecodable", "the Kafka value is an IngestRecord",
         lambda lim: F.col("decoded")),
    Rule("missing_message", "the record carries a WakuMessage",
         lambda lim: F.col("has_message")),
    Rule("empty_pubsub_topic", "pubsub topic is not empty",
         lambda lim: F.col("pubsub_topic") != "",
         lambda lim: ("ExpectColumnValueLengthsToBeBetween", {"column": "pubsub_topic", "min_value": 1})),
    Rule("empty_content_topic", "content topic is not empty",
         lambda lim: F.col("content_topic") != "",
         lambda lim: ("ExpectColumnValueLengthsToBeBetween", {"column": "content_topic", "min_value": 1})),
    Rule("oversized_message", "payload + meta + content topic + proof fit the message size limit",
         lambda lim: _message_size() <= lim.max_message_bytes),
    Rule("oversized_meta", "meta is at most max_meta_bytes",
         lambda lim: F.col("meta").isNull() | (F.length("meta") <= lim.max_meta_bytes)),
    Rule("bad_received_time", "received time is present, finite, after 2020 and not in the future",
         lambda lim: F.col("received_time").isNotNull() & _finite(F.col("received_time"))
         & (F.col("received_time") >= MIN_RECEIVED_TIME)
         & (F.col("received_time") <= _now() + lim.max_future_received_s),
         lambda lim: ("ExpectColumnValuesToBeBetween",
                      {"column": "received_time", "min_value": MIN_RECEIVED_TIME})),
    Rule("timestamp_skew", "sender timestamp, when present, is within max_clock_skew_s of received time",
         lambda lim: F.col("timestamp").isNull() | (F.col("timestamp") == 0)
         | (F.abs(F.col("timestamp") / F.lit(1e9) - F.col("received_time")) <= lim.max_clock_skew_s)),
]


def rejection_reason(limits: Limits) -> Column:
    """String column: the first broken rule's name, or null for a valid row."""
    expr = None
    for rule in RULES:
        # A predicate that evaluates to null (missing input) counts as broken.
        broken = ~F.coalesce(rule.valid(limits), F.lit(False))
        expr = F.when(broken, F.lit(rule.name)) if expr is None else expr.when(broken, F.lit(rule.name))
    return expr


def with_rejection_reason(decoded: DataFrame, limits: Limits) -> DataFrame:
    return decoded.withColumn("reason", rejection_reason(limits))


def expectation_suite(limits: Limits):
    """The rules that apply to stored rows, as a great-expectations ExpectationSuite, plus the
    table's own invariants (unique message hash, digest of 32 bytes)."""
    import great_expectations as gx
    from great_expectations import expectations as gxe

    suite = gx.ExpectationSuite(name="waku_messages")
    for rule in RULES:
        if rule.expectation is not None:
            cls_name, kwargs = rule.expectation(limits)
            suite.add_expectation(getattr(gxe, cls_name)(**kwargs))
    suite.add_expectation(gxe.ExpectColumnValuesToBeUnique(column="message_hash"))
    suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="received_time"))
    suite.add_expectation(gxe.ExpectColumnValuesToNotBeNull(column="digest"))
    return suite


def audit(df: DataFrame, limits: Limits) -> dict[str, Any]:
    """Validate a stored table (or any slice of it) against the expectation suite with
    great-expectations on Spark. Returns {"success": bool, "failures": {expectation: count}}."""
    import os

    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    asset = context.data_sources.add_spark("store").add_dataframe_asset("messages")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
    result = batch.validate(expectation_suite(limits))
    failures = {
        f"{r.expectation_config.type}({r.expectation_config.kwargs.get('column')})":
            int(r.result.get("unexpected_count") or 0)
        for r in result.results if not r.success
    }
    return {"success": bool(result.success), "failures": failures}
