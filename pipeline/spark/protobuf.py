"""Decode protobuf Kafka values in the JVM: a stand-in for Spark's `from_protobuf`.

Why this exists: Spark's own `from_protobuf` lives in `org.apache.spark:spark-protobuf_2.13`,
which the Maven Central mirror this deployment reaches does not carry. Decoding in a Python UDF
is not an option (every row would cross into Python), so jvm/ holds a small Java Spark UDF,
`waku.pipeline.ProtoDecode`, compiled at set-up by jvm/build.sh into `waku-proto-decode.jar`.
It parses with protobuf-java's `DynamicMessage`, driven by the descriptor set schemas/waku.desc
that the jar carries as the classpath resource `/waku.desc`.

Semantics follow `from_protobuf(data, messageName, options={"mode": "PERMISSIVE"})`:

* bytes that do not parse → null (the caller quarantines null rows); null input → null;
* fields with presence (proto3 `optional`, proto2 fields, message fields, oneof members) that are
  absent → null; proto3 implicit-presence fields that are absent → their default value (as with
  from_protobuf's `emit.default.values=true`); repeated fields absent → empty array;
* enums → the value name (StringType).

Type mapping (must match ProtoDecode.java): string→string, bytes→binary, bool→boolean,
int32/sint32/sfixed32→int, uint32/fixed32→long (unsigned, never negative),
int64/sint64/sfixed64→long, uint64/fixed64→long (two's complement: values ≥ 2**63 come out
negative, as in from_protobuf without `upcast.unsigned.ints`), double→double, float→float,
enum→string, message→struct, map→map, repeated→array. Every struct field is nullable.

When spark-protobuf becomes available, swap callers back to
`pyspark.sql.protobuf.functions.from_protobuf(col, message_name, descFilePath=...)`; this
module's `from_protobuf` has the same leading arguments.
"""
from __future__ import annotations

import functools
import pkgutil

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.spark.session import register_java_function
from schemas import DESCRIPTOR_SET_PATH

JAVA_UDF_CLASS = "waku.pipeline.ProtoDecode"
JAR_NAME = "waku-proto-decode.jar"

_SCALARS: dict[int, T.DataType] = {
    FieldDescriptor.TYPE_STRING: T.StringType(),
    FieldDescriptor.TYPE_BYTES: T.BinaryType(),
    FieldDescriptor.TYPE_BOOL: T.BooleanType(),
    FieldDescriptor.TYPE_INT32: T.IntegerType(),
    FieldDescriptor.TYPE_SINT32: T.IntegerType(),
    FieldDescriptor.TYPE_SFIXED32: T.IntegerType(),
    FieldDescriptor.TYPE_UINT32: T.LongType(),
    FieldDescriptor.TYPE_FIXED32: T.LongType(),
    FieldDescriptor.TYPE_INT64: T.LongType(),
    FieldDescriptor.TYPE_SINT64: T.LongType(),
    FieldDescriptor.TYPE_SFIXED64: T.LongType(),
    FieldDescriptor.TYPE_UINT64: T.LongType(),
    FieldDescriptor.TYPE_FIXED64: T.LongType(),
    FieldDescriptor.TYPE_DOUBLE: T.DoubleType(),
    FieldDescriptor.TYPE_FLOAT: T.FloatType(),
    FieldDescriptor.TYPE_ENUM: T.StringType(),
}


@functools.cache
def _pool() -> descriptor_pool.DescriptorPool:
    """A private pool holding schemas/waku.desc, files added in dependency order."""
    # Read as package data: on a cluster's driver `schemas` is imported from the --py-files zip.
    data = pkgutil.get_data("schemas", DESCRIPTOR_SET_PATH.name)
    if data is None:
        raise FileNotFoundError(DESCRIPTOR_SET_PATH)
    fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    by_name = {f.name: f for f in fds.file}
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(name: str) -> None:
        if name in added:
            return
        if name not in by_name:
            raise ValueError(f"{DESCRIPTOR_SET_PATH} lacks imported file {name!r}")
        added.add(name)
        for dep in by_name[name].dependency:
            add(dep)
        pool.Add(by_name[name])

    for f in fds.file:
        add(f.name)
    return pool


def _descriptor(message_name: str) -> Descriptor:
    try:
        return _pool().FindMessageTypeByName(message_name)
    except KeyError:
        raise ValueError(
            f"unknown protobuf message {message_name!r} (not in {DESCRIPTOR_SET_PATH})"
        ) from None


def _is_repeated(field: FieldDescriptor) -> bool:
    is_rep = getattr(field, "is_repeated", None)
    if is_rep is not None:
        return bool(is_rep)
    # protobuf before 6.31 (no is_repeated); the stubs are protobuf 7's, which has no label
    return field.label == FieldDescriptor.LABEL_REPEATED  # type: ignore[attr-defined]


def _value_type(field: FieldDescriptor, path: tuple[str, ...]) -> T.DataType:
    if field.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        assert field.message_type is not None  # a message field has its type
        return _struct(field.message_type, path)
    try:
        return _SCALARS[field.type]
    except KeyError:
        raise ValueError(f"unsupported protobuf field type {field.type} of {field.full_name}") from None


def _struct(desc: Descriptor, path: tuple[str, ...]) -> T.StructType:
    if desc.full_name in path:
        raise ValueError(f"recursive protobuf message {desc.full_name} via {list(path)}")
    path = path + (desc.full_name,)
    fields = []
    for f in desc.fields:  # declaration order, as Descriptor.getFields() in Java
        entry = f.message_type if f.type == FieldDescriptor.TYPE_MESSAGE else None
        if entry is not None and entry.GetOptions().map_entry:
            key = entry.fields_by_number[1]
            value = entry.fields_by_number[2]
            dtype: T.DataType = T.MapType(_value_type(key, path), _value_type(value, path), True)
        elif _is_repeated(f):
            dtype = T.ArrayType(_value_type(f, path), True)
        else:
            dtype = _value_type(f, path)
        fields.append(T.StructField(f.name, dtype, nullable=True))
    return T.StructType(fields)


@functools.cache
def spark_schema(message_name: str) -> T.StructType:
    """The Spark struct type ProtoDecode returns for a fully qualified message name."""
    return _struct(_descriptor(message_name), ())


def udf_name(message_name: str) -> str:
    """The deterministic SQL function name the decoder for message_name is registered under."""
    return "waku_decode_" + message_name.replace(".", "_")


def register(spark: SparkSession, message_name: str) -> str:
    """Registers the Java decoder for message_name in spark (once per session); returns its name."""
    schema = spark_schema(message_name)  # fails fast on an unknown name, before any JVM call
    return register_java_function(spark, udf_name(message_name), JAVA_UDF_CLASS, schema)


def from_protobuf(
    data: Column | str, messageName: str, spark: SparkSession | None = None
) -> Column:
    """Decodes protobuf bytes in column `data` into a struct of `messageName`.

    Same leading signature and PERMISSIVE semantics as
    `pyspark.sql.protobuf.functions.from_protobuf`; runs the Java UDF. Pass the session of the
    DataFrame it is used on (`df.sparkSession`) when that is not the active one, as inside a
    streaming foreachBatch, where each batch runs in a cloned session.
    """
    spark = spark or SparkSession.getActiveSession()
    if spark is None:
        raise RuntimeError("pipeline.spark.protobuf.from_protobuf needs an active SparkSession")
    name = register(spark, messageName)
    col = F.col(data) if isinstance(data, str) else data
    return F.call_function(name, col, F.lit(messageName))
