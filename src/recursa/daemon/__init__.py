"""Hosting the runtime over a unix socket (DESIGN.md, Processes).

- :mod:`~recursa.daemon.host`: what a host serves: a method per row of the
  operation table (:mod:`recursa.protocol.operations`);
- :mod:`~recursa.daemon.paths`: its files under ``RECURSA_HOME`` (socket, state, token, lock, log);
- :mod:`~recursa.daemon.auth`: client and kernel tokens;
- :mod:`~recursa.daemon.app`: the HTTP API (Starlette) over a ``Host`` and a ``KernelHost``;
- :mod:`~recursa.daemon.routes`: the routes, derived from the table (requests
  validated by type with :func:`~recursa.protocol.wire.from_json`);
  :mod:`~recursa.daemon.stream` the event stream;
- :mod:`~recursa.daemon.replies`: requests, replies, errors and long polls of the routes;
- :mod:`~recursa.daemon.openapi`: the people's API as an OpenAPI document;
- :mod:`~recursa.daemon.server`: uvicorn on the unix socket, signals, clean exit;
- :mod:`~recursa.daemon.embedded`: the same app served in-process (SDK, tests, ``--no-daemon``);
- :mod:`~recursa.daemon.__main__`: the daemon process, ``python -m recursa.daemon``;
- :mod:`~recursa.daemon.process`: start, find and stop it, from a client;
- :mod:`~recursa.daemon.client`: ``DaemonClient`` (one typed ``call`` per row, event
  streams) and all a front end may ask (``connect``, start/stop, models, OpenAPI);
- :mod:`~recursa.daemon.transport`: the client's HTTP over the socket, with resends;
- :mod:`~recursa.daemon.http1`: the client's HTTP/1.1 on asyncio streams;
- :mod:`~recursa.daemon.peek`: synchronous reads, stdlib only (the CLI's quick path);
- :mod:`~recursa.daemon.framing`: the reply framing both read (head, chunks);
- :mod:`~recursa.daemon.machine`: this machine's models, for ``recursa models``;
- :mod:`~recursa.daemon.errormap`: errors across the wire, both ways;
- :mod:`~recursa.daemon.harden`: ``harden_process()`` for processes holding credentials.

Nothing is imported here, so a client does not load the server's dependencies.
"""
