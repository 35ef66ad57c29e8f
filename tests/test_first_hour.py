"""The first hour of a new user (issue 45): the database documents itself, each output reads as the
README says, the regression gate, the Slurm epilog and the notebook view."""
from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import BUNDLED

JOB = sorted(str(p) for p in (BUNDLED / "ddp4_sync_stall").glob("rank-*.pt.trace.json.gz"))
# the SQL types DuckDB names (duckdb_columns().data_type shows them; a comment repeating one read as
# part of the meaning: "the call (INTEGER, INTEGER, VARCHAR)")
SQL_TYPE = re.compile(r"\b(BIGINT|UBIGINT|INTEGER|SMALLINT|TINYINT|HUGEINT|VARCHAR|DOUBLE|FLOAT|REAL|BOOLEAN|TIMESTAMP)"
                      r"(\[\])?\W*$")
# columns of one table that may share one text: none today (each says which end, which part)
SHARED_BY_MEANING: set[tuple[str, str]] = set()


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory):
    """The demo's database: `make demo`'s job ingested (every pack)."""
    import traceflow
    out = tmp_path_factory.mktemp("demo") / "job.duckdb"
    traceflow.ingest(JOB, str(out)).close()
    return str(out)


def _catalog(path):
    import duckdb
    con = duckdb.connect(path, read_only=True)
    cols = con.execute("""SELECT table_name, column_name, comment, data_type FROM duckdb_columns()
                          WHERE schema_name = 'main' AND NOT internal ORDER BY table_name, column_index""").fetchall()
    tables = dict(con.execute("""SELECT table_name, comment FROM duckdb_tables() WHERE schema_name = 'main'
                                 UNION ALL SELECT view_name, comment FROM duckdb_views()
                                 WHERE schema_name = 'main' AND NOT internal""").fetchall())
    return con, cols, tables


def test_every_column_has_a_comment_of_its_own(demo_db):
    con, cols, tables = _catalog(demo_db)
    assert len(tables) > 40, tables
    missing = [(t, c) for t, c, doc, _ in cols if not doc]
    assert not missing, missing
    typed = [(t, c, doc) for t, c, doc, _ in cols if SQL_TYPE.search(doc)]
    assert not typed, typed
    by_table: dict[str, Counter] = {}
    for t, _, doc, _ in cols:
        by_table.setdefault(t, Counter())[doc] += 1
    shared = [(t, c, doc) for t, c, doc, _ in cols if by_table[t][doc] > 1 and (t, c) not in SHARED_BY_MEANING]
    assert not shared, shared


def test_table_comments_are_whole_sentences(demo_db):
    """A table's comment is its whole paragraph: never cut where a line of the header ended ("... its
    usual count of"), never running on into a column's name ("... to the end of its trace. rank")."""
    con, cols, tables = _catalog(demo_db)
    cut = {t: doc for t, doc in tables.items() if not doc or re.search(r"\b(of|the|a|an|to|in|its|and|or|beyond)$", doc)
           or doc.count("(") != doc.count(")")
           or (t == "desync_timing_ranks" and doc.endswith(" rank"))}
    assert not cut, cut
    # `query --list` shows each pack's first sentence: whole, too
    from traceflow.packs import listing
    for p in listing():
        if p.description:
            assert not re.search(r"\b(of|the|a|an|to|in|its|and|or)$", p.description), p


def test_enumerated_values_are_the_columns_values(demo_db):
    """A comment listing a column's values (a | b | c) lists the values the column holds."""
    con, cols, _ = _catalog(demo_db)
    checked = 0
    for t, c, doc, dtype in cols:
        if dtype != "VARCHAR" or " | " not in (doc or ""):
            continue
        values = {v for (v,) in con.execute(f'SELECT DISTINCT "{c}" FROM "{t}" WHERE "{c}" IS NOT NULL LIMIT 50').fetchall()}
        if not values or len(values) > 20:
            continue
        pieces = doc.split("|")
        unnamed = {v for v in values
                   if not any(re.search(rf"(^|[\s:('])'?{re.escape(v)}'?($|[\s:)',(])", p.strip()) for p in pieces)}
        if "..." in doc:  # an open list: its named values are examples
            continue
        assert not unnamed, (t, c, doc, unnamed)
        checked += 1
    assert checked >= 5


def test_grouped_header_lines_and_types_parse_apart():
    """comments.parse_tables on a pack's header: one text per column, SQL types left out, a table's
    columns its own (desync_timing_ranks.rank is not desync_timing's)."""
    from traceflow import comments
    from traceflow.packs import pack_sql
    tables, cols = comments.parse_tables(pack_sql("sync_extra"))
    assert tables["sync_extra"].startswith("the blocking calls a rank made in a step beyond its usual count of them:")
    assert cols["sync_extra"]["blocked_ns"] == "its time blocked"
    assert "Inputs" not in tables
    tables, cols = comments.parse_tables(pack_sql("desync_timing"))
    assert cols["desync_timing_ranks"]["rank"] == ""  # listed bare: the glossary's, not desync_timing's
    assert tables["desync_timing_ranks"].endswith("to the end of its trace.")
