"""The import contract: traceflow's modules form layers that import only downwards, with no cycle
and no import of another module's private name (docs/architecture.md).

The graph is read from the source with `ast`, deferred imports (inside functions) and imports under
`if TYPE_CHECKING:` included: a type-only import still ties the two modules together (the reader of
one must know the other), and a circle of them is a circle all the same. LAYERS below is
the one statement of the layers: a module belongs to the first entry naming it or a package above
it, and may import modules of its own layer or lower ones. A new module must be placed here.
"""
from __future__ import annotations

import ast
import re
from graphlib import TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "traceflow"

# bottom to top
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # leaves every layer may use: errors, text, DuckDB helpers, the tables' declarations, safe file writing
    ("base", ("errors", "text", "duck", "schema", "rank_tables", "db_format", "machine", "job_name", "outputs", "interrupts", "sqlmodules",
              "comments", "torch", "sql_bounds", "views", "options")),
    ("readers", ("readers",)),                     # a file -> Arrow (pure; worker processes import only this)
    ("load", ("load", "shard_views", "fr_load")),  # Arrow (or a cluster's Parquet shards, Flight Recorder dumps) -> tables
    ("derive", ("derive", "hardware", "invariants")),  # derived tables, clock alignment, device peaks, absurd input
    ("analyses", ("graph", "packs", "critical_path", "whatif", "claims", "verdict", "flops_coverage", "hang", "memory")),  # the SQL packs and the Python analyses
    ("ingest", ("pipeline", "rank_task", "cluster", "recipes")),  # runs read -> load -> derive -> analyses
    ("outputs", ("pages", "perfetto", "perfetto_packets", "compare", "gate", "scaling_study")),  # pages and traces written
    ("job", ("job", "postmortem", "traceflow")),   # the public surface: traceflow.open(...) -> Job
    ("cli", ("cli", "terminal", "__main__", "mcp_server")),  # the command: one call into the Job per command; the MCP server beside it
]


