"""`neuraldbg report`: real CPU runs through the CLI (vanishing, exploding), the page checked as HTML and as
headless Chromium renders it; and, without a browser, a synthetic 100k-step x 200-layer trace: the page stays
small and keeps zeros, NaN/Inf, absent and unsampled cells apart, even a single NaN inside a binned column."""
from __future__ import annotations

import base64
import html
import json
import math
import re
import shutil
import subprocess

import pytest
from conftest import run_cli

from neuraldbg_cli.render.report import render_page
from neuraldbg_cli.render.report.grid import ABSENT, NODATA, NONFINITE, ZERO
from neuraldbg_cli.trace.events import Report

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (apt-get install "
                                    "chromium; .ci/run installs it where it can): the browser check is skipped")
MAX_PAGE = 3_000_000  # bytes: the synthetic 100k x 200 page measures about 1.9 MB


def _grids(page: str) -> dict[str, dict]:
    """The heatmaps' hover data by section (plot-grad, ...), codes decoded to rows of bytes."""
    out = {}
    for section in page.split("<section id='")[1:]:
        anchor, found = section.split("'", 1)[0], re.search(r"data-grid='([^']*)'", section)
        if not found:
            continue
        g = json.loads(html.unescape(found.group(1)))
        raw = base64.b64decode(g["codes"])
        g["codes"] = [raw[i * g["cols"]:(i + 1) * g["cols"]] for i in range(len(g["rows"]))]
        out[anchor] = g
    return out


@pytest.fixture(scope="module")
def pages(observe, tmp_path_factory):
    out = {}
    for script in ("vanishing.py", "exploding.py"):
        run_dir = observe(script).run_dir
        path = tmp_path_factory.mktemp("report") / f"{script[:-3]}.html"
        r = run_cli("report", run_dir, "-o", path)
        assert r.returncode == 0, r.stderr
        out[script[:-3]] = path
    return out


def test_page_links_each_hypothesis_to_its_evidence(pages):
    page = pages["vanishing"].read_text()
    assert "at None" not in page
    grids = _grids(page)
    assert set(grids) == {"plot-grad", "plot-act", "plot-update"}
    grad = grids["plot-grad"]
    assert grad["rows"][:3] == ["layers.0", "layers.1", "layers.2"] and grad["rows"][-1] == "head"  # forward order
    assert "<h3>#1 vanishing_gradient" in page and "href='#hl-1'" in page
    section = re.search(r"<section id='plot-grad'>.*?</section>", page, flags=re.S).group(0)
    assert 'id="hl-1"' in section  # the link's target: the origin row on the gradient heatmap
    for target in re.findall(r"href='#([\w-]+)'", page):
        assert f'id="{target}"' in page or f"id='{target}'" in page, target
    assert re.search(r"propagation: (layers\.\d+ → )+layers\.0<", page)


def test_exploding_run_draws_nan_cells_and_loss(pages):
    page = pages["exploding"].read_text()
    grad = _grids(page)["plot-grad"]
    assert all(NONFINITE in row for row in grad["codes"])  # NaN gradients drawn, in red, not dropped
    assert "loss NaN / Inf" in page and "event: non_finite" in page
    assert "<h3>#1 exploding_gradient" in page and "in <b>0</b>" in page
    assert "at None" not in page and "whole model, from step" in page  # loss_divergence names no module


def test_verify_verdicts_next_to_each_hypothesis_verified_first(observe, tmp_path):
    """With RUN_DIR/verify.json, each card lists what verify found for its fixes, as `explain` does."""
    run_dir = tmp_path / "run"
    shutil.copytree(observe("exploding.py").run_dir, run_dir)  # SGD lr=0.4: lr_scale 0.025 and clipping offered
    assert "checked by" not in _report(run_dir)
    reason = "1/1 seeds: loss 0.29 vs NaN/Inf at step 27"
    fixes = [{"kind": "exploding_gradient", "id": "lr_scale", "params": {"factor": 0.025}, "status": "not_verified",
              "reason": "exploding_gradient still present <on seed 1>"},
             {"kind": "exploding_gradient", "id": "clip_grad_norm", "params": {"max_norm": 1.0},
              "status": "verified", "reason": reason}]
    (run_dir / "verify.json").write_text(json.dumps({"schema": "neuraldbg.verify/1", "fixes": fixes}))
    card = _report(run_dir).split("<li class='hyp' id='hyp-")[1].split("</ol>")[0]
    assert "<h3>#1 exploding_gradient" in card
    shown = re.findall(r"<li class='(\w+)'>(.*?)</li>", card)
    assert shown == [("verified", f"fix clip_grad_norm:max_norm=1: verified ✓ ({reason})"),
                     ("not_verified", "fix lr_scale:factor=0.025: not verified ✗ (exploding_gradient still present "
                                      "&lt;on seed 1&gt;)")], shown
    text = run_cli("explain", run_dir).stdout  # the same lines, from the same function
    assert f"   fix clip_grad_norm:max_norm=1: verified ✓ ({reason})" in text


