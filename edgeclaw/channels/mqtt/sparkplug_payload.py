"""The Sparkplug B payload (`org.eclipse.tahu.protobuf.Payload`), built with protobuf's descriptor API.

The message is the one in Eclipse Tahu's `sparkplug_b.proto` (Sparkplug 3.0), written here as a
`FileDescriptorProto` so no protoc run and no generated module are needed. Only what an edge node
of ours sends and reads is declared: the payload's timestamp, seq and metrics, and a metric's
name, alias, timestamp, datatype, is_null and scalar values (the field numbers are Tahu's, so any
Sparkplug decoder reads it), and a metric's property set with String values (its `engUnit`). Data
sets, templates and metadata are not declared:
a received NCMD carrying them parses (protobuf keeps unknown fields) but their metrics are
refused by name as unsupported.

`protobuf` is the `sparkplug` extra's dependency, imported when this module is.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "org.eclipse.tahu.protobuf"

# Sparkplug B data types (Sparkplug 3.0 §6.4.16).
INT8, INT16, INT32, INT64 = 1, 2, 3, 4
UINT8, UINT16, UINT32, UINT64 = 5, 6, 7, 8
FLOAT, DOUBLE, BOOLEAN, STRING, DATETIME, TEXT = 9, 10, 11, 12, 13, 14
INT_TYPES = {INT8: 8, INT16: 16, INT32: 32, UINT8: 8, UINT16: 16, UINT32: 32}  # in int_value
LONG_TYPES = {INT64: 64, UINT64: 64, DATETIME: 64}  # in long_value


def _file() -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(
        name="edgeclaw_sparkplug_b.proto", package=PACKAGE, syntax="proto2"
    )
    payload = f.message_type.add(name="Payload")
    T = descriptor_pb2.FieldDescriptorProto
    opt = T.LABEL_OPTIONAL
    metric = payload.nested_type.add(name="Metric")
    for name, number, kind in (
        ("name", 1, T.TYPE_STRING),
        ("alias", 2, T.TYPE_UINT64),
        ("timestamp", 3, T.TYPE_UINT64),
        ("datatype", 4, T.TYPE_UINT32),
        ("is_historical", 5, T.TYPE_BOOL),
        ("is_transient", 6, T.TYPE_BOOL),
        ("is_null", 7, T.TYPE_BOOL),
    ):
        metric.field.add(name=name, number=number, type=kind, label=opt)
    metric.field.add(
        name="properties",
        number=9,
        type=T.TYPE_MESSAGE,
        label=opt,
        type_name=f".{PACKAGE}.Payload.PropertySet",
    )
    metric.oneof_decl.add(name="value")
    for name, number, kind in (
        ("int_value", 10, T.TYPE_UINT32),
        ("long_value", 11, T.TYPE_UINT64),
        ("float_value", 12, T.TYPE_FLOAT),
        ("double_value", 13, T.TYPE_DOUBLE),
        ("boolean_value", 14, T.TYPE_BOOL),
        ("string_value", 15, T.TYPE_STRING),
        ("bytes_value", 16, T.TYPE_BYTES),
    ):
        metric.field.add(name=name, number=number, type=kind, label=opt, oneof_index=0)
    # A metric's properties (Sparkplug 3.0 §6.4.19): keys and values side by side; the values here are
    # strings (`engUnit`) only.
    prop_set = payload.nested_type.add(name="PropertySet")
    prop_set.field.add(name="keys", number=1, type=T.TYPE_STRING, label=T.LABEL_REPEATED)
    prop_set.field.add(
        name="values",
        number=2,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_REPEATED,
        type_name=f".{PACKAGE}.Payload.PropertyValue",
    )
    prop_value = payload.nested_type.add(name="PropertyValue")
    prop_value.field.add(name="type", number=1, type=T.TYPE_UINT32, label=opt)
    prop_value.field.add(name="is_null", number=2, type=T.TYPE_BOOL, label=opt)
    prop_value.oneof_decl.add(name="value")
    prop_value.field.add(name="string_value", number=8, type=T.TYPE_STRING, label=opt, oneof_index=0)
    payload.field.add(name="timestamp", number=1, type=T.TYPE_UINT64, label=opt)
    payload.field.add(
        name="metrics",
        number=2,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_REPEATED,
        type_name=f".{PACKAGE}.Payload.Metric",
    )
    payload.field.add(name="seq", number=3, type=T.TYPE_UINT64, label=opt)
    payload.field.add(name="uuid", number=4, type=T.TYPE_STRING, label=opt)
    payload.field.add(name="body", number=5, type=T.TYPE_BYTES, label=opt)
    payload.extension_range.add(start=6, end=536870912)
    return f


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file())
Payload: Any = message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{PACKAGE}.Payload"))


def set_value(metric: Any, datatype: int, value: Any) -> None:
    """Put `value` in the field its Sparkplug datatype uses (signed integers as two's complement)."""
    metric.datatype = datatype
    if value is None:
        metric.is_null = True
    elif datatype in INT_TYPES:
        metric.int_value = int(value) & 0xFFFFFFFF
    elif datatype in LONG_TYPES:
        metric.long_value = int(value) & 0xFFFFFFFFFFFFFFFF
    elif datatype == FLOAT:
        metric.float_value = float(value)
    elif datatype == DOUBLE:
        metric.double_value = float(value)
    elif datatype == BOOLEAN:
        metric.boolean_value = bool(value)
    elif datatype in (STRING, TEXT):
        metric.string_value = str(value)
    else:
        raise ValueError(f"Sparkplug datatype {datatype} is not supported")


def set_string_properties(metric: Any, properties: dict[str, str]) -> None:
    """The metric's property set: each a String (`engUnit`: the engineering unit, §6.4.19)."""
    for key, value in properties.items():
        metric.properties.keys.append(key)
        metric.properties.values.add(type=STRING, string_value=value)


def get_value(metric: Any) -> Any:
    """A received metric's value as Python sees it (None when null or of a kind not declared here)."""
    if metric.is_null:
        return None
    kind = metric.WhichOneof("value")
    if kind is None:
        return None
    value = getattr(metric, kind)
    bits = INT_TYPES.get(metric.datatype) or LONG_TYPES.get(metric.datatype)
    if bits and metric.datatype in (INT8, INT16, INT32, INT64) and isinstance(value, int):
        value &= (1 << bits) - 1
        if value >= 1 << (bits - 1):
            value -= 1 << bits
    return value
