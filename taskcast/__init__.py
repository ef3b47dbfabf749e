"""The ``taskcast`` command and its all-in-one tools.

* :mod:`taskcast.cli` - the ``taskcast`` console script; dispatches to ``gateway``, ``status-api``,
  ``relay`` (each service's own CLI), ``up`` and ``demo``.
* :mod:`taskcast.up` - ``taskcast up``: the whole pipeline in one process on embedded defaults.
* :mod:`taskcast.demo` - ``taskcast demo``: a coordinator and workers driving scripted tasks.
* :mod:`taskcast.dev` - developer tools on a source checkout (``make topology``).

The services themselves live in the ``gateway``, ``status_api`` and ``relay`` packages; nothing
here is imported by them.
"""