def _report(run_dir) -> str:
    r = run_cli("report", run_dir, "-o", run_dir / "report.html")
    assert r.returncode == 0, r.stderr
    return (run_dir / "report.html").read_text()


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--no-first-run", "--disable-extensions", *args], capture_output=True, text=True,
                          timeout=120)


# Moves the mouse over the first row, first column of the gradient heatmap; the hover's text lands in the DOM.
HOVER = """<script>
const box = document.querySelector('#plot-grad .heat'), r = box.getBoundingClientRect();
const g = JSON.parse(box.dataset.grid);
box.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * (g.box[0] + 0.3 * g.box[2] / g.cols),
  clientY: r.top + r.height * (g.box[1] + 0.5 * g.box[3] / g.rows.length)}));
document.body.dataset.tip = box.querySelector('.tip').textContent;
</script></body>"""


@needs_chromium
@pytest.mark.parametrize("name", ["vanishing", "exploding"])
def test_page_renders_in_chromium(pages, name, tmp_path):
    from PIL import Image  # pillow comes with matplotlib

    probe = tmp_path / "hover.html"
    probe.write_text(pages[name].read_text().replace("</body>", HOVER))
    dom = _chromium("--window-size=1280,2400", "--dump-dom", probe.as_uri()).stdout
    assert dom.count('data-ready="yes"') == 3, dom[-2000:]  # each heatmap's hover data decoded
    assert dom.count("<svg") == 4 and 'id="hyp-1"' in dom and 'id="hl-1"' in dom
    first = "layers.0" if name == "vanishing" else "0"
    assert re.search(rf'data-tip="{re.escape(first)} · step 0 · gradient RMS ≈ [0-9.e+-]+"', dom), dom[-3000:]
    shot = tmp_path / "shot.png"
    _chromium("--window-size=1280,2400", f"--screenshot={shot}", pages[name].as_uri())
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 2400)
    colors = image.resize((320, 600)).getcolors(maxcolors=1 << 16) or []
    assert len(colors) > 200, len(colors)  # figures, not a blank or an error page
    white = max((n for n, c in colors if c == (255, 255, 255)), default=0)
    assert white < 0.9 * 320 * 600


def _synthetic(steps: int = 100_000, layers: int = 200, every: int = 100):
    """Loss on every step; gradients, activations and updates every `every` steps, as --every would write.
    blocks.3: always zero; blocks.4: no gradient; blocks.5: NaN from step 90k; blocks.7: one NaN at step
    45100; blocks.199 only from step 50k; no loss from step 95k."""
    names = [f"blocks.{i}" for i in range(layers)]
    models = {"models": [{"name": "Net", "order": names, "modules": {n: {"params": 100} for n in names}}]}
    rows = [{"step": s, "loss": 2.0 * math.exp(-s / 20_000) if s < 95_000 else None} for s in range(steps)]
    for s in range(0, steps, every):
        grads = {f"Net|{n}": [10.0 ** (-8 + 6 * i / layers), 5.0] for i, n in enumerate(names)}
        grads["Net|blocks.3"], grads["Net|blocks.4"] = [0.0, 5.0], [None, 5.0]
        if s >= 90_000:
            grads["Net|blocks.5"] = [None, None]
        if s == 45_100:
            grads["Net|blocks.7"] = [None, None]
        if s < 50_000:
            del grads["Net|blocks.199"]
        acts = {f"{k}|activation": [0.1, 1.0, 0.0, 3.0, 0.3, min(1.0, s / steps), 0.0, 0.0, 0.0] for k in grads}
        rows[s].update(grads=grads, acts=acts, updates={k: 1e-3 for k in grads})
    return rows, models


