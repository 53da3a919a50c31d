"""``recursa view``: the Agents View in the terminal, a Textual app on the daemon's API.

:class:`~recursa.view.tui.app.ViewApp` is the app; each pane is its own module.
"""
