"""The AMPS expression language: content filters and OrderBy clauses.

``compile_filter("/region = 'EU' AND /qty > 100")`` parses and compiles a filter once into a predicate
over messages (:mod:`broker.messagetypes`); ``compile_order_by("/date DESC, /name")`` builds a sort.
The language, its NULL and type rules and the function list are documented in ``docs/filters.md``.
"""

from broker.expr._codegen import FilterStatistics
from broker.expr._filter import MAX_DEPTH as MAX_FILTER_DEPTH
from broker.expr._filter import MAX_FILTER_LENGTH, Filter, compile_filter
from broker.expr._functions import BUILTINS as BUILTIN_FUNCTIONS
from broker.expr._orderby import OrderBy, compile_order_by

__all__ = ["BUILTIN_FUNCTIONS", "MAX_FILTER_DEPTH", "MAX_FILTER_LENGTH", "Filter", "FilterStatistics", "OrderBy", "compile_filter", "compile_order_by"]
