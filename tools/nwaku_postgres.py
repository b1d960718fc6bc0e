"""nwaku's PostgreSQL message archive, rebuilt in Python for side-by-side runs with our store
(issue 71): a private PostgreSQL server, nwaku's schema and partitions, its inserts, its store v3
queries and its retention policies, SQL for SQL.

Everything here mirrors nwaku (logos-messaging/logos-delivery) at tag v0.38.1, read from:

- ``migrations/message_store_postgres/content_script_version_{1..7}.nim`` and
  ``waku/waku_archive/driver/postgres_driver/migrations.nim``: the schema (`create_schema`
  replays the seven scripts, as nwaku's migrate does on an empty database);
- ``waku/waku_archive/driver/postgres_driver/postgres_driver.nim``: InsertRow and
  InsertRowMessagesLookup (`insert_row`), the prepared Select* statements, the arbitrary query
  builder, the hash lookup through messages_lookup and the cursor's timestamp
  (`query`), addPartition (`create_partitions`), the partition drops and DELETEs of the
  retention policies;
- ``waku/waku_archive/driver/postgres_driver/partitions_manager.nim``: partition names and
  ranges;
- ``waku/waku_archive/archive.nim``: findMessages (page size, the page_size + 1 rows fetched, the
  cursor, the order of a backward page), validate (which timestamps are archived);
- ``waku/waku_archive/retention_policy/retention_policy_{time,size}.nim``.

In brief. The ``messages`` table is partitioned by range on ``timestamp`` (ns, BIGINT NOT NULL)
with primary key ``messageIndex (messageHash, timestamp)`` and indexes on messageHash,
timestamp, pubsubTopic and contentTopic; every column but version/timestamp is VARCHAR, the
hash, payload and meta hex-encoded (lower case, no 0x). ``messages_lookup (timestamp,
messageHash)`` is not partitioned: primary key (messageHash, timestamp) plus an index on each
column; the hash lookups and cursors go through it. A partition, ``messages_<from>_<until>``
(seconds), covers [from, until) and ends at the next o'clock hour after from + 1 h: the first one
starts at "now", the following ones are whole hours; nwaku's partition factory (every 10 min)
keeps the one holding now plus the next. The time policy drops whole partitions that end before
now - retention (DETACH CONCURRENTLY, DROP TABLE, DELETE FROM messages_lookup below the
partition's end), then runs ``DELETE FROM messages WHERE timestamp < now - retention``; the size
policy drops the oldest partitions while ``pg_database_size`` is over the limit, never the one
holding now. Neither runs a VACUUM (nwaku's PostgreSQL driver has none: the dropped tables' files
go at once, the DELETEs' dead rows are autovacuum's).

nwaku's own oddities are kept, not fixed (each is noted where it is): its prepared statements
are only used when a query has content topics, hashes, a pubsub topic and both time bounds, and
then fail (the data statements without a cursor never reach the server: "lengths discrepancies";
with a cursor the hash is bound to the timestamp parameter) or match nothing past one topic or
hash (``contentTopic IN ($1)`` gets the topics joined by commas); a lookup by hashes alone
orders newest first whatever the direction (so a forward page of it is newest first, a backward
one oldest first); ``DELETE FROM messages`` leaves messages_lookup's rows.

    with PostgresServer(directory) as pg:          # private cluster, 127.0.0.1, free port
        with pg.connect() as conn:                 # autocommit, as nwaku's connections
            create_schema(conn)
            bulk_load(conn, arrow_table)           # our messages table's columns -> nwaku's rows
            page = query(conn, pubsub_topic="/waku/2/rs/1/0", content_topics=["/a/1/b/proto"],
                         start_ns=..., end_ns=..., page_size=20)
            page.rows, page.cursor

The server: PostgreSQL from Debian's postgresql package (15 on bookworm, as nwaku-compose's
postgres:15 image), binaries from /usr/lib/postgresql/<newest>/bin, the settings nwaku-compose's
postgres_cfg/postgresql.conf changes from the defaults (`NWAKU_COMPOSE_SETTINGS`; not its
pg_stat_statements preload, a monitoring extension), fsync and synchronous_commit on (the
defaults: each of nwaku's two INSERTs a message waits for its WAL flush), locale C.UTF-8 (the
image's en_US.utf8 is not generated on this machine: lower-case hex hashes sort the same in both,
topics are only compared for equality; en_US's comparisons cost a little more). As root it runs
as the ``postgres`` system user (PostgreSQL refuses root), the directory chowned to it.
"""
from __future__ import annotations

import binascii
import glob
import io
import os
import pwd
import subprocess
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from tools.processes import free_port

NWAKU_TAG = "v0.38.1"

# nwaku-compose's postgres_cfg/postgresql.conf: the lines it sets (the rest are defaults).
NWAKU_COMPOSE_SETTINGS: dict[str, str] = {
    "max_connections": "100",
    "shared_buffers": "128MB",
    "dynamic_shared_memory_type": "posix",
    "max_wal_size": "1GB",
    "min_wal_size": "80MB",
    "log_timezone": "'UTC'",
    "datestyle": "'iso, mdy'",
    "timezone": "'UTC'",
    "default_text_search_config": "'pg_catalog.english'",
}

# archive.nim
DEFAULT_PAGE_SIZE = 20
MAX_PAGE_SIZE = 100
MAX_CONTENT_TOPICS_PER_QUERY = 10
# postgres_driver.nim
MAX_HASHES_PER_QUERY = 100
# retention_policy_size.nim: 30 GiB
DEFAULT_RETENTION_SIZE = 32212254720

POSTGRES_LIB = "/usr/lib/postgresql"


class PostgresMissing(RuntimeError):
    """PostgreSQL's server binaries are not on this machine."""


class PostgresError(RuntimeError):
    """The private server could not be set up, started or stopped."""


class NwakuError(RuntimeError):
    """An error nwaku's archive returns instead of rows (its own text)."""


# --------------------------------------------------------------------------------------------
# The server


def postgres_bindir() -> Path:
    """The newest /usr/lib/postgresql/<version>/bin holding initdb, pg_ctl and postgres."""
    found = []
    for path in glob.glob(f"{POSTGRES_LIB}/*/bin/postgres"):
        bindir = Path(path).parent
        version = bindir.parent.name
        if version.isdigit() and (bindir / "initdb").exists() and (bindir / "pg_ctl").exists():
            found.append((int(version), bindir))
    if not found:
        raise PostgresMissing(f"PostgreSQL's server (initdb, pg_ctl, postgres under {POSTGRES_LIB}/<version>/bin) "
                              "is not installed: run make setup (it installs Debian's postgresql package)")
    return max(found)[1]


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            kids.append(int(entry))
    return kids