def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> tuple[set[str], list[str]]:
    """(the traceflow modules `name` imports, the private names it takes from other modules)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    private: list[str] = []
    bound: dict[str, str] = {}  # local name -> traceflow module it stands for

    def nearest(mod: str) -> str:
        while mod not in known and "." in mod:
            mod = mod.rpartition(".")[0]
        return mod

    def visit(node: ast.AST):
        for child in ast.iter_child_nodes(node):
            visit_one(child)

    def visit_one(node: ast.AST):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "traceflow" or a.name.startswith("traceflow."):
                    found.add(nearest(a.name))
                    if a.asname:
                        bound[a.asname] = nearest(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source != "traceflow" and not source.startswith("traceflow."):
                return
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in known:
                    found.add(full)
                    bound[a.asname or a.name] = full
                    # `from pkg import sub` runs pkg/__init__ too, unless pkg encloses this module
                    if source != "traceflow" and not (name == source or name.startswith(source + ".")):
                        found.add(nearest(source))
                else:
                    found.add(nearest(source))
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append(f"{name} imports {source}.{a.name}")
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
              and node.attr.startswith("_") and not node.attr.startswith("__")):
            private.append(f"{name} uses {bound[node.value.id]}.{node.attr}")
        visit(node)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(name)
    return found, private


def graph() -> tuple[dict[str, set[str]], list[str]]:
    known = modules()
    edges, private = {}, []
    for name, path in sorted(known.items()):
        edges[name], p = imports(name, path, known)
        private += p
    return edges, private


def layer_of(module: str) -> int | None:
    short = module.split(".", 1)[1] if "." in module else module
    for i, (_, members) in enumerate(LAYERS):
        for m in members:
            if short == m or short.startswith(m + "."):
                return i
    return None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    edges, _ = graph()
    assert cycles(edges) == []
    TopologicalSorter(edges).prepare()  # the same, as the standard library sees it


def test_no_private_names_across_modules():
    _, private = graph()
    assert private == []


def test_every_module_has_a_layer():
    assert [m for m in modules() if layer_of(m) is None] == []


def test_layers_import_only_downwards():
    edges, _ = graph()
    upward = [f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
              for a, targets in sorted(edges.items()) for b in sorted(targets)
              if layer_of(a) is not None and layer_of(b) is not None and layer_of(b) > layer_of(a)]
    assert upward == []


def test_the_command_calls_only_the_job():
    """The command (cli.py) sees the public surface (the job layer), the leaves and its own layer
    only: one call into the Job per command. And it holds no SQL."""
    import re
    edges, _ = graph()
    seen = {LAYERS[layer_of(m)][0] for m in edges["traceflow.cli"]}
    assert seen <= {"base", "job", "cli"}
    tree = ast.parse((PACKAGE / "cli.py").read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)  # help texts: their examples show SQL to type
            if isinstance(n, (ast.Module, ast.FunctionDef)) and n.body and isinstance(n.body[0], ast.Expr)}
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]
    assert [s for s in strings if re.search(r"\bSELECT\b|\bFROM\s+\w+\s+(WHERE|ORDER|GROUP)\b", s, re.I)] == []


def test_the_mcp_server_calls_only_the_job():
    """The MCP server (traceflow mcp) is a thin layer beside the command: the Job and the leaves."""
    edges, _ = graph()
    assert {LAYERS[layer_of(m)][0] for m in edges["traceflow.mcp_server"]} <= {"base", "job"}


def test_the_checker_sees_what_it_must(tmp_path):
    """The checker on a package written here: a deferred import closing a cycle, an import under
    TYPE_CHECKING closing another (type-only: counted all the same), a private name, and a layer
    violation are each found."""
    pkg = tmp_path / "traceflow"
    (pkg / "readers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "readers" / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from .readers import kineto\n")
    (pkg / "readers" / "kineto.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..job import Job\n"
        "from ..errors import _hidden\n")
    (pkg / "report.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .job import Job\n")
    (pkg / "job.py").write_text("from . import errors\nerrors._x\ndef write():\n    from .report import write\n")
    known = {}
    for p in pkg.rglob("*.py"):
        parts = list(p.relative_to(tmp_path).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        known[".".join(parts)] = p
    edges = {n: imports(n, p, known)[0] for n, p in known.items()}
    private = [x for n, p in known.items() for x in imports(n, p, known)[1]]
    assert edges["traceflow.readers.kineto"] == {"traceflow.errors", "traceflow.job"}  # job: TYPE_CHECKING only, counted
    assert edges["traceflow.report"] == {"traceflow.job"}
    # errors -> kineto -> job -> errors (a deferred import, then a type-only one); job <-> report (type-only)
    assert cycles(edges) == [["traceflow.errors", "traceflow.job", "traceflow.readers.kineto", "traceflow.report"]]
    del edges["traceflow.report"]
    assert cycles(edges) == [["traceflow.errors", "traceflow.job", "traceflow.readers.kineto"]]
    assert sorted(private) == ["traceflow.job uses traceflow.errors._x",
                               "traceflow.readers.kineto imports traceflow.errors._hidden"]
    assert layer_of("traceflow.errors") < layer_of("traceflow.readers.kineto")  # errors -> readers is upward


# --- the tables each Python reader of tables declares (issue 44) --------------------------------------
# The modules outside the ingest's graph that run SQL over the database (the what-if, the verdict and
# its claims, the report's sections, the Perfetto trace, the Job's verbs behind the CLI and the MCP
# tools, the terminal's lines): each declares the tables it reads in one module-level constant,
# `READS = frozenset({...})`, checked against the tables its SQL strings read (sqlmodules.referenced).
TABLE_READERS = ("whatif", "verdict", "claims", "hang", "memory", "flops_coverage", "perfetto", "job", "terminal",
                 "pages/html", "pages/hang", "pages/memory", "pages/roofline")
# What DuckDB keeps about itself (information_schema.tables ...) and duckdb_*() functions: not our tables
_CATALOG = re.compile(r"\binformation_schema\.\w+|\bduckdb_\w+\(\)", re.I)
_SQLISH = re.compile(r"\b(?:SELECT|FROM|JOIN)\b")


def sql_strings(tree: ast.Module) -> list[str]:
    """The SQL in a module's string literals (docstrings left out): each f-string with its
    placeholders of module-level string constants filled in, the others blank."""
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                 and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}
    # module-level f-strings of those constants are constants too (claims.PAIRS_SQL holds _STEPS_SQL)
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.JoinedStr) and all(
                isinstance(v, ast.Constant) or (isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)
                                                and v.value.id in constants) for v in n.value.values):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else constants[v.value.id] for v in n.value.values)
            constants.update({t.id: text for t in n.targets if isinstance(t, ast.Name)})
    docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef,
            ast.ClassDef)) and n.body and isinstance(n.body[0], ast.Expr)}
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr):
            parts = []
            for v in n.values:
                docs.add(id(v))
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and v.value.id in constants:
                    parts.append(constants[v.value.id])
                else:
                    parts.append(" {} ")
            out.append("".join(parts))
    out += [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]
    return [s for s in out if _SQLISH.search(s)]


def tables_read(source: str) -> set[str]:
    """The tables a module's SQL strings read, less what its own SQL creates and what it registers
    (an Arrow table handed to DuckDB by name: con.register)."""
    from traceflow import sqlmodules
    tree = ast.parse(source)
    strings = [_CATALOG.sub("(catalog)", s) for s in sql_strings(tree)]
    made = set().union(*(sqlmodules.creates(s) for s in strings)) if strings else set()
    registered = {n.args[0].value for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and n.func.attr == "register" and n.args and isinstance(n.args[0], ast.Constant)}
    return set().union(*(sqlmodules.referenced(s) for s in strings)) - made - registered if strings else set()


def declared_reads(source: str) -> set[str] | None:
    for n in ast.parse(source).body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "READS" for t in n.targets):
            return set(ast.literal_eval(n.value.args[0]) if isinstance(n.value, ast.Call) else ast.literal_eval(n.value))
    return None


def known_tables() -> set[str]:
    """Every table or view something of traceflow's makes: the SQL modules, the loaded tables
    (schema.py), the Python steps' declared ones (graph.declared_tables), and every CREATE in a
    string of traceflow's Python."""
    from traceflow import graph, schema, sqlmodules
    out = {t for g in sqlmodules.GROUPS for n in sqlmodules.names(g) for t in sqlmodules.creates(sqlmodules.text(g, n))}
    out |= set(graph.declared_tables())
    out |= set(getattr(schema, "TABLES", {})) | set(getattr(schema, "FR_TABLES", {}))
    if_not_exists = re.compile(r"\bCREATE\s+(?:TABLE|VIEW)\s+IF\s+NOT\s+EXISTS\s+(?:\w+\.)?(\w+)", re.I)
    for p in PACKAGE.rglob("*.py"):
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                out |= sqlmodules.creates(n.value) | set(if_not_exists.findall(n.value))
    return out


