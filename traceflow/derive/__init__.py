"""The derive step: derived tables (derive/*.sql), CPU-clock reconciliation and clock alignment.

The runner (traceflow/graph.py) runs these modules, in the order their declarations give, with the
analyses (queries/) after them; nothing here calls the analyses."""
from __future__ import annotations
