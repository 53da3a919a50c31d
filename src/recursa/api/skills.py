"""Runs inside the kernel: the harness's skills, bound as modules and names.

The harness (:func:`recursa.harness.skills.bind_code`) sends the skills that
apply to the session as data, through :mod:`recursa.api.commands`; no
skill's text is ever formatted into code. :func:`bind` installs each one as
module ``TITLE`` in ``sys.modules`` and binds its callable ``TITLE`` in the
user namespace, hidden from snapshots (every bind makes it again); it drops
the skills it bound before that are no longer given, and appends each
importable folder skill's folder to ``sys.path`` once. A title that names a
module which is not a skill (``json``, a project module) is refused, not
shadowed.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Mapping, Sequence
from typing import Any

MARK = "__recursa_skill__"
"""Set on every skill module: ``(entry_id, version)``."""

errors: dict[str, str] = {}
"""Why each skill of the last :func:`bind` failed, by title."""


def bind(
    skills: Sequence[Mapping[str, Any]], paths: Sequence[str], *, shell: Any = None
) -> dict[str, Any]:
    """Bind ``skills`` (each with ``entry_id``, ``title``, ``version``, ``code``
    and ``description``) in ``shell``'s namespace (by default the kernel's),
    and put ``paths`` on ``sys.path``. A skill that fails (its code raises,
    it defines no ``TITLE``, its title is another module's name) leaves the
    others bound. Returns ``{"errors": {title: why}}``, also kept in
    :data:`errors`."""
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    namespace: dict[str, Any] = shell.user_ns
    hidden: dict[str, Any] | None = getattr(shell, "user_ns_hidden", None)
    wanted = {str(skill["title"]) for skill in skills}
    for name, module in list(sys.modules.items()):
        if _is_skill(module) and name not in wanted:
            del sys.modules[name]
            if namespace.get(name) is getattr(module, name, None):
                namespace.pop(name, None)
                if hidden is not None:
                    hidden.pop(name, None)
    failed: dict[str, str] = {}
    for skill in skills:
        title = str(skill["title"])
        function, why = _bind_one(skill, title)
        if why:
            failed[title] = why
            continue
        namespace[title] = function
        if hidden is not None:
            hidden[title] = function
    for path in paths:
        if path not in sys.path:
            sys.path.append(path)
    errors.clear()
    errors.update(failed)
    return {"errors": failed}


def _bind_one(skill: Mapping[str, Any], title: str) -> tuple[object, str]:
    """The skill's callable, now module ``title``'s, and ``""``; or None and
    why it failed."""
    previous = sys.modules.get(title)
    if previous is not None and not _is_skill(previous):
        return None, f"a module named {title} exists already; rename the skill"
    if previous is None:
        try:
            taken = importlib.util.find_spec(title) is not None
        except (ImportError, ValueError):
            taken = False
        if taken:
            return None, f"a module named {title} is importable; rename the skill"
    filename = f"<skill {title} v{skill['version']}>"
    module = types.ModuleType(title, skill["description"] or None)
    module.__file__ = filename
    setattr(module, MARK, (skill["entry_id"], skill["version"]))
    sys.modules[title] = module
    try:
        exec(compile(skill["code"], filename, "exec"), module.__dict__)
        function: object = getattr(module, title)
    except Exception as exc:
        if previous is None:
            sys.modules.pop(title, None)
        else:
            sys.modules[title] = previous
        return None, f"{type(exc).__name__}: {exc}"
    return function, ""


def _is_skill(module: object) -> bool:
    # vars(), not getattr(): a lazy module's __getattr__ must not run here.
    try:
        return MARK in vars(module)
    except TypeError:
        return False


__all__ = ["MARK", "bind", "errors"]
