"""`make docs-figures`: the documentation's pictures and figures of the bundled job, again, from
`make demo`'s output (out/postmortem): docs/report.png (headless Chromium's screenshot of the report)
and, in docs/reading-the-output.md, the report's height at 1280 and 1920 px and the longest kernel
name. Run after a change to the report or the verdict, so that the docs show what the code writes.

    .venv/bin/python bench/docs_figures.py [--demo out/postmortem]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reading-the-output.md"
PNG = ROOT / "docs" / "report.png"
# the screenshot's size: the report's first screens at a laptop's width, the verdict and the first charts
SHOT = (1400, 2600)

_MEASURE = r"""<script>
setTimeout(function () {
  var de = document.documentElement;
  de.setAttribute("data-page-height", String(de.scrollHeight));
}, 8000);
</script></body>"""


def browser() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        sys.exit("docs-figures: headless chromium not found (make chromium installs Debian's)")
    return found


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                           f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=20000", *args],
                          capture_output=True, text=True, timeout=300)


def height(page: Path, tmp: Path, width: int) -> int:
    copy = tmp / f"measured-{width}.html"
    copy.write_text(page.read_text().replace("</body>", _MEASURE))
    dom = chromium(tmp, f"--window-size={width},1080", "--dump-dom", copy.as_uri()).stdout
    m = re.search(r'data-page-height="(\d+)"', dom)
    if not m:
        sys.exit(f"docs-figures: chromium did not lay out {page}")
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo", default=str(ROOT / "out" / "postmortem"))
    args = ap.parse_args()
    demo = Path(args.demo).resolve()
    page, db = demo / "report.html", demo / "job.duckdb"
    if not page.is_file() or not db.is_file():
        sys.exit(f"docs-figures: {demo} has no report.html and job.duckdb: run make demo first")
    import duckdb
    longest = duckdb.connect(str(db), read_only=True).execute("SELECT max(length(name)) FROM gpu_ops").fetchone()[0]
    with tempfile.TemporaryDirectory(prefix="tf-docs-") as t:
        tmp = Path(t)
        shot = tmp / "report.png"
        chromium(tmp, f"--window-size={SHOT[0]},{SHOT[1]}", f"--screenshot={shot}", page.as_uri())
        if not shot.is_file() or shot.stat().st_size == 0:
            sys.exit("docs-figures: chromium wrote no screenshot")
        h1280, h1920 = height(page, tmp, 1280), height(page, tmp, 1920)
        shutil.copyfile(shot, PNG)
    text = DOC.read_text()
    new = re.sub(r"The bundled 4-rank job's page is\s+[\d,]+ px tall at 1280 px wide and [\d,]+ at 1920",
                 f"The bundled 4-rank job's page is {h1280:,} px tall at 1280 px wide and {h1920:,} at 1920", text)
    new = re.sub(r"\(the bundled job's longest is [\d,]+\)", f"(the bundled job's longest is {longest:,})", new)
    if new != text:
        DOC.write_text(new)
    print(f"wrote {PNG.relative_to(ROOT)} ({SHOT[0]}x{SHOT[1]}); {DOC.relative_to(ROOT)}: page {h1280:,} px at 1280, "
          f"{h1920:,} at 1920; longest kernel name {longest:,} characters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
