"""What a reader produces: Arrow batches into a sink, and one record per rank-process."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from .. import schema


@dataclass
class ProcessTrace:
    source_path: str
    source_format: str              # 'nsys-sqlite' | 'kineto-json' | 'xla-json' | 'autograd-json' | 'perfetto'
    key: str                        # names this process's tables in the sink
    profiler_version: str | None = None
    hostname: str | None = None
    pid: int | None = None
    device_name: str | None = None
    rank_hint: int | None = None    # rank the file itself states (NCCL payload, distributedInfo)
    rank_hint_source: str | None = None
    world_size: int | None = None
    warnings: list[str] = field(default_factory=list)
    n_processes: int = 1            # processes found in the same file
    devices: tuple = ()             # the GPU indices its GPU ops ran on, when the reader knows them (ranks.py)
    source_hash: str | None = None
    counts: dict = field(default_factory=dict)
    # the file's only device work is of categories the reader does not read (HTA's MTIA traces):
    # 'category (count), ...'; the verdict says so instead of "no GPU work" (traces.unread_device_work)
    unread_device_work: str | None = None
    # a cluster's worker derived this process's per-rank tables into Parquet shards (rank_task.py):
    # shard (its id in them), gpu_ops (their count), cpu_clock_offset_ns, cpu_clock_consistent, notes,
    # span (first start, last end as recorded)
    derived: dict | None = None


def reader_schema(table: str) -> pa.Schema:
    """A canonical table's schema without trace_id and rank: those are known only after all files are read."""
    s = schema.TABLES.get(table) or schema.FR_TABLES[table]
    return pa.schema([f for f in s if f.name not in ("trace_id", "dump_id", "rank")])


class IpcSink:
    """Writes each (process, table) as an Arrow IPC stream file in `folder`.

    The per-rank map phase ends here, so a reader never touches the database; the
    cross-rank phase reads these files (memory-mapped) into DuckDB.
    """

    def __init__(self, folder: str):
        self.folder = Path(folder)
        self.writers: dict = {}

    def path(self, key, table) -> Path:
        return self.folder / f"{key}.{table}.arrow"

    def write(self, key: str, table: str, data):
        sch = reader_schema(table)
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        for f in sch:  # columns a format never has (e.g. nsys has no process-group name) stay NULL
            if f.name not in data.column_names:
                data = data.append_column(f.name, pa.nulls(data.num_rows, f.type))
        data = data.select([f.name for f in sch]).cast(sch)
        w = self.writers.get((key, table))
        if w is None:
            w = self.writers[(key, table)] = ipc.new_stream(str(self.path(key, table)), sch)
        for b in data.to_batches(max_chunksize=1 << 20):
            w.write_batch(b)

    def shift_times(self, key: str, delta_ns: int):
        """Adds `delta_ns` to the start/end of every row `key` wrote so far: a Kineto trace may name its
        time base (baseTimeNanoseconds) only after its events, when batches of them are written already.
        Each stream is read back (memory-mapped), rewritten, and left open for the rows still to come."""
        import pyarrow.compute as pc
        for (k, table) in [kt for kt in self.writers if kt[0] == key]:
            self.writers.pop((k, table)).close()
            path = self.path(k, table)
            with pa.memory_map(str(path)) as source:
                data = ipc.open_stream(source).read_all()
            for c in ("start_ns", "end_ns", "ts_ns"):  # memory_events has a time (ts_ns), devices none
                i = data.schema.get_field_index(c)
                if i < 0:
                    continue
                data = data.set_column(i, c, pc.add(data[c], pa.scalar(delta_ns, pa.int64())))
            tmp = path.with_name(path.name + ".shifted")
            w = ipc.new_stream(str(tmp), data.schema)
            for b in data.to_batches(max_chunksize=1 << 20):
                w.write_batch(b)
            del data
            tmp.replace(path)  # the open writer keeps writing to the new file
            self.writers[(k, table)] = w

    def close(self):
        for w in self.writers.values():
            w.close()
        self.writers.clear()
