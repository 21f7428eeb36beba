"""Sums the hardening matrix's figures (`AGENTRUNNER_HARDENING_REPORT`, one JSON object per line)."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path


def main(path: str) -> int:
    totals: collections.Counter[str] = collections.Counter()
    keyed: dict[tuple[str, str], int] = {}
    file = Path(path)
    for line in file.read_text().splitlines() if file.exists() else []:
        entry = json.loads(line)
        if entry.get("key"):  # e.g. a database's runs, checked several times: counted once, its largest
            slot = (entry["figure"], entry["key"])
            keyed[slot] = max(keyed.get(slot, 0), int(entry["count"]))
        else:
            totals[entry["figure"]] += int(entry["count"])
    for (figure, _), count in keyed.items():
        totals[figure] += count
    width = max((len(k) for k in totals), default=0)
    print("hardening matrix:")
    for figure in sorted(totals):
        print(f"  {figure:<{width}}  {totals[figure]:>9,}")
    return 1 if totals.get("problems found", 0) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
