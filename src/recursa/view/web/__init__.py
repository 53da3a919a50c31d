"""``recursa web``: the Agents View in a browser, served on loopback with a token.

See :mod:`recursa.view.web.server` for the routes,
:mod:`recursa.view.web.access` for who may use them and
:mod:`recursa.view.web.launch` for how a browser is opened on them.
"""

from __future__ import annotations

from recursa.view.web.launch import launcher, write_launcher
from recursa.view.web.server import create_app, proxied_ops, serve

__all__ = ["create_app", "launcher", "proxied_ops", "serve", "write_launcher"]
