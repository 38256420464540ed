"""The README's picture of the inline verdict: a real notebook (load the extension, one `%%neuraldbg` cell that
trains the vanishing-gradient asset) executed headless by a Jupyter kernel, its cells and outputs laid out as
Jupyter lays them out (source above, outputs below, the HTML output as the kernel returned it), and the page
rendered by headless Chromium.

    python scripts/notebook_screenshot.py [--out docs/notebook-inline.png]

Needs the test extra (ipykernel, nbclient, nbformat) and a `chromium` on PATH."""
from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "assets"

PAGE = """<!doctype html><meta charset="utf-8"><style>
body {{ font-family: -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 16px; background: #fff; width: 1180px }}
.cell {{ margin-bottom: 14px }}
.in {{ display: flex }} .prompt {{ width: 72px; color: #303f9f; font: 13px monospace; padding-top: 6px }}
.src {{ flex: 1; background: #f5f5f5; border: 1px solid #e0e0e0; border-radius: 2px; padding: 6px 8px;
        font: 13px/1.4 monospace; white-space: pre }}
.out {{ margin-left: 72px; padding: 4px 8px }} .out pre {{ margin: 0; font: 13px/1.4 monospace; white-space: pre-wrap }}
</style>{cells}"""


def notebook(work: Path):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext neuraldbg"),
                nbformat.v4.new_code_cell("%%neuraldbg --run-dir runs/deep_sigmoid\n"
                                          "import api_train\nloss = api_train.train('vanishing')")]
    setup = nbformat.v4.new_code_cell(f"import sys; sys.path[:0] = [{str(ASSETS)!r}, {str(ROOT)!r}]")
    nb.cells.insert(0, setup)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    return nb.cells[1:]  # the path set-up is this script's, not the user's: left out of the picture


def page(cells) -> str:
    parts = []
    for n, cell in enumerate(cells, 1):
        outs = []
        for o in cell.outputs:
            data = o.get("data", {})
            if "text/html" in data:
                outs.append(data["text/html"])
            elif "text/plain" in data:
                outs.append(f"<pre>{html.escape(data['text/plain'])}</pre>")
            elif "text" in o:
                outs.append(f"<pre>{html.escape(o['text'])}</pre>")
        parts.append(f"<div class='cell'><div class='in'><div class='prompt'>In [{n}]:</div>"
                     f"<div class='src'>{html.escape(cell.source)}</div></div>"
                     f"<div class='out'>{''.join(outs)}</div></div>")
    return PAGE.format(cells="".join(parts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "notebook-inline.png")
    ap.add_argument("--height", type=int, default=1000)
    args = ap.parse_args()
    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    if browser is None:
        print("notebook_screenshot: no chromium on PATH", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "nb.html").write_text(page(notebook(work)))
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--no-first-run", "--disable-extensions", f"--window-size=1212,{args.height}",
                        "--virtual-time-budget=5000", f"--screenshot={args.out.resolve()}",
                        (work / "nb.html").as_uri()], check=True, capture_output=True, timeout=180)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
