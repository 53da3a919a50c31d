"""recursa: a long-horizon agent harness.

A model works inside a persistent IPython kernel, delegates to recursive
sub-agents, and keeps what it learns as versioned harness state. See the
README and DESIGN.md for the map.
"""

__version__ = "0.1.0"
