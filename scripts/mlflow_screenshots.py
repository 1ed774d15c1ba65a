"""Screenshots of the MLflow UI over this repository's runs, for docs/mlflow.md.

Starts `mlflow ui` on a free loopback port over a SQLite store (default: ./mlflow.db),
opens in headless Chromium (Playwright, driving an installed chromium) the experiment
list, the newest run's page, its report artifact and a comparison of the two newest
runs, and saves them as PNGs:

    pip install -e '.[screenshots]'   # playwright; no browser download: it drives --chromium
    python scripts/mlflow_screenshots.py --db mlflow.db --out docs/mlflow [--run ID --run ID]

--run (twice) picks the run page's run and the one it is compared with instead.

Run it with the project's Python (it links pages as `python -m pipeline ui` does); --mlflow names
the `mlflow` executable (default: the one next to this Python, else on PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PAGES = ("experiments", "run", "report", "compare")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def api(base: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{base}/api/2.0/mlflow/{path}", data, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def wait_up(server: subprocess.Popen, base: str, limit_s: float = 90) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and server.poll() is None:
        try:
            urllib.request.urlopen(f"{base}/health", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"mlflow ui did not answer at {base} within {limit_s:.0f} s")


def newest_runs(base: str, experiment: str) -> tuple[str, list[str]]:
    """The experiment's id and its runs that have a report artifact (else any runs), newest first."""
    found = api(base, f"experiments/get-by-name?experiment_name={experiment}")["experiment"]
    runs = api(
        base,
        "runs/search",
        {
            "experiment_ids": [found["experiment_id"]],
            "order_by": ["attributes.start_time DESC"],
            "max_results": 20,
        },
    ).get("runs", [])
    if not runs:
        raise SystemExit(f"experiment {experiment!r} has no runs")
    ids = [r["info"]["run_id"] for r in runs]
    with_report = [i for i in ids if api(base, f"artifacts/list?run_id={i}&path=report").get("files")]
    return found["experiment_id"], with_report + [i for i in ids if i not in with_report]


def shoot(base: str, experiment_id: str, runs: list[str], out: Path, chromium: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    from pipeline.tracking.store import TRAINING_VIEW as view  # the UI's model-training view

    run = runs[0]
    urls = {
        "experiments": f"{base}/#/experiments?{view}",
        "run": f"{base}/#/experiments/{experiment_id}/runs/{run}?{view}",
        "report": f"{base}/#/experiments/{experiment_id}/runs/{run}/artifacts/report/report.md?{view}",
        "compare": f"{base}/#/compare-runs?runs={json.dumps(runs[:2])}"
        f"&experiments={json.dumps([experiment_id])}&{view}",
    }
    saved = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 1800})
        for name in PAGES:
            if name == "compare" and len(runs) < 2:
                print("compare: skipped (one run)", file=sys.stderr)
                continue
            page.goto(urls[name], wait_until="load")
            # not "networkidle": the UI polls its API for as long as a page is open
            page.wait_for_timeout(5000)
            path = out / f"{name}.png"
            page.screenshot(path=str(path), full_page=True)
            saved.append(path)
        browser.close()
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("mlflow.db"), help="the SQLite tracking store")
    parser.add_argument("--experiment", default="nmt")
    parser.add_argument("--out", type=Path, default=Path("docs/mlflow"))
    parser.add_argument(
        "--run", action="append", default=[], help="a run id: the first is shown, the first two compared"
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    default_mlflow = Path(sys.executable).parent / "mlflow"
    parser.add_argument(
        "--mlflow", default=str(default_mlflow) if default_mlflow.exists() else shutil.which("mlflow")
    )
    args = parser.parse_args()
    if not args.chromium:
        raise SystemExit("no chromium found: install it (apt-get install chromium) or pass --chromium PATH")
    if not args.mlflow:
        raise SystemExit("no mlflow executable found: pass --mlflow PATH")
    if not args.db.is_file():
        raise SystemExit(f"{args.db}: no such tracking store; run the pipeline first")
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [args.mlflow, "ui", "--backend-store-uri", f"sqlite:///{args.db.resolve()}"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    server = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_up(server, base)
        experiment_id, runs = newest_runs(base, args.experiment)
        runs = args.run + [r for r in runs if r not in args.run]
        for path in shoot(base, experiment_id, runs, args.out, args.chromium):
            print(path)
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # its own session: the ui's workers go too
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
