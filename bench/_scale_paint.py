"""The dashboard's first full paint against a master at scale, for `bench/scale.py`: the real
`Dashboard` app (`dettui --master URL`), headless at 160x50 through Textual's test harness
(`App.run_test`), timed from launch to the queue table holding JOBS rows (the scale bench asks
for the queue screen's first window: 500 rows, or every job of a shorter queue) and a frame
drawn after that. Needs DETTUI_CONFIG_DIR with a logged-in token.

    python bench/_scale_paint.py URL JOBS [TIMEOUT]

Prints one JSON object: `{"seconds": s, "rows": n}` or `{"error": ..., "rows": n}`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from dettui.commands.dashboard import Dashboard
from dettui.widgets.rowtable import RowTable


async def paint(url: str, jobs: int, timeout: float) -> dict[str, object]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        app = Dashboard(url, Path(tmp))
        async with app.run_test(size=(160, 50)) as pilot:
            rows = 0
            while time.perf_counter() - t0 < timeout:
                found = app.screen.query("#jobs")
                rows = found.first(RowTable).row_count if found else 0
                if rows >= jobs:
                    await pilot.pause()  # the frame that shows them
                    return {"seconds": time.perf_counter() - t0, "rows": rows}
                await asyncio.sleep(0.01)
            return {"error": f"fewer than {jobs} rows after {timeout:.0f} s", "rows": rows}


def main() -> None:
    url, jobs = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 120.0
    print(json.dumps(asyncio.run(paint(url, jobs, timeout))))


if __name__ == "__main__":
    main()
