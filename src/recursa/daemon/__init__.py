"""Hosting the runtime over a unix socket (DESIGN.md, Processes).

- :mod:`~recursa.daemon.host`: the ``Host`` protocol the daemon serves;
- :mod:`~recursa.daemon.paths`: its files under ``RECURSA_HOME`` (socket, state, token, lock, log);
- :mod:`~recursa.daemon.auth`: client and kernel tokens;
- :mod:`~recursa.daemon.app`: the HTTP API (Starlette) over a ``Host``;
- :mod:`~recursa.daemon.kernel_routes`: the kernels' routes over a ``KernelHost``;
- :mod:`~recursa.daemon.replies`: requests, replies, errors and long polls of the routes;
- :mod:`~recursa.daemon.server`: uvicorn on the unix socket, signals, clean exit;
- :mod:`~recursa.daemon.embedded`: the same app served in-process (SDK, tests, ``--no-daemon``);
- :mod:`~recursa.daemon.__main__`: the daemon process, ``python -m recursa.daemon``;
- :mod:`~recursa.daemon.process`: start, find and stop it, from a client;
- :mod:`~recursa.daemon.client`: ``DaemonClient``, typed calls and event streams;
- :mod:`~recursa.daemon.errormap`: errors across the wire, both ways;
- :mod:`~recursa.daemon.harden`: ``harden_process()`` for processes holding credentials.

Nothing is imported here, so a client does not load the server's dependencies.
"""
