"""Load structlog without rich: imported by the package before any `structlog` import.

structlog imports rich (and with it pygments and attrs, ~5 MiB of an idle process) when it is
installed, only to offer rich tracebacks in its console renderer. These processes never use them: their
loggers format exceptions with `format_exc_info` (plain text) before the renderer sees the event, for
the JSON and the console format alike. While structlog loads, `rich` is marked absent in `sys.modules`
(structlog then falls back to its plain traceback formatter, as without rich installed); afterwards
the mark is removed, so the CLIs that print tables with rich import it as usual. A process that
imported rich before structlog keeps structlog's rich support: nothing here unloads a module.
"""

from __future__ import annotations

import sys

if "structlog" not in sys.modules and "rich" not in sys.modules:
    sys.modules["rich"] = None  # type: ignore[assignment]  # (import rich -> ImportError while it loads)
    try:
        import structlog  # noqa: F401  (its package loads structlog.dev and .tracebacks, the rich users)
    finally:
        del sys.modules["rich"]
