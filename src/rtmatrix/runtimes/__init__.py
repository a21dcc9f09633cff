"""One folder per runtime: its adapter and everything else that knows that runtime's API.

``<name>/adapter.py`` holds the :class:`rtmatrix.adapters.Adapter` subclass the registry names
(``rtmatrix.adapters.base.BUILTIN_ADAPTERS``); beside it, what its capabilities hand out (stream
backends, server drivers, placement parsing). Generic code never imports these modules directly:
the worker loads an adapter by its ``module:Class`` string and asks it for capabilities.
"""