class PostgresServer:
    """A private PostgreSQL cluster in `directory` (data in ``directory/data``, its log in
    ``directory/postgres.log``, the unix socket in `directory`), listening on 127.0.0.1 at
    `port` (a free one if None), with `settings` over `NWAKU_COMPOSE_SETTINGS`. Started by
    `start()` or ``with``; an existing data directory is reused. Connect with `dsn` (TCP, user
    postgres, database postgres, trust authentication) or `connect()`."""

    def __init__(self, directory: str | os.PathLike[str], port: int | None = None,
                 settings: dict[str, str] | None = None, bindir: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory).resolve()
        self.port = port
        self.settings = {**NWAKU_COMPOSE_SETTINGS, **(settings or {})}
        self._bindir = Path(bindir) if bindir is not None else None
        self.data = self.directory / "data"
        self.log_file = self.directory / "postgres.log"
        self._started = False

    # -- running the binaries (as the postgres user when root)

    @property
    def bindir(self) -> Path:
        if self._bindir is None:
            self._bindir = postgres_bindir()
        return self._bindir

    @property
    def version(self) -> int:
        """The major version (the name of the directory above bin)."""
        return int(self.bindir.parent.name)

    def _as_owner(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        return ["runuser", "-u", "postgres", "--", *argv]

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = self._as_owner([str(self.bindir / argv[0]), *argv[1:]])
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd="/", check=False)

    def _prepare_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        socket_path = self.directory / f".s.PGSQL.{self.port}"
        if len(str(socket_path)) > 107:
            raise PostgresError(f"{self.directory} is too long a path for the server's unix socket "
                                f"({socket_path}: 107 characters at most)")
        if os.geteuid() != 0:
            return
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresError("running as root, PostgreSQL needs the postgres system user "
                                "(Debian's postgresql package creates it: run make setup)") from None
        for root, dirs, files in os.walk(self.directory):
            os.chown(root, owner.pw_uid, owner.pw_gid)
            for name in dirs + files:
                os.lchown(os.path.join(root, name), owner.pw_uid, owner.pw_gid)
        probe = subprocess.run(["runuser", "-u", "postgres", "--", "test", "-w", str(self.directory)],
                               capture_output=True, check=False)
        if probe.returncode != 0:
            raise PostgresError(f"the postgres user cannot reach {self.directory}: a parent directory is not "
                                "searchable by others (pytest's tmp_path under /tmp/pytest-of-root is 0700); "
                                "use a directory the postgres user can reach, e.g. one made with "
                                "tempfile.mkdtemp() in /tmp")

    # -- life cycle

    def start(self) -> PostgresServer:
        """initdb (first time), write the settings, ``pg_ctl start -w`` (waits until the server
        accepts connections)."""
        bindir = self.bindir  # PostgresMissing before anything is made
        if self.port is None:
            self.port = free_port()
        self._prepare_directory()
        if not (self.data / "PG_VERSION").exists():
            locale = "C.UTF-8" if _has_locale("C.utf8") else "C"
            res = self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                            f"--locale={locale}")
            if res.returncode != 0:
                raise PostgresError(f"initdb failed ({bindir}): {res.stderr.strip() or res.stdout.strip()}")
        conf = dict(self.settings)
        conf.update(listen_addresses="'127.0.0.1'", port=str(self.port),
                    unix_socket_directories=f"'{self.directory}'")
        auto = "".join(f"{k} = {v}\n" for k, v in conf.items())
        (self.data / "postgresql.auto.conf").write_text("# written by tools/nwaku_postgres.py\n" + auto)
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.data / "postgresql.auto.conf", owner.pw_uid, owner.pw_gid)
            if not self.log_file.exists():
                self.log_file.touch()
            os.chown(self.log_file, owner.pw_uid, owner.pw_gid)
        res = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_file), "-w", "-t", "60", "start")
        if res.returncode != 0:
            tail = self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""
            raise PostgresError(f"pg_ctl start failed: {res.stderr.strip() or res.stdout.strip()}\n{tail}")
        self._started = True
        return self

    def stop(self) -> None:
        """``pg_ctl stop -m fast -w``; nothing if it is not running."""
        if not (self.data / "postmaster.pid").exists():
            self._started = False
            return
        res = self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        self._started = False
        if res.returncode != 0 and (self.data / "postmaster.pid").exists():
            raise PostgresError(f"pg_ctl stop failed: {res.stderr.strip() or res.stdout.strip()}")

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- using it

    @property
    def dsn(self) -> str:
        """libpq connection string over TCP (as nwaku reaches its postgres container)."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def connect(self, **kwargs: Any) -> Any:
        """A psycopg connection in autocommit mode (nwaku's libpq connections: a transaction a
        statement); keyword arguments go to psycopg.connect (``dbname=`` for another
        database)."""
        import psycopg

        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.dsn, **kwargs)

    def pids(self) -> list[int]:
        """The postmaster's pid, then its children's (backends, checkpointer, walwriter,
        autovacuum, ...), for CPU accounting through /proc/<pid>/stat. Empty when stopped."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return []
        if not Path(f"/proc/{pid}").exists():
            return []
        return [pid, *_children(pid)]

    def database_bytes(self, dbname: str = "postgres") -> int:
        """``pg_database_size(current_database())`` of `dbname`: what nwaku's size policy
        measures."""
        with self.connect(dbname=dbname) as conn:
            return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])


