"""Store history pages through Spark: the page rules of core/store_page.py as a DataFrame
query over the Delta `messages` table, for Spark users and tests.

    from pipeline.store.query import history_page_df
    df = spark.read.format("delta").load(warehouse.table_path("messages"))
    history_page_df(df, StoreQuery(content_topics=("/app/1/chat/proto",), forward=False)).show()
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from core.store_page import (
    PAGE_COLUMNS,
    Page,
    StoredMessage,
    StoreLimits,
    StoreQuery,
    check_query,
    finish_page,
    page_size_of,
)


def history_page_df(messages: DataFrame, query: StoreQuery, limits: StoreLimits = StoreLimits(),
                    oldest_first: bool = True, lookahead: int = 0) -> DataFrame:
    """The page as a DataFrame (rows of `messages`, oldest first), for Spark users:

        df = spark.read.format("delta").load(config.table_path("messages"))
        history_page_df(df, StoreQuery(content_topics=("/app/1/chat/proto",), forward=False)).show()

    An unservable query gives an empty DataFrame. The filters are plain column predicates, so
    Delta skips files by the received_time and topic statistics."""
    from pyspark.sql import functions as F

    if check_query(query, limits):
        return messages.limit(0)
    df = messages
    if query.pubsub_topic:
        df = df.where(F.col("pubsub_topic") == query.pubsub_topic)
    if query.content_topics:
        df = df.where(F.col("content_topic").isin(list(query.content_topics)))
    if query.time_start is not None or query.time_end is not None:
        t_ns = F.when(F.col("timestamp").isNull() | (F.col("timestamp") == 0),
                      (F.col("received_time") * F.lit(1e9)).cast("bigint")).otherwise(F.col("timestamp"))
        if query.time_start is not None:
            df = df.where(t_ns >= F.lit(query.time_start))
        if query.time_end is not None:
            df = df.where(t_ns <= F.lit(query.time_end))
    c = query.cursor
    if c is not None:
        # The cursor's bound in the total order (received_time, digest, message_hash): a v3
        # cursor names one message, a beta2 cursor lies beyond every message at its Index.
        at, digest, hash_ = c.bound(query.forward)
        t, d, h = F.lit(at), F.lit(bytearray(digest)), F.lit(bytearray(hash_))
        rt, dg, mh = F.col("received_time"), F.col("digest"), F.col("message_hash")
        # (the plain range on received_time first: Delta skips files by its statistics)
        if query.forward:
            df = df.where((rt >= t) & ((rt > t) | (dg > d) | ((dg == d) & (mh > h))))
        else:
            df = df.where((rt <= t) & ((rt < t) | (dg < d) | ((dg == d) & (mh < h))))
    n = page_size_of(query.page_size, limits)
    order = ("received_time", "digest", "message_hash")
    if query.forward:
        df = df.orderBy(*(F.col(name).asc() for name in order)).limit(n + lookahead)
    else:
        df = df.orderBy(*(F.col(name).desc() for name in order)).limit(n + lookahead)
    return df.orderBy(*order) if oldest_first else df


def history_page(spark: SparkSession, table_path: str, query: StoreQuery,
                 limits: StoreLimits = StoreLimits()) -> Page:
    """One page as a Page (collected), through Spark."""
    df = spark.read.format("delta").load(table_path)
    # One row more than the page: finish_page gives a cursor only when a further message follows.
    rows = history_page_df(df, query, limits, oldest_first=False, lookahead=1).select(*PAGE_COLUMNS).collect()
    return finish_page([StoredMessage.from_mapping(r.asDict()) for r in rows], query, limits)


