"""TFRecord shards read without TensorFlow: framing, CRCs, and the ``tf.train.Example`` of a record.

A TFRecord file is a sequence of records, each::

    uint64  length                  (little-endian)
    uint32  masked crc32c(length)
    bytes   data[length]
    uint32  masked crc32c(data)

so the records of a shard are counted by reading 12 bytes and seeking past
the data, which is what rank 0 does before a run instead of TensorFlow
reading every byte of every shard.  A record's data is a serialised
``tf.train.Example``; :func:`parse_example` decodes the few protobuf
messages involved (Example → Features → map<string, Feature> → BytesList,
FloatList or Int64List) from the wire format.

Problems are :class:`RecordError` with a message that does not name the
file (the caller adds the path).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

HEADER = 12
"""uint64 length + uint32 masked CRC of the length"""
FOOTER = 4
"""uint32 masked CRC of the data"""

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _crc_table()


class RecordError(ValueError):
    """A shard or record that is not what a TFRecord file of Examples holds."""


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (table-driven, about 7 ms for a 110 kB record)."""
    crc, table = 0xFFFFFFFF, _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The CRC as TFRecord stores it: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass(frozen=True)
class ShardScan:
    """What one pass over a shard's headers found."""

    records: int
    first: bytes | None
    """the data of record 0 (its CRC checked), None for an empty shard"""


def scan_shard(fd: int, size: int) -> ShardScan:
    """Count the records of the open shard ``fd`` of ``size`` bytes, checking each length CRC.

    Only the headers are read (one ``pread`` of 12 bytes per record); the
    data of record 0 is read whole and its CRC checked.
    """
    offset = count = 0
    first = None
    while offset < size:
        header = os.pread(fd, HEADER, offset)
        if len(header) < HEADER:
            raise RecordError(f"truncated at byte {offset + len(header)} (record {count} has "
                              f"{len(header)} of its {HEADER} header bytes)")  # fmt: skip
        length, length_crc = struct.unpack("<QI", header)
        if masked_crc(header[:8]) != length_crc:
            if count == 0:
                raise RecordError("not a TFRecord file (record 0 length CRC mismatch)")
            raise RecordError(f"record {count} length CRC mismatch at byte {offset}")
        end = offset + HEADER + length + FOOTER
        if end > size:
            raise RecordError(f"truncated at byte {size} (record {count} of {length} bytes "
                              f"starts at byte {offset} and needs {end - size} more)")  # fmt: skip
        if count == 0:
            body = os.pread(fd, length + FOOTER, offset + HEADER)
            if len(body) < length + FOOTER:
                raise RecordError(f"truncated at byte {offset + HEADER + len(body)} (record 0)")
            (data_crc,) = struct.unpack("<I", body[length:])
            first = body[:length]
            if masked_crc(first) != data_crc:
                raise RecordError("record 0 data CRC mismatch")
        offset = end
        count += 1
    return ShardScan(count, first)


# --------------------------------------------------------------------------- protobuf wire format


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise RecordError("not a tf.train.Example (a varint runs past the end)")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise RecordError("not a tf.train.Example (a varint longer than 10 bytes)")


def _fields(buf: bytes):
    """(field number, wire type, value) of one message: ints for varints, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire in (1, 2, 5):
            if wire == 2:
                length, pos = _varint(buf, pos)
            else:
                length = 8 if wire == 1 else 4
            value, pos = buf[pos : pos + length], pos + length
            if pos > len(buf):
                raise RecordError("not a tf.train.Example (a field runs past the end)")
        else:
            raise RecordError(f"not a tf.train.Example (wire type {wire} of field {number})")
        yield number, wire, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _feature(buf: bytes) -> list:
    """A ``Feature``: the values of its BytesList (1), FloatList (2) or Int64List (3)."""
    values: list = []
    for kind, wire, body in _fields(buf):
        if wire != 2 or kind not in (1, 2, 3):
            continue
        for number, item_wire, item in _fields(body):
            if number != 1:
                continue
            if kind == 1 and item_wire == 2:
                values.append(bytes(item))
            elif kind == 2 and item_wire == 5:
                values.append(struct.unpack("<f", item)[0])
            elif kind == 2 and item_wire == 2:  # packed floats
                values += list(struct.unpack(f"<{len(item) // 4}f", item[: len(item) // 4 * 4]))
            elif kind == 3 and item_wire == 0:
                values.append(_int64(item))
            elif kind == 3 and item_wire == 2:  # packed varints
                pos = 0
                while pos < len(item):
                    value, pos = _varint(item, pos)
                    values.append(_int64(value))
            else:
                raise RecordError(f"not a tf.train.Example (a list of kind {kind} with wire type {item_wire})")
    return values


def parse_example(record: bytes) -> dict[str, list]:
    """A serialised ``tf.train.Example`` as ``{feature name: [values]}``."""
    features: dict[str, list] = {}
    for number, wire, body in _fields(record):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(body):
            if entry_number != 1 or entry_wire != 2:
                continue
            key, value = None, b""
            for part, part_wire, data in _fields(entry):
                if part == 1 and part_wire == 2:
                    key = bytes(data).decode("utf-8", errors="replace")
                elif part == 2 and part_wire == 2:
                    value = data
            if key is None:
                raise RecordError("not a tf.train.Example (a feature without a name)")
            features[key] = _feature(value)
    return features


# --------------------------------------------------------------------------- JPEG

_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_problem(data: bytes) -> str | None:
    """Why ``data`` cannot be a whole JPEG image, or None.

    Walks the marker segments to the frame header (size and components)
    and the start of scan, and looks for the end-of-image marker after it.
    """
    if data[:3] != b"\xff\xd8\xff":
        return f"is not a JPEG (it starts with {bytes(data[:4]).hex(' ') or 'nothing'})"
    pos, frame = 2, None
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return f"is a broken JPEG (no marker at byte {pos})"
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            pos += 2
            continue
        if marker == 0xD9:
            break
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if marker in _SOF:
            if pos + 10 > len(data):
                break
            height, width, components = struct.unpack(">HHB", data[pos + 5 : pos + 10])
            if width == 0 or components not in (1, 3, 4):
                return f"is a broken JPEG (frame {width}×{height} with {components} components)"
            frame = (height, width, components)
        if marker == 0xDA:  # start of scan: the entropy-coded data follows
            if frame is None:
                return "is a broken JPEG (a scan before any frame header)"
            if data.rfind(b"\xff\xd9", pos) < 0:
                return "is a truncated JPEG (no end-of-image marker after the scan)"
            return None
        pos += 2 + length
    return "is a truncated JPEG (it ends before the start of scan)"
