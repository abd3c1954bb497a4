#!/usr/bin/env python3
"""Write the shipped stand-in profiles (gossipgrad/tools/devices/profiles/*.json) from
published figures.

    python scripts/standin_profiles.py            # all of the published PUBLISHED
    python scripts/standin_profiles.py --check    # exit 1 if a shipped file differs

Deterministic: per-layer costs are counted on the meta device (nothing is computed, no
weights are initialised), scaled to each publication's images/s, and the gradient-ready
times come from the stand-in run on a virtual clock. See lab/devices/published.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from lab.devices.published import PUBLISHED, published_profile  # noqa: E402

OUT = os.path.join(REPO, "gossipgrad", "tools", "devices", "profiles")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--out", default=OUT, help="folder (default: %(default)s)")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    stale = []
    for name, pub in PUBLISHED.items():
        text = json.dumps(published_profile(name, pub).to_json(), indent=1) + "\n"
        path = os.path.join(args.out, f"{name}.json")
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    stale.append(path)
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {path}")
    for path in stale:
        print(f"stale: {path} (run python scripts/standin_profiles.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
