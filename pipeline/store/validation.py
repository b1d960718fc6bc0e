"""The store's validation rules on Spark.

The rules themselves (names, order, meaning, limits, the plain-Python check) are declared once
in `core/validation.py`, which the store service's fresh tail also applies. Here each rule name
gets a Spark predicate that holds for a *valid* row (evaluated natively in the JVM on the hot
path, so validation costs a few column expressions, not a pass through Python), and, when the
rule concerns stored rows, the great-expectations expectation that states it over a stored
table (used by `audit` to check the Delta store after the fact). Six of the eight rules have
one, over a stored column or one `audit` derives from stored columns (`AUDIT_COLUMNS`: the
message's size, meta's length, the clock skew). `undecodable` and `missing_message` have none:
a stored row is a decoded WakuMessage by construction (its columns are the message's fields).
`bad_received_time`'s upper bound (no later than the record's Kafka timestamp plus
max_future_received_s) is not checked on stored rows, which keep no Kafka timestamp; its lower
bound, presence and finiteness are.

Rules run in the core's declaration order; a row is quarantined with the name of the first rule
it breaks. Importing this module fails if a core rule has no predicate here or the other way
round.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core import validation as core_rules
from core.validation import MIN_RECEIVED_TIME, Limits

__all__ = ["MIN_RECEIVED_TIME", "Limits", "RULES", "Rule", "rejection_reason", "with_rejection_reason",
           "expectation_suite", "audit"]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    valid: Callable[[Limits], Column]
    # (expectation class name in great_expectations.expectations, kwargs) for the stored table;
    # None when the rule concerns raw records that never reach the table.
    expectation: Callable[[Limits], tuple[str, dict[str, Any]]] | None = None


def _now() -> Column:
    """The rules' `now`: the record's Kafka timestamp in Unix seconds (core/validation.py). A
    column, not the clock: the micro-batch's timestamp was a literal in the decoding stage's
    generated code, so Spark compiled that stage again every batch."""
    return F.unix_micros(F.col("kafka_timestamp")) / F.lit(1e6)


def _finite(col: Column) -> Column:
    return ~F.isnan(col) & (F.abs(col) != F.lit(float("inf")))


def _clock_skew() -> Column:
    """Seconds between the sender's timestamp and the receive time (the timestamp_skew rule)."""
    return F.abs(F.col("timestamp") / F.lit(1e9) - F.col("received_time"))


def _message_size() -> Column:
    """Size of the WakuMessage's variable parts: what the reference nodes' 150 KiB limit bounds."""
    return (F.length("payload") + F.coalesce(F.length("meta"), F.lit(0))
            + F.octet_length("content_topic") + F.coalesce(F.length("rate_limit_proof"), F.lit(0)))


# Per core rule name: the Spark predicate for a valid row, and the expectation (or None).
_SPARK: dict[str, tuple[Callable[[Limits], Column], Callable[[Limits], tuple[str, dict[str, Any]]] | None]] = {
    "undecodable": (lambda lim: F.col("decoded"), None),
    "missing_message": (lambda lim: F.col("has_message"), None),
    "empty_pubsub_topic": (
        lambda lim: F.col("pubsub_topic") != "",
        lambda lim: ("ExpectColumnValueLengthsToBeBetween", {"column": "pubsub_topic", "min_value": 1})),
    "empty_content_topic": (
        lambda lim: F.col("content_topic") != "",
        lambda lim: ("ExpectColumnValueLengthsToBeBetween", {"column": "content_topic", "min_value": 1})),
    "oversized_message": (
        lambda lim: _message_size() <= lim.max_message_bytes,
        lambda lim: ("ExpectColumnValuesToBeBetween", {"column": "audit_message_size",
                                                        "max_value": lim.max_message_bytes})),
    "oversized_meta": (
        lambda lim: F.col("meta").isNull() | (F.length("meta") <= lim.max_meta_bytes),
        lambda lim: ("ExpectColumnValuesToBeBetween", {"column": "audit_meta_bytes", "max_value": lim.max_meta_bytes})),
    "bad_received_time": (
        lambda lim: F.col("received_time").isNotNull() & _finite(F.col("received_time"))
        & (F.col("received_time") >= MIN_RECEIVED_TIME)
        & (F.col("received_time") <= _now() + lim.max_future_received_s),
        # Spark orders NaN above every number and infinity: the bound catches both.
        lambda lim: ("ExpectColumnValuesToBeBetween", {"column": "received_time", "min_value": MIN_RECEIVED_TIME,
                                                       "max_value": 1e11})),
    "timestamp_skew": (
        lambda lim: F.col("timestamp").isNull() | (F.col("timestamp") == 0) | (_clock_skew() <= lim.max_clock_skew_s),
        lambda lim: ("ExpectColumnValuesToBeBetween", {"column": "audit_clock_skew_s",
                                                        "max_value": lim.max_clock_skew_s})),
}


def _audit_columns() -> dict[str, Column]:
    """Columns `audit` adds to a stored table for the expectations above (null: nothing to check)."""
    timed = F.col("timestamp").isNotNull() & (F.col("timestamp") != 0)
    return {"audit_message_size": _message_size(), "audit_meta_bytes": F.length("meta"),
            "audit_clock_skew_s": F.when(timed, _clock_skew())}

if set(_SPARK) != set(core_rules.RULE_NAMES):
    raise ImportError(f"pipeline.store.validation: Spark predicates {sorted(_SPARK)} differ from the rules "
                      f"of core.validation {sorted(core_rules.RULE_NAMES)}")

RULES: list[Rule] = [Rule(r.name, r.description, *_SPARK[r.name]) for r in core_rules.RULES]


def rejection_reason(limits: Limits) -> Column:
    """String column: the first broken rule's name, or null for a valid row."""
    expr = None
    for rule in RULES:
        # A predicate that evaluates to null (missing input) counts as broken.
        broken = ~F.coalesce(rule.valid(limits), F.lit(False))
        expr = F.when(broken, F.lit(rule.name)) if expr is None else expr.when(broken, F.lit(rule.name))
    assert expr is not None  # RULES is not empty
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
    df = df.withColumns(_audit_columns())
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(batch_parameters={"dataframe": df})
    result = batch.validate(expectation_suite(limits))
    failures = {
        f"{r.expectation_config.type}({r.expectation_config.kwargs.get('column')})":
            int(r.result.get("unexpected_count") or 0)
        for r in result.results if not r.success
    }
    return {"success": bool(result.success), "failures": failures}