def test_python_readers_declare_the_tables_they_read():
    wrong = {}
    for name in TABLE_READERS:
        source = (PACKAGE / f"{name}.py").read_text()
        declared, found = declared_reads(source), tables_read(source)
        if declared != found:
            wrong[name] = {"declared": None if declared is None else sorted(declared), "read": sorted(found)}
    assert wrong == {}


def test_every_declared_read_is_a_table_traceflow_makes():
    known = known_tables()
    unknown = {name: sorted((declared_reads((PACKAGE / f"{name}.py").read_text()) or set()) - known) for name in TABLE_READERS}
    assert {k: v for k, v in unknown.items() if v} == {}


def test_the_reads_checker_sees_what_it_must():
    source = '''"""SELECT * FROM not_read (a docstring)"""
KIND = "idle_gaps"
READS = frozenset({"steps"})
def f(con, t):
    con.register("rows_arrow", t)
    con.execute("CREATE TEMP TABLE scratch AS SELECT * FROM rows_arrow")
    con.execute(f"SELECT * FROM {KIND} JOIN scratch USING (rank) JOIN steps USING (step), {t}")
    con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'x'")
'''
    assert tables_read(source) == {"idle_gaps", "steps"}
    assert declared_reads(source) == {"steps"}


def test_the_command_runs_the_one_postmortem():
    """`traceflow postmortem` is postmortem.run, not a second copy of its steps (issue 44): of
    postmortem.py the command takes `run` alone."""
    taken = {a.name for n in ast.walk(ast.parse((PACKAGE / "cli.py").read_text())) if isinstance(n, ast.ImportFrom)
             and n.module in ("postmortem", "traceflow.postmortem") for a in n.names}
    assert taken == {"run"}
