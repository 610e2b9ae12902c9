"""Read back what wandb wrote in offline mode: its ``run-*.wandb`` file is a LevelDB-style
log (a 7-byte header, then 32 KiB blocks of records, each with a 7-byte header and split
across blocks as FIRST / MIDDLE / LAST) of ``wandb_internal_pb2.Record`` protobufs. wandb
itself ships no reader since its core moved to Go, and ``wandb sync`` needs the network.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

BLOCK, HEADER = 32 * 1024, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a wandb run file"
    out, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < HEADER:  # the block's tail is padding
            pos += left_in_block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if pos + HEADER + length > len(data):  # a record still being written
            break
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
        else:  # zero padding at the end of the file
            break
    return out


def finished_records(path: Path, timeout: float = 60.0) -> list:
    """The run file's records once it holds the ``exit`` record, wandb's last: its core
    process may still be writing the file when ``run.finish()`` returns on a loaded host."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + timeout
    while True:
        parsed = []
        for raw in records(path):
            record = pb.Record()
            record.ParseFromString(raw)
            parsed.append(record)
        kinds = [record.WhichOneof("record_type") for record in parsed]
        if "exit" in kinds:
            return parsed
        assert time.monotonic() < deadline, f"no exit record after {timeout} s; found {kinds}"
        time.sleep(0.5)


def history_and_summary(run_dir: Path) -> tuple[list[dict], dict]:
    """The logged rows (``run.log``) and the final summary of the one offline run under
    ``run_dir/wandb``."""
    (path,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    rows, summary = [], {}
    for record in finished_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            rows.append({_key(item): json.loads(item.value_json) for item in record.history.item})
        elif kind == "summary":
            for item in record.summary.update:
                summary[_key(item)] = json.loads(item.value_json)
    return rows, summary


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)
