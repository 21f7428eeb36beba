"""Prometheus metrics made only when this host serves or pushes them (issue 37: prometheus_client is
~2 MiB of every idle host, and the default configuration serves no metrics).

A `LazyMetric` is declared like the prometheus_client metric it stands for (`LazyMetric("Counter",
name, documentation, labelnames, ...)`). Until `enable_metrics()` its updates are dropped: `inc`,
`dec`, `set`, `observe` and the same methods of its `labels(...)` children are a no-op function.
`enable_metrics()` (the CLI's `metrics.address`, the OTLP metric push, tests that read the registry)
imports prometheus_client, makes every declared metric in its default registry and rebinds those
methods, children already handed out included (modules keep children of fixed labels, e.g. one per
result type): after that an update costs what prometheus_client's own costs. Updates made before the
switch are not counted (it happens at start-up, before the host serves).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Update = Callable[..., None]

_declared: list[LazyMetric] = []
_enabled = False


def _drop(*_args: Any, **_kwargs: Any) -> None:
    """An update while metrics are off."""


class LazyChild:
    """One label set of a `LazyMetric` handed out before metrics were enabled."""

    __slots__ = ("dec", "inc", "observe", "set")

    def __init__(self) -> None:
        self.inc: Update = _drop
        self.dec: Update = _drop
        self.set: Update = _drop
        self.observe: Update = _drop

    def bind(self, real: Any) -> None:
        for name in LazyChild.__slots__:
            setattr(self, name, getattr(real, name, _drop))


class LazyMetric:
    """A prometheus_client metric made when metrics are enabled (module docstring)."""

    def __init__(self, kind: str, *args: Any, **kwargs: Any) -> None:
        self.kind, self.args, self.kwargs = kind, args, kwargs
        self.labelnames: tuple[str, ...] = tuple(args[2] if len(args) > 2 else kwargs.get("labelnames", ()))
        self.children: dict[tuple[str, ...], LazyChild] = {}
        self.real: Any = None
        self.inc: Update = _drop
        self.dec: Update = _drop
        self.set: Update = _drop
        self.observe: Update = _drop
        _declared.append(self)
        if _enabled:
            self.make()

    def labels(self, *values: str, **by_name: str) -> Any:
        """The child of these label values (a prometheus_client child once enabled)."""
        if self.real is not None:
            return self.real.labels(*values, **by_name)
        key = values or tuple(by_name[name] for name in self.labelnames)
        child = self.children.get(key)
        if child is None:
            child = self.children[key] = LazyChild()
        return child

    def make(self) -> None:
        """Creates the real metric (in prometheus_client's default registry) and rebinds the updates."""
        import prometheus_client

        self.real = getattr(prometheus_client, self.kind)(*self.args, **self.kwargs)
        for name in ("inc", "dec", "set", "observe"):
            setattr(self, name, getattr(self.real, name, _drop) if not self.labelnames else _drop)
        for key, child in self.children.items():
            child.bind(self.real.labels(*key))


def enable_metrics() -> None:
    """Makes every declared metric real from now on (idempotent)."""
    global _enabled
    if _enabled:
        return
    _enabled = True
    for metric in _declared:
        metric.make()


def metrics_enabled() -> bool:
    return _enabled