def _has_locale(name: str) -> bool:
    try:
        out = subprocess.run(["locale", "-a"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return False
    return name.lower() in {line.strip().lower() for line in out.splitlines()}


# --------------------------------------------------------------------------------------------
# Schema: migrations/message_store_postgres/content_script_version_{1..7}.nim, replayed in order
# as migrations.nim's migrate does from version 0 (each script's statements one by one).

_MIGRATIONS: tuple[str, ...] = (
    # 1
    """CREATE TABLE IF NOT EXISTS messages (
   pubsubTopic VARCHAR NOT NULL,
   contentTopic VARCHAR NOT NULL,
   payload VARCHAR,
   version INTEGER NOT NULL,
   timestamp BIGINT NOT NULL,
   id VARCHAR NOT NULL,
   messageHash VARCHAR NOT NULL,
   storedAt BIGINT NOT NULL,
   CONSTRAINT messageIndex PRIMARY KEY (messageHash)
);
CREATE TABLE iF NOT EXISTS version (
   version INTEGER NOT NULL
);
INSERT INTO version (version) VALUES(1);""",
    # 2: the messages table becomes partitioned by range on storedAt
    """ALTER TABLE IF EXISTS messages_backup RENAME TO messages;
ALTER TABLE messages RENAME TO messages_backup;
ALTER TABLE messages_backup DROP CONSTRAINT messageIndex;
CREATE TABLE IF NOT EXISTS messages (
   pubsubTopic VARCHAR NOT NULL,
   contentTopic VARCHAR NOT NULL,
   payload VARCHAR,
   version INTEGER NOT NULL,
   timestamp BIGINT NOT NULL,
   id VARCHAR NOT NULL,
   messageHash VARCHAR NOT NULL,
   storedAt BIGINT NOT NULL,
   CONSTRAINT messageIndex PRIMARY KEY (messageHash, storedAt)
  ) PARTITION BY RANGE (storedAt);
DO $$
DECLARE
     min_storedAt numeric;
     max_storedAt numeric;
     min_storedAtSeconds integer = 0;
     max_storedAtSeconds integer = 0;
     partition_name TEXT;
     create_partition_stmt TEXT;
BEGIN
    SELECT MIN(storedAt) into min_storedAt
    FROM messages_backup;

    SELECT MAX(storedAt) into max_storedAt
    FROM messages_backup;

    min_storedAtSeconds := min_storedAt / 1000000000;
    max_storedAtSeconds := max_storedAt / 1000000000;

    partition_name := 'messages_' || min_storedAtSeconds || '_' || max_storedAtSeconds;
    create_partition_stmt := 'CREATE TABLE ' || partition_name ||
                            ' PARTITION OF messages FOR VALUES FROM (' ||
                            min_storedAt || ') TO (' || (max_storedAt + 1) || ')';
    IF min_storedAtSeconds > 0 AND max_storedAtSeconds > 0 THEN
        EXECUTE create_partition_stmt USING partition_name, min_storedAt, max_storedAt;
    END IF;
END $$;
INSERT INTO messages (pubsubTopic, contentTopic, payload, version, timestamp, id, messageHash, storedAt)
                SELECT pubsubTopic, contentTopic, payload, version, timestamp, id, messageHash, storedAt
                   FROM messages_backup;
DROP TABLE messages_backup;
UPDATE version SET version = 2 WHERE version = 1;""",
    # 3
    """CREATE INDEX IF NOT EXISTS i_query ON messages
  (contentTopic, pubsubTopic, storedAt, id);
UPDATE version SET version = 3 WHERE version = 2;""",
    # 4
    """ALTER TABLE messages ADD meta VARCHAR default null;
CREATE INDEX IF NOT EXISTS i_query ON messages (contentTopic, pubsubTopic, storedAt, id);
UPDATE version SET version = 4 WHERE version = 3;""",
    # 5
    """CREATE INDEX IF NOT EXISTS i_query_storedAt ON messages (storedAt, id);
UPDATE version SET version = 5 WHERE version = 4;""",
    # 6: the sender's timestamp goes, storedAt (which nwaku fills with it) takes its name
    """ALTER TABLE messages DROP COLUMN timestamp;
ALTER TABLE messages RENAME COLUMN storedAt TO timestamp;
UPDATE version SET version = 6 WHERE version = 5;""",
    # 7: messages_lookup, and the indexes of today
    """CREATE TABLE IF NOT EXISTS messages_lookup (
   timestamp BIGINT NOT NULL,
   messageHash VARCHAR NOT NULL
  );
INSERT INTO messages_lookup (messageHash, timestamp) SELECT messageHash, timestamp from messages;
ALTER TABLE messages_lookup ADD CONSTRAINT messageIndexLookupTable PRIMARY KEY (messageHash, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_messagehash ON messages (messagehash);
CREATE INDEX IF NOT EXISTS idx_messages_timestamp ON messages (timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_lookup_messagehash ON messages_lookup (messagehash);
CREATE INDEX IF NOT EXISTS idx_messages_lookup_timestamp ON messages_lookup (timestamp);
DROP INDEX IF EXISTS i_query_storedat;
DROP INDEX IF EXISTS i_query;
CREATE INDEX IF NOT EXISTS idx_query_pubsubtopic ON messages (pubsubTopic);
CREATE INDEX IF NOT EXISTS idx_query_contenttopic ON messages (contentTopic);
UPDATE version SET version = 7 WHERE version = 6;""",
)
SCHEMA_VERSION = len(_MIGRATIONS)  # migrations.nim: SchemaVersion = 7


def _statements(script: str) -> list[str]:
    """migrations.nim's breakIntoStatements: a statement ends on a line with ';', a DO $$ block
    on its END $$ line."""
    out: list[str] = []
    simple = ""
    plsql = ""
    inside = False
    for line in script.split("\n"):
        if not line.strip():
            continue
        if inside:
            plsql += line if "END $$" in line else line + "\n"
            if "END $$" in line:
                out.append(plsql)
                plsql, inside = "", False
            continue
        if "DO $$" in line:
            inside = True
            plsql += line + "\n"
            continue
        if ";" in line:
            out.append(simple + line)
            simple = ""
        else:
            simple += line + "\n"
    return out


def current_version(conn: Any) -> int:
    """postgres_driver.nim getCurrentVersion: 0 without a version table."""
    exists = conn.execute("SELECT EXISTS (SELECT FROM pg_tables WHERE tablename = 'version')").fetchone()[0]
    if not exists:
        return 0
    return int(conn.execute("SELECT version FROM version").fetchone()[0])


def create_schema(conn: Any) -> int:
    """nwaku's schema, made as nwaku makes it: the migration scripts from the database's current
    version to 7, statement by statement, each its own transaction (autocommit). Returns how
    many scripts ran (0 when already at version 7). Final schema::

        messages (pubsubTopic VARCHAR NOT NULL, contentTopic VARCHAR NOT NULL, payload VARCHAR,
                  version INTEGER NOT NULL, id VARCHAR NOT NULL, messageHash VARCHAR NOT NULL,
                  timestamp BIGINT NOT NULL, meta VARCHAR DEFAULT NULL,
                  CONSTRAINT messageIndex PRIMARY KEY (messageHash, timestamp))
                 PARTITION BY RANGE (timestamp)
          idx_messages_messagehash (messagehash), idx_messages_timestamp (timestamp),
          idx_query_pubsubtopic (pubsubTopic), idx_query_contenttopic (contentTopic)
        messages_lookup (timestamp BIGINT NOT NULL, messageHash VARCHAR NOT NULL,
                  CONSTRAINT messageIndexLookupTable PRIMARY KEY (messageHash, timestamp))
          idx_messages_lookup_messagehash (messagehash), idx_messages_lookup_timestamp (timestamp)
        version (version INTEGER NOT NULL) = 7
    """
    _require_autocommit(conn)
    ran = 0
    # migrations.nim takes an advisory lock (841886) around the scripts
    conn.execute("SELECT pg_advisory_lock(841886)")
    try:
        for script in _MIGRATIONS[current_version(conn):]:
            for statement in _statements(script):
                conn.execute(statement, prepare=False)
            ran += 1
    finally:
        conn.execute("SELECT pg_advisory_unlock(841886)")
    return ran


def _require_autocommit(conn: Any) -> None:
    if not conn.autocommit:
        raise ValueError("nwaku's statements run each in its own transaction: connect with autocommit=True "
                         "(PostgresServer.connect() does)")


# --------------------------------------------------------------------------------------------
# Partitions: partitions_manager.nim and postgres_driver.nim addPartition / getPartitionsList


@dataclass(frozen=True, order=True)
class Partition:
    """A partition of messages: [beginning, end) in seconds since the epoch."""

    beginning: int
    end: int
    name: str = field(compare=False)

    def contains(self, moment_s: float) -> bool:
        """partitions_manager.nim containsMoment."""
        return self.beginning <= moment_s < self.end


def partition_end(start_s: int) -> int:
    """partitions_manager.nim calcEndPartitionTime: the o'clock hour of start + 1 h (UTC), so a
    partition covers at most an hour and every one after the first starts on the hour."""
    end = datetime.fromtimestamp(start_s, UTC) + timedelta(hours=1)
    return int(end.replace(minute=0, second=0, microsecond=0).timestamp())


def partition_name(start_s: int) -> str:
    """postgres_driver.nim addPartition: messages_<from s>_<until s>."""
    return f"messages_{start_s}_{partition_end(start_s)}"


def list_partitions(conn: Any) -> list[Partition]:
    """postgres_driver.nim getPartitionsList + refreshPartitionsInfo: the partitions attached to
    messages, ordered by name (oldest first while the seconds have ten digits)."""
    rows = conn.execute("""
                      SELECT child.relname       AS partition_name
                          FROM pg_inherits
                          JOIN pg_class parent            ON pg_inherits.inhparent = parent.oid
                          JOIN pg_class child             ON pg_inherits.inhrelid   = child.oid
                          JOIN pg_namespace nmsp_parent   ON nmsp_parent.oid  = parent.relnamespace
                          JOIN pg_namespace nmsp_child    ON nmsp_child.oid   = child.relnamespace
                          WHERE parent.relname='messages'
                          ORDER BY partition_name ASC
                          """).fetchall()
    parts = []
    for (name,) in rows:
        times = name.replace("messages_", "").split("_")
        if len(times) != 2:
            raise NwakuError(f"loopPartitionFactory wrong partition name {name}")
        parts.append(Partition(int(times[0]), int(times[1]), name))
    return parts


def _with_lock(query: str) -> str:
    """postgres_driver.nim performWriteQueryWithLock: the statement inside a DO block holding
    advisory lock 123456789."""
    return f"""
          DO $$
          DECLARE
              lock_acquired boolean;
          BEGIN
              -- Try to acquire the advisory lock
              lock_acquired := pg_try_advisory_lock(123456789);

              IF NOT lock_acquired THEN
                  RAISE EXCEPTION 'could not acquire advisory lock';
              END IF;

              -- Perform the query
              BEGIN
                  {query}
              EXCEPTION WHEN OTHERS THEN
                  -- Ensure the lock is released if an error occurs
                  PERFORM pg_advisory_unlock(123456789);
                  RAISE;
              END;

              -- Release the advisory lock after the query completes successfully
              PERFORM pg_advisory_unlock(123456789);
          END $$;
"""


def add_partition(conn: Any, start_s: int) -> Partition:
    """postgres_driver.nim addPartition: CREATE TABLE ... (LIKE messages INCLUDING DEFAULTS
    INCLUDING CONSTRAINTS), a CHECK on its range, ATTACH PARTITION, drop the CHECK (each under
    the advisory lock)."""
    _require_autocommit(conn)
    start_s = int(start_s)
    end_s = partition_end(start_s)
    name = f"messages_{start_s}_{end_s}"
    lo, hi = f"{start_s}000000000", f"{end_s}000000000"
    check = name + "_by_range_check"
    for statement in (
        f"CREATE TABLE IF NOT EXISTS {name} (LIKE messages INCLUDING DEFAULTS INCLUDING CONSTRAINTS);",
        f"ALTER TABLE {name} ADD CONSTRAINT {check} CHECK ( timestamp >= {lo} AND timestamp < {hi} );",
        f"ALTER TABLE messages ATTACH PARTITION {name} FOR VALUES FROM ({lo}) TO ({hi});",
        f"ALTER TABLE {name} DROP CONSTRAINT {check};",
    ):
        conn.execute(_with_lock(statement), prepare=False)
    return Partition(start_s, end_s, name)


def create_partitions(conn: Any, start_s: float, end_s: float) -> list[Partition]:
    """Partitions covering every second from `start_s` to `end_s` (inclusive), made as nwaku's
    loopPartitionFactory makes them: with none, the first starts at `start_s` (nwaku: at "now");
    with the newest ending at or before `start_s`, a new one starts at `start_s` (a node stopped a
    long time); then each next one starts where the newest ends, while the newest does not
    reach past `end_s` (nwaku makes the next one once now is in the newest: always one
    ahead, so ``create_partitions(conn, now, now + 3600)`` is the state of a running node).
    Returns the partitions made. nwaku never makes a partition before its oldest: a `start_s`
    there raises ValueError (nwaku could not store such rows)."""
    start, end = int(start_s), int(end_s)
    if end < start:
        raise ValueError(f"end_s {end_s} before start_s {start_s}")
    parts = list_partitions(conn)
    made: list[Partition] = []
    if parts and start < parts[0].beginning:
        raise ValueError(f"{start} is before nwaku's oldest partition {parts[0].name}: nwaku adds partitions "
                         "only from now on")
    if not parts or start >= parts[-1].end:
        made.append(add_partition(conn, start))
        parts.append(made[-1])
    while parts[-1].end <= end:
        made.append(add_partition(conn, parts[-1].end))
        parts.append(made[-1])
    for moment in (start, end):
        if not any(p.contains(moment) for p in parts):
            raise ValueError(f"second {moment} falls in a gap between nwaku's partitions")
    return made


# --------------------------------------------------------------------------------------------
# Inserts: postgres_driver.nim put (InsertRow, InsertRowMessagesLookup)

INSERT_ROW = """INSERT INTO messages (id, messageHash, pubsubTopic, contentTopic, payload,
  version, timestamp, meta) VALUES ($1, $2, $3, $4, $5, $6, $7, CASE WHEN $8 = '' THEN NULL ELSE $8 END) ON CONFLICT DO NOTHING;"""  # noqa: E501
INSERT_ROW_LOOKUP = """INSERT INTO messages_lookup (messageHash, timestamp) VALUES ($1, $2) ON CONFLICT DO NOTHING;"""


def insert_row(conn: Any, message_hash: bytes, pubsub_topic: str, content_topic: str, payload: bytes,
               version: int, timestamp: int, meta: bytes = b"") -> None:
    """One message as nwaku's put stores it: the prepared InsertRow then the prepared
    InsertRowMessagesLookup, each its own transaction (autocommit), every parameter text
    ("0" for the v2 id, the hash, payload and meta in hex, an empty meta becoming NULL).
    A row whose timestamp no partition covers fails (psycopg.errors.CheckViolation: "no
    partition of relation"), as it does in nwaku."""
    import psycopg

    _require_autocommit(conn)
    hash_hex = message_hash.hex()
    ts = str(timestamp)
    with psycopg.RawCursor(conn) as cur:
        cur.execute(INSERT_ROW, ("0", hash_hex, pubsub_topic, content_topic, payload.hex(), str(version), ts,
                                 meta.hex()), prepare=True)
        cur.execute(INSERT_ROW_LOOKUP, (hash_hex, ts), prepare=True)


# --------------------------------------------------------------------------------------------
# Bulk load: our messages table (ingest/store/reader.py MESSAGES_ARROW_SCHEMA) -> nwaku's rows

def _hex(arr: Any) -> Any:
    """A binary Arrow array as lower-case hex strings (byteutils.toHex), nulls kept, without a
    Python step a row: the values buffer is hex-encoded whole, the offsets doubled."""
    import pyarrow as pa

    arr = arr.cast(pa.large_binary())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    lo, hi = int(offsets[0]), int(offsets[-1])
    hexed = binascii.hexlify(memoryview(data_buf)[lo:hi]) if data_buf is not None and hi > lo else b""
    out = pa.LargeStringArray.from_buffers(len(arr), pa.py_buffer((offsets - lo) * 2), pa.py_buffer(hexed))
    if arr.null_count:
        out = pa.compute.if_else(arr.is_valid(), out, pa.scalar(None, pa.large_string()))
    return out


def nwaku_rows(table: Any) -> Any:
    """Our rows as nwaku's messages rows (an Arrow table of its columns, in COPY order): id "0";
    messageHash, payload, meta in hex; version 0 when null; timestamp the sender's, and where
    the sender gave none (null or 0) ``int(received_time * 1e9)``. (nwaku stores no such
    message: its archive's validate refuses a timestamp more than 20 s from now, 0 included,
    and a publishing nwaku stamps 0 with now; the receive time stands for that stamp.) A null
    payload becomes '' (nwaku hex-encodes an empty payload), a null or empty meta NULL
    (InsertRow's CASE). Rows repeating a (hash, timestamp) keep the first, as ON CONFLICT DO
    NOTHING would."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    ts = table.column("timestamp").cast(pa.int64())
    received = pc.cast(pc.multiply(table.column("received_time").cast(pa.float64()), 1e9), pa.int64(),
                       safe=False)
    untimed = pc.or_kleene(pc.is_null(ts), pc.equal(ts, 0))
    ts = pc.if_else(untimed, received, ts)
    payload = pc.fill_null(table.column("payload"), b"")
    meta = table.column("meta")
    meta = pc.if_else(pc.equal(pc.binary_length(meta), 0), pa.scalar(None, meta.type), meta)
    version = pc.fill_null(table.column("version").cast(pa.int64()), 0)
    rows = pa.table({
        "id": pa.array(np.full(n, "0", dtype=object), pa.large_string()) if n else pa.array([], pa.large_string()),
        "messagehash": _hex(table.column("message_hash")),
        "pubsubtopic": table.column("pubsub_topic").cast(pa.large_string()),
        "contenttopic": table.column("content_topic").cast(pa.large_string()),
        "payload": _hex(payload),
        "version": version,
        "timestamp": ts,
        "meta": _hex(meta),
    })
    if n and _may_repeat(table.column("message_hash")):
        keyed = rows.select(["messagehash", "timestamp"]).append_column("i", pa.array(np.arange(n)))
        first = keyed.group_by(["messagehash", "timestamp"], use_threads=False).aggregate([("i", "min")])
        if first.num_rows != n:
            rows = rows.take(np.sort(first.column("i_min").to_numpy()))
    return rows


def _may_repeat(hashes: Any) -> bool:
    """False when no two hashes can be equal: 32-byte hashes whose first 8 bytes all differ (a
    sort of n integers instead of hashing n strings)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = hashes.cast(pa.large_binary())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.null_count or pc.min_max(pc.binary_length(arr)).as_py() != {"min": 32, "max": 32}:
        return True
    _, off_buf, data_buf = arr.buffers()
    lo = int(np.frombuffer(off_buf, dtype=np.int64)[arr.offset])
    prefix = np.frombuffer(data_buf, dtype=np.uint8)[lo:lo + 32 * len(arr)].reshape(-1, 32)[:, :8].copy()
    keys = np.sort(prefix.view(np.uint64).reshape(-1))
    return bool(np.any(keys[1:] == keys[:-1]))


_MESSAGES_COPY = ("COPY messages (id, messageHash, pubsubTopic, contentTopic, payload, version, timestamp, meta) "
                  "FROM STDIN WITH (FORMAT csv)")
_LOOKUP_COPY = "COPY messages_lookup (messageHash, timestamp) FROM STDIN WITH (FORMAT csv)"


def _csv_chunks(rows: Any, chunk_rows: int) -> Iterator[bytes]:
    """CSV for COPY: every value quoted (so '' stays an empty string), NULL unquoted empty."""
    import pyarrow.csv as pcsv

    opts = pcsv.WriteOptions(include_header=False, quoting_style="all_valid", batch_size=min(chunk_rows, 65536))
    for start in range(0, rows.num_rows, chunk_rows):
        sink = io.BytesIO()
        pcsv.write_csv(rows.slice(start, chunk_rows), sink, opts)
        yield sink.getvalue()


def _copy(conn: Any, statement: str, rows: Any, chunk_rows: int) -> None:
    with conn.cursor() as cur, cur.copy(statement) as copy:
        for data in _csv_chunks(rows, chunk_rows):
            copy.write(data)


def bulk_load(conn: Any, table: Any, chunk_rows: int = 200_000, keep_indexes: bool = False) -> int:
    """Loads our rows (a pyarrow Table with at least received_time, message_hash, pubsub_topic,
    content_topic, payload, version, timestamp and meta, as MESSAGES_ARROW_SCHEMA) into nwaku's
    messages and messages_lookup, as nwaku's inserts would have left them (`nwaku_rows`), with
    COPY (messages and messages_lookup on two connections at once): first the partitions that
    cover the rows' timestamps (`create_partitions`; rows older than an existing oldest
    partition raise ValueError), then the rows, then ANALYZE of both (nwaku's analyzeTableLoop
    runs ANALYZE messages daily). Into empty tables, unless `keep_indexes`, the primary keys and
    indexes are dropped first and made again after the load: same names and definitions, but
    built by a sort, so the hash indexes come out packed (fill factor 90) where nwaku's, grown a
    random hash at a time, are about a third larger after page splits; `keep_indexes=True`
    loads with them in place (slower, the index shape of a node that inserted the rows).
    Returns the rows loaded (repeated (hash, timestamp) pairs counted once)."""
    import pyarrow.compute as pc

    _require_autocommit(conn)
    rows = nwaku_rows(table)
    if rows.num_rows == 0:
        return 0
    lo, hi = pc.min_max(rows.column("timestamp")).values()
    create_partitions(conn, lo.as_py() // 1_000_000_000, hi.as_py() // 1_000_000_000)
    empty = conn.execute("SELECT NOT EXISTS (SELECT 1 FROM messages) AND NOT EXISTS (SELECT 1 FROM messages_lookup)"
                         ).fetchone()[0]
    rebuild = _drop_indexes(conn) if empty and not keep_indexes else []
    # messages on `conn`, messages_lookup on a second connection alongside (a backend each)
    import psycopg

    with psycopg.connect(conn.info.dsn, password=conn.info.password, autocommit=True) as other, \
            ThreadPoolExecutor(1) as pool:
        lookup = pool.submit(_load_table, other, _LOOKUP_COPY, rows.select(["messagehash", "timestamp"]),
                             [s for s in rebuild if "messages_lookup" in s], "messages_lookup", chunk_rows)
        _load_table(conn, _MESSAGES_COPY, rows, [s for s in rebuild if "messages_lookup" not in s], "messages",
                    chunk_rows)
        lookup.result()
    return int(rows.num_rows)


def _load_table(conn: Any, copy: str, rows: Any, rebuild: list[str], table: str, chunk_rows: int) -> None:
    """COPY, the indexes made again (a sort each), ANALYZE."""
    try:
        _copy(conn, copy, rows, chunk_rows)
    finally:
        if rebuild:
            conn.execute("SET maintenance_work_mem = '256MB'")
            for statement in rebuild:
                conn.execute(statement, prepare=False)
            conn.execute("RESET maintenance_work_mem")
    conn.execute(f"ANALYZE {table}")


# The constraints and indexes of create_schema's final state, as statements that make them
# again (their names and definitions are migration 2's and 7's).
_INDEXES = (
    ("messages", "messageindex",
     "ALTER TABLE messages ADD CONSTRAINT messageIndex PRIMARY KEY (messageHash, timestamp)"),
    ("messages", "idx_messages_messagehash", "CREATE INDEX idx_messages_messagehash ON messages (messagehash)"),
    ("messages", "idx_messages_timestamp", "CREATE INDEX idx_messages_timestamp ON messages (timestamp)"),
    ("messages", "idx_query_pubsubtopic", "CREATE INDEX idx_query_pubsubtopic ON messages (pubsubTopic)"),
    ("messages", "idx_query_contenttopic", "CREATE INDEX idx_query_contenttopic ON messages (contentTopic)"),
    ("messages_lookup", "messageindexlookuptable",
     "ALTER TABLE messages_lookup ADD CONSTRAINT messageIndexLookupTable PRIMARY KEY (messageHash, timestamp)"),
    ("messages_lookup", "idx_messages_lookup_messagehash",
     "CREATE INDEX idx_messages_lookup_messagehash ON messages_lookup (messagehash)"),
    ("messages_lookup", "idx_messages_lookup_timestamp",
     "CREATE INDEX idx_messages_lookup_timestamp ON messages_lookup (timestamp)"),
)


def _drop_indexes(conn: Any) -> list[str]:
    """Drops the final schema's primary keys and indexes (those present), returning the
    statements that make them again."""
    present = {name for (name,) in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('i', 'I')").fetchall()}
    again = []
    for table, name, make in _INDEXES:
        if name not in present:
            continue
        if make.startswith("ALTER"):
            conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        else:
            conn.execute(f"DROP INDEX {name}")
        again.append(make)
    return again


# --------------------------------------------------------------------------------------------
# Queries: archive.nim findMessages over postgres_driver.nim getMessages

_SELECT_CLAUSE = """SELECT messageHash, pubsubTopic, contentTopic, payload, version, timestamp, meta FROM messages """

_WHERE_NO_CURSOR = """WHERE contentTopic IN ($1) AND
          messageHash IN ($2) AND
          pubsubTopic = $3 AND
          timestamp >= $4 AND
          timestamp <= $5
    ORDER BY timestamp {d}, messageHash {d} LIMIT $6;"""
_WHERE_CURSOR = """WHERE contentTopic IN ($1) AND
          messageHash IN ($2) AND
          pubsubTopic = $3 AND
          (timestamp, messageHash) {c} ($4,$5) AND
          timestamp >= $6 AND
          timestamp <= $7
    ORDER BY timestamp {d}, messageHash {d} LIMIT $8;"""

# name -> definition, as postgres_driver.nim declares them
PREPARED: dict[str, str] = {
    "SelectWithoutCursorAsc": _SELECT_CLAUSE + _WHERE_NO_CURSOR.format(d="ASC"),
    "SelectWithoutCursorAndDataAsc": "SELECT messageHash FROM messages\n    " + _WHERE_NO_CURSOR.format(d="ASC"),
    "SelectWithoutCursorDesc": _SELECT_CLAUSE + _WHERE_NO_CURSOR.format(d="DESC"),
    "SelectWithoutCursorAndDataDesc": "SELECT messageHash FROM messages\n    " + _WHERE_NO_CURSOR.format(d="DESC"),
    "SelectWithCursorDesc": _SELECT_CLAUSE + _WHERE_CURSOR.format(c="<", d="DESC"),
    "SelectWithCursorNoDataDesc": "SELECT messageHash FROM messages\n    " + _WHERE_CURSOR.format(c="<", d="DESC"),
    "SelectWithCursorAsc": _SELECT_CLAUSE + _WHERE_CURSOR.format(c=">", d="ASC"),
    "SelectWithCursorNoDataAsc": "SELECT messageHash FROM messages\n    " + _WHERE_CURSOR.format(c=">", d="ASC"),
    "SelectMessageByHashInMessagesLookup": """SELECT timestamp FROM messages_lookup
    WHERE messageHash = $1""",
}


@dataclass(frozen=True)
class StoreRow:
    """A row of a page: with include_data false only message_hash is set (nwaku answers hashes
    alone: hashCallbackImpl, toStoreResult)."""

    message_hash: bytes
    pubsub_topic: str | None = None
    content_topic: str | None = None
    payload: bytes | None = None
    version: int | None = None
    timestamp: int | None = None
    meta: bytes | None = None


@dataclass(frozen=True)
class StorePage:
    """findMessages' answer: the rows in the order nwaku returns them, and the cursor (the hash
    of the last row included) when more rows were found than the page holds."""

    rows: list[StoreRow]
    cursor: bytes | None
    statements: list[str] = field(default_factory=list)  # what was run: a prepared name or "arbitrary", ...


def _quote(value: str) -> str:
    """db_connector's dbQuote: a string literal, quotes doubled."""
    if "\0" in value:
        raise ValueError("NUL in a query argument")
    return "'" + value.replace("'", "''") + "'"


def _db_format(query: str, args: Sequence[str]) -> str:
    """db_connector's dbFormat: every ? of the query replaced by the next argument, quoted."""
    if not args:
        return query
    out = []
    it = iter(args)
    for ch in query:
        out.append(_quote(next(it)) if ch == "?" else ch)
    return "".join(out)


def _data_row(r: Sequence[Any]) -> StoreRow:
    """rowCallbackImpl: hash, topic, content topic, hex payload, version, timestamp, hex meta."""
    return StoreRow(bytes.fromhex(r[0]), r[1], r[2], bytes.fromhex(r[3] or ""), int(r[4]), int(r[5]),
                    bytes.fromhex(r[6] or ""))


def _run_arbitrary(conn: Any, query: str, args: Sequence[str], request_id: str, data: bool) -> list[StoreRow]:
    """pgQuery: the arguments inlined as literals, the request id in a comment, sent as a plain
    (not prepared) query."""
    text = _db_format(f"/* requestId={request_id} */ " + query, args)
    rows = conn.execute(text, prepare=False).fetchall()
    return [_data_row(r) for r in rows] if data else [StoreRow(bytes.fromhex(r[0])) for r in rows]


def _run_prepared(conn: Any, name: str, params: Sequence[str], data: bool) -> list[StoreRow]:
    """runStmt: the statement prepared on the connection, text parameters (their types
    inferred by the server, as PQprepare without types does)."""
    import psycopg

    try:
        with psycopg.RawCursor(conn) as cur:
            rows = cur.execute(PREPARED[name], tuple(params), prepare=True).fetchall()
    except psycopg.Error as e:
        raise NwakuError(f"{name}: error in runStmt: {e}") from e
    return [_data_row(r) for r in rows] if data else [StoreRow(bytes.fromhex(r[0])) for r in rows]


def _time_cursor(conn: Any, hash_hex: str) -> int:
    """getTimeCursor: the cursor's timestamp from messages_lookup (prepared)."""
    import psycopg

    with psycopg.RawCursor(conn) as cur:
        row = cur.execute(PREPARED["SelectMessageByHashInMessagesLookup"], (hash_hex,), prepare=True).fetchone()
    if row is None:
        raise NwakuError("cursor not found")
    return int(row[0])


def _arbitrary(conn: Any, data: bool, content_topics: Sequence[str], pubsub_topic: str | None,
               cursor: bytes | None, start_ns: int | None, end_ns: int | None, hex_hashes: Sequence[str],
               limit: int, forward: bool, request_id: str) -> list[StoreRow]:
    """getMessagesArbitraryQuery / getMessageHashesArbitraryQuery."""
    query = _SELECT_CLAUSE if data else "SELECT messageHash FROM messages"
    statements: list[str] = []
    args: list[str] = []
    if cursor is not None:
        hash_hex = cursor.hex()
        ts = _time_cursor(conn, hash_hex)
        statements.append("(timestamp, messageHash) " + (">" if forward else "<") + " (?,?)")
        args += [str(ts), hash_hex]
    if content_topics:
        statements.append("contentTopic IN (" + ",".join("?" * len(content_topics)) + ")")
        args += list(content_topics)
    if hex_hashes:
        statements.append("messageHash IN (" + ",".join("?" * len(hex_hashes)) + ")")
        args += list(hex_hashes)
    if pubsub_topic is not None:
        statements.append("pubsubTopic = ?")
        args.append(pubsub_topic)
    if start_ns is not None:
        statements.append("timestamp >= ?")
        args.append(str(start_ns))
    if end_ns is not None:
        statements.append("timestamp <= ?")
        args.append(str(end_ns))
    if statements:
        query += " WHERE " + " AND ".join(statements)
    direction = "ASC" if forward else "DESC"
    query += " ORDER BY timestamp " + direction + ", messageHash " + direction
    query += " LIMIT ?"
    args.append(str(limit))
    return _run_arbitrary(conn, query, args, request_id, data)


def _prepared(conn: Any, data: bool, content_topic: str, pubsub_topic: str, cursor: bytes | None, start_ns: int,
              end_ns: int, hashes: str, limit: int, forward: bool) -> tuple[str, list[StoreRow]]:
    """getMessagesPreparedStmt / getMessageHashesPreparedStmt, parameters as nwaku passes them
    (topics and hashes each joined by commas into one parameter; with a cursor the hash before
    the timestamp, bound to ($4,$5) = (timestamp, messageHash); for the data statements without
    a cursor five lengths for six values, which nwaku's sendQueryPrepared refuses before
    sending)."""
    asc = "Asc" if forward else "Desc"
    if cursor is None:
        name = f"SelectWithoutCursor{asc}" if data else f"SelectWithoutCursorAndData{asc}"
        if data:
            raise NwakuError(f"{name}: error in runStmt: error in dbConnQueryPrepared calling sendQuery: "
                             "lengths discrepancies in sendQueryPrepared: 6 5 5")
        return name, _run_prepared(conn, name, [content_topic, hashes, pubsub_topic, str(start_ns), str(end_ns),
                                                str(limit)], data)
    hash_hex = cursor.hex()
    ts = _time_cursor(conn, hash_hex)
    name = f"SelectWithCursor{asc}" if data else f"SelectWithCursorNoData{asc}"
    return name, _run_prepared(conn, name, [content_topic, hashes, pubsub_topic, hash_hex, str(ts), str(start_ns),
                                            str(end_ns), str(limit)], data)


def _by_hashes(conn: Any, hashes: str, limit: int, request_id: str) -> list[StoreRow]:
    """getMessagesByMessageHashes: through messages_lookup, newest first."""
    query = f"""
  WITH min_timestamp AS (
    SELECT MIN(timestamp) AS min_ts
    FROM messages_lookup
    WHERE messagehash IN (
      {hashes}
    )
  )
  SELECT m.messageHash, pubsubTopic, contentTopic, payload, version, m.timestamp, meta
  FROM messages m
  INNER JOIN
    messages_lookup l
  ON
    m.timestamp = l.timestamp
    AND m.messagehash = l.messagehash
  WHERE
    l.timestamp >= (SELECT min_ts FROM min_timestamp)
    AND l.messagehash IN (
      {hashes}
    )
  ORDER BY
    m.timestamp DESC,
    m.messagehash DESC
  LIMIT {limit};
  """
    return _run_arbitrary(conn, query, (), request_id, True)


def query(conn: Any, pubsub_topic: str | None = None, content_topics: Sequence[str] = (),
          start_ns: int | None = None, end_ns: int | None = None, cursor_hash: bytes | None = None,
          forward: bool = True, page_size: int = 0, include_data: bool = True,
          hashes: Sequence[bytes] = (), request_id: str = "") -> StorePage:
    """A store v3 query as nwaku's archive answers it (findMessages -> getMessages ->
    getMessagesWithinLimits), SQL for SQL:

    - the page holds `page_size` rows (20 if 0, at most 100); page_size + 1 rows are asked for,
      and when more than page_size come back the cursor is the hash of the last row included
      (nwaku: rows[^2]); a backward page is reversed, so rows come oldest first;
    - hashes go 100 to a query (countup(0, len, 100): one query per 100, and one more without
      hashes when their number is a multiple of 100), the rows of all concatenated;
    - hashes alone (no topics, times or cursor): the messages_lookup join, with data even when
      `include_data` is false (only the hashes are answered), ``ORDER BY ... DESC`` whatever
      `forward` (and then reversed when backward);
    - content topics + hashes + pubsub topic + both times: the prepared statements (see
      `_prepared` for how they fail);
    - otherwise the arbitrary query: the cursor's timestamp from messages_lookup (prepared), then
      ``(timestamp, messageHash) >|< (ts, hash)``, the topics, hashes and times, ``ORDER BY
      timestamp, messageHash`` in the direction, LIMIT, arguments inlined as literals.

    `include_data` false selects only messageHash. Raises NwakuError with nwaku's text where
    nwaku answers an error (bad cursor, cursor not found, a failing prepared statement)."""
    if cursor_hash is not None:
        if len(cursor_hash) != 32:
            raise NwakuError(f"invalid cursor hash length: {len(cursor_hash)}")
        if cursor_hash == bytes(32):
            raise NwakuError("all zeroes cursor hash")
        if len(content_topics) > MAX_CONTENT_TOPICS_PER_QUERY:
            raise NwakuError("too many content topics")
    max_page = DEFAULT_PAGE_SIZE if page_size <= 0 else min(page_size, MAX_PAGE_SIZE)
    limit = max_page + 1
    rows: list[StoreRow] = []
    ran: list[str] = []
    for i in range(0, len(hashes) + 1, MAX_HASHES_PER_QUERY):
        chunk = list(hashes[i:i + MAX_HASHES_PER_QUERY])
        hex_hashes = [h.hex() for h in chunk]
        if (cursor_hash is None and pubsub_topic is None and not content_topics and start_ns is None
                and end_ns is None and hex_hashes):
            rows += _by_hashes(conn, "'" + "','".join(hex_hashes) + "'", limit, request_id)
            ran.append("by_hashes")
        elif content_topics and hex_hashes and pubsub_topic is not None and start_ns is not None and end_ns is not None:
            name, got = _prepared(conn, include_data, ",".join(content_topics), pubsub_topic, cursor_hash, start_ns,
                                  end_ns, ",".join(hex_hashes), limit, forward)
            rows += got
            ran.append(name)
        else:
            rows += _arbitrary(conn, include_data, content_topics, pubsub_topic, cursor_hash, start_ns, end_ns,
                               hex_hashes, limit, forward, request_id)
            ran.append("arbitrary")
    if not rows:
        return StorePage([], None, ran)
    cursor = rows[-2].message_hash if len(rows) > max_page else None
    page = rows[:max_page] if include_data else [StoreRow(r.message_hash) for r in rows[:max_page]]
    if not forward:
        page.reverse()
    return StorePage(page, cursor, ran)


# --------------------------------------------------------------------------------------------
# Retention: retention_policy_time.nim, retention_policy_size.nim over postgres_driver.nim


@dataclass
class RetentionResult:
    """What a policy removed: the partitions dropped (names), the rows the DELETEs removed from
    messages and messages_lookup, the database size before and after (bytes), and nwaku's error
    text when the policy stopped on one (nwaku logs it and tries again a minute later)."""

    dropped_partitions: list[str] = field(default_factory=list)
    dropped_rows: int = 0  # rows in the partitions dropped
    deleted_messages: int = 0
    deleted_lookup: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    error: str | None = None


def _database_bytes(conn: Any) -> int:
    return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])


def _detach_and_drop(conn: Any, part: Partition, result: RetentionResult) -> None:
    """detachAndDropPartition: DETACH CONCURRENTLY (FINALIZE when one is pending), DROP TABLE,
    then DELETE FROM messages_lookup WHERE timestamp < the partition's end."""
    import psycopg

    result.dropped_rows += int(conn.execute(f"SELECT count(*) FROM {part.name}").fetchone()[0])
    try:
        conn.execute(f"ALTER TABLE messages DETACH PARTITION {part.name} CONCURRENTLY;", prepare=False)
    except psycopg.Error as e:
        if "FINALIZE" not in str(e) and "already pending" not in str(e):
            raise
        conn.execute(f"ALTER TABLE messages DETACH PARTITION {part.name} FINALIZE;", prepare=False)
    conn.execute(f"DROP TABLE {part.name}", prepare=False)
    result.dropped_partitions.append(part.name)
    cur = conn.execute(f"DELETE FROM messages_lookup WHERE timestamp < {part.end * 1_000_000_000}", prepare=False)
    result.deleted_lookup += max(cur.rowcount, 0)


def apply_time_retention(conn: Any, retention_s: float, now_s: float | None = None) -> RetentionResult:
    """TimeRetentionPolicy.execute -> deleteMessagesOlderThanTimestamp(now - retention):
    removePartitionsOlderThan drops the oldest partitions while they end before that moment (in
    whole seconds), then ``DELETE FROM messages WHERE timestamp < <ns>`` (messages_lookup
    keeps those rows' entries, as in nwaku). When every partition goes, nwaku stops with an
    error before the DELETE (`error` set)."""
    _require_autocommit(conn)
    now_ns = int((time.time() if now_s is None else now_s) * 1e9)  # getNanosecondTime(getTime().toUnixFloat())
    ts_ns = now_ns - int(retention_s * 1e9)
    ts_s = int(float(ts_ns) / 1_000_000_000)
    result = RetentionResult(bytes_before=_database_bytes(conn))
    parts = list_partitions(conn)
    if not parts:
        result.error = ("error while removing older partitions: could not get oldest partition in "
                        "removePartitionOlderThan: there are no partitions allocated")
    while parts and parts[0].end < ts_s:
        _detach_and_drop(conn, parts.pop(0), result)
        if not parts:
            result.error = ("error while removing older partitions: could not get partition in "
                            "removePartitionOlderThan in while loop: there are no partitions allocated")
    if result.error is None:
        cur = conn.execute(f"DELETE FROM messages WHERE timestamp < {ts_ns}", prepare=False)
        result.deleted_messages = max(cur.rowcount, 0)
    result.bytes_after = _database_bytes(conn)
    return result


def apply_size_retention(conn: Any, max_bytes: int = DEFAULT_RETENTION_SIZE,
                         now_s: float | None = None) -> RetentionResult:
    """SizeRetentionPolicy.execute -> decreaseDatabaseSize(max_bytes): while
    pg_database_size(current_database()) is over the limit and partitions are left, drop the
    oldest (removeOldestPartition: not when it is the one holding now; then the size stays and
    nwaku stops: "the previous partition removal didn't clear database size")."""
    _require_autocommit(conn)
    now = int(time.time() if now_s is None else now_s)
    size = _database_bytes(conn)
    result = RetentionResult(bytes_before=size, bytes_after=size)
    parts = list_partitions(conn)
    while size > max_bytes and parts:
        oldest = parts[0]
        current = next((p for p in parts if p.contains(now)), None)
        if current is not None and current == oldest:
            pass  # "Skipping to remove the current partition"
        else:
            _detach_and_drop(conn, parts.pop(0), result)
        new_size = _database_bytes(conn)
        if new_size == size:
            result.error = ("decreaseDatabaseSize failed: the previous partition removal didn't clear "
                            "database size")
            break
        size = new_size
    result.bytes_after = size
    return result


def messages_count(conn: Any) -> int:
    """getMessagesCount."""
    return int(conn.execute("SELECT COUNT(1) FROM messages").fetchone()[0])


__all__ = [
    "DEFAULT_PAGE_SIZE", "DEFAULT_RETENTION_SIZE", "MAX_HASHES_PER_QUERY", "MAX_PAGE_SIZE", "NWAKU_COMPOSE_SETTINGS",
    "NWAKU_TAG", "NwakuError", "Partition", "PostgresError", "PostgresMissing", "PostgresServer", "RetentionResult",
    "SCHEMA_VERSION", "StorePage", "StoreRow", "add_partition", "apply_size_retention", "apply_time_retention",
    "bulk_load", "create_partitions", "create_schema", "current_version", "insert_row", "list_partitions",
    "messages_count", "nwaku_rows", "partition_end", "partition_name", "postgres_bindir", "query",
]
