"""Evaluations: suites run as ordinary sessions, scored, reported and compared.

:mod:`.trials` (items, policies, results), :mod:`.suites` (built-in and custom),
:mod:`.plan` and :mod:`.runner` (``recursa eval run``), :mod:`.homes` (a home per
configuration), :mod:`.scoring` and :mod:`.stats` (metrics and intervals),
:mod:`.figures`, :mod:`.report` and :mod:`.plots` (``recursa eval report``),
:mod:`.compare` (the harness audit), :mod:`.export` (chat-jsonl) and
:mod:`.inspect_agent` (recursa as an Inspect AI agent).
"""