def test_synthetic_100k_steps_200_layers_page_is_small_and_keeps_special_cells():
    rows, models = _synthetic()
    page = render_page(Report(run_dir="synthetic", status="problems_found", steps_observed=100_000), rows, (), models)
    size = len(page.encode())
    print(f"synthetic 100k steps x 200 layers: page {size / 1e6:.2f} MB")
    assert size < MAX_PAGE
    grad = _grids(page)["plot-grad"]
    assert len(grad["rows"]) == 200 and grad["cols"] <= 1000
    assert "no loss recorded" in page
    codes = dict(zip(grad["rows"], grad["codes"]))
    assert set(codes["blocks.3"]) == {ZERO} and set(codes["blocks.4"]) == {ABSENT}
    col = int((45_100 - grad["start"]) / grad["width"])
    assert codes["blocks.7"][col] == NONFINITE and NONFINITE not in codes["blocks.7"][col + 1:]
    nan_from = math.ceil((90_000 - grad["start"]) / grad["width"])
    assert set(codes["blocks.5"][nan_from:]) == {NONFINITE} and NONFINITE not in codes["blocks.5"][:nan_from - 1]
    assert set(codes["blocks.199"][: grad["cols"] // 2 - 1]) == {NODATA} and NODATA not in codes["blocks.199"][-10:]
    assert max(codes["blocks.0"][:-1]) < min(codes["blocks.199"][-10:]) < ZERO  # the scale follows the values
    section = page.split("<section id='plot-grad'>")[1].split("</section>")[0]
    assert 20 <= len(re.findall(r"<text[^>]*>\s*blocks\.", section)) <= 50  # every few layers named on the axis


def test_architecture_statistics_have_a_row_per_layer():
    """tracewriter._stats_row's norms, resid, attn and loss_calls: one table per kind of site, in forward order."""
    models = {"models": [{"name": "Net", "order": ["blocks.0", "blocks.0.attn", "bn", "blocks.1"],
                          "modules": {"bn": {"type": "BatchNorm2d"}},
                          "facts": {"residual_blocks": {"blocks.0": {"norm": "pre"}, "blocks.1": {"norm": "pre"}}}}]}
    rows = [{"step": s, "loss": 1.0,
             "norms": {"Net|bn": [1.0, 0.05 + 0.1 * s, 0.1, 1.0 - 0.3 * s, 1.0, 4096, 64]},
             "resid": {"Net|blocks.1": [1.0, 0.5, 1.1], "Net|blocks.0": [2.0, 1e-6 * (s + 1), 2.0]},
             "attn": {"Net|blocks.0.attn": [2.0 + 20 * s, 0.9, 0.95 - 0.45 * s]},
             "loss_calls": {"mse_loss": [-1.0, 2.0, None, [256, 1], [256]]}} for s in range(3)]
    page = render_page(Report(run_dir="r", status="healthy", steps_observed=3), rows, (), models)
    section = page.split("<section id='plot-arch'>")[1].split("</section>")[0]
    cells = [re.findall(r"<td>([^<]*)</td>", r) for r in section.split("</tr>")]
    by_name = {c[0]: c[1:] for c in cells if c}
    assert by_name["bn"] == ["BatchNorm2d", "train", "4096 (64)", "0.05 → 0.25", "0.1 → 0.1", "1 → 0.4"]
    assert list(by_name) == ["bn", "blocks.0", "blocks.1", "blocks.0.attn", "mse_loss"]  # blocks in forward order
    assert by_name["blocks.0"] == ["pre", "5e-07 → 1.5e-06", "2 → 2"]
    assert by_name["blocks.0.attn"] == ["2 → 42", "0.95 → 0.05"]
    assert by_name["mse_loss"] == ["[256, 1]", "[256]", "-1 to 2", "–"]
    assert "Architecture statistics per layer" in page.split("<nav>")[1].split("</nav>")[0]
    empty = render_page(Report(run_dir="r", status="healthy", steps_observed=3), [{"step": 0, "loss": 1.0}], (), {})
    assert "no normalisation layer, residual block, attention layer or loss call was read" in empty
