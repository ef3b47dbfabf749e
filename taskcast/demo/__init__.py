"""``taskcast demo``: :mod:`~taskcast.demo.runner` drives the pure-data scripts of
:mod:`~taskcast.demo.scenarios` through the Status API's internal endpoints."""

from taskcast.demo.runner import DemoResult, main, run_demo

__all__ = ["DemoResult", "main", "run_demo"]
