"""Helpers for the tracking-server test (tests/tracking/test_tracking_server.py).

- ``serve``: start ``tracking/serve.sh`` on a free loopback port and stop its whole process group;
- ``populate``: fill a tracking server with runs through the ``grrr-stream`` CLI, over HTTP;
- ``Rest``: read a tracking server back through its REST API with plain ``urllib``;
- ``Chromium``: drive Debian's headless Chromium over the DevTools pipe (``--remote-debugging-pipe``),
  so the UI check needs no Python package beyond the standard library.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from .processes import console_script, stop_group

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "tracking" / "serve.sh"
DEMO_EXPERIMENT = "grrr_stream_demo"


def artifacts_dir() -> Path:
    """Where tests keep files for people to look at: $GRRR_TEST_ARTIFACTS, else tests/artifacts/."""
    d = Path(os.environ.get("GRRR_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


# ----------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    uri: str
    port: int
    backend_uri: str
    artifacts: Path
    log: Path
    proc: subprocess.Popen = field(repr=False)

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.is_file() else ""


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def serve(workdir: Path, *, timeout: float = 120.0, tries: int = 3) -> Iterator[Server]:
    """Run ``tracking/serve.sh`` with a SQLite store and artifact root in ``workdir`` on a free port
    until the block exits; the script's whole process group is stopped afterwards, whatever happens."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    backend = f"sqlite:///{workdir / 'mlflow.db'}"
    artifacts = workdir / "artifacts"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")}
    last = ""
    for attempt in range(tries):
        port = free_port()
        uri = f"http://127.0.0.1:{port}"
        log = workdir / f"server{attempt}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["bash", str(SERVE), "--port", str(port), "--backend-uri", backend, "--artifacts", str(artifacts)],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(uri, port, backend, artifacts, log, proc)
        try:
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline and not _healthy(uri):
                time.sleep(0.25)
            if proc.poll() is None and _healthy(uri):
                yield server
                return
            last = server.log_tail()
            if proc.poll() is None:
                raise TimeoutError(f"tracking/serve.sh did not answer {uri}/health within {timeout:.0f} s:\n{last}")
            if "address already in use" not in last.lower():  # only a lost race for the port is retried
                raise RuntimeError(f"tracking/serve.sh exited with {proc.returncode}:\n{last}")
        finally:
            stop_group(proc)
    raise RuntimeError(f"tracking/serve.sh found no free port in {tries} tries:\n{last}")


# ----------------------------------------------------------------------------- populating it


def populate(tracking_uri: str, workdir: Path) -> None:
    """A reduced sweep over HTTP: synthetic base → sft → rl, the two transitions from the base,
    their stepwise comparison and two variants of base→rl (experiment grrr_stream_demo).
    Rerunning it must add no run."""
    import yaml

    from grrr_stream.fixtures.synthetic import TINY, Update, write_model

    workdir = Path(workdir)
    models = workdir / "models"
    sft = Update(r_delta=2e-2, plant=(0.25, 0.45, 0.30))
    rl = Update(r_delta=5e-3, plant=(0.10, 0.70, 0.20), seed=1)
    for name, updates in {"base": (), "sft": (sft,), "rl": (sft, rl)}.items():
        if not (models / name / "config.json").is_file():
            write_model(models / name, TINY, family="qwen2", dtype="float32", seed=0, updates=updates, overwrite=True)
    cfg = {
        "name": "server-test",
        "workdir": str(workdir / "sweep"),
        "chains": [
            {
                "name": "syn",
                "base": {"id": "base", "source": str(models / "base")},
                "models": [
                    {"id": "sft", "source": str(models / "sft"), "method": "SFT"},
                    {"id": "rl", "source": str(models / "rl"), "parent": "sft", "method": "GRPO"},
                ],
            }
        ],
        "decomposition": {"incremental": False, "device": "cpu", "figures": True},  # the transitions' own figures
        "statistics": {"resamples": 200, "null_draws": 200, "independent": False},
        "variants": {"names": ["full", "diag"], "transitions": ["base-to-rl"]},
        "evaluation": {"enabled": False},
        "tracking": {"experiment": DEMO_EXPERIMENT},
        "progress": False,
    }
    (workdir / "sweep.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    args = ["sweep", str(workdir / "sweep.yaml"), "--tracking-uri", tracking_uri]
    p = subprocess.run(
        [console_script(), *args],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if p.returncode:
        raise RuntimeError(
            f"grrr-stream {' '.join(args)} exited with {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )


def evaluate(tracking_uri: str, workdir: Path) -> Path:
    """Evaluations of the variants full and diag of base → rl (stored by ``populate`` in ``workdir``),
    logged over HTTP, outside the sweep, with tests/evaluation/test_evaluate.py's stand-in engine (no vLLM); the
    benchmark file becomes the runs' dataset input. Returns that file."""
    from grrr_stream.config import TrackingConfig
    from grrr_stream.evaluation.pipeline import EvaluationRequest, run_evaluation
    from grrr_stream.evaluation.settings import EngineSettings, EvaluationOptions
    from helpers.stand_in import StandInEngine

    workdir = Path(workdir)
    (store,) = (workdir / "sweep" / "stores").glob("base-to-rl-*")
    bench = workdir / "bench" / "sums" / "test.jsonl"
    bench.parent.mkdir(parents=True, exist_ok=True)
    bench.write_text(
        "".join(json.dumps({"problem": f"{a}+{b}", "answer": str(a + b)}) + "\n" for a in range(5) for b in range(4))
    )
    run_evaluation(
        EvaluationRequest(
            store,
            workdir / "evaluation",
            ["full", "diag"],
            ["sums"],
            bench.parent.parent,
            EvaluationOptions(engine=EngineSettings(max_new_tokens=32)),
            resamples=200,
        ),
        engine_factory=StandInEngine,
        tracking=TrackingConfig(uri=tracking_uri, experiment=DEMO_EXPERIMENT),
        log=lambda msg: None,
    )
    return bench


# ----------------------------------------------------------------------------- the REST API


@dataclass
class Run:
    id: str
    name: str
    status: str
    experiment_id: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]
    start_ms: int = 0
    end_ms: int = 0

    @classmethod
    def from_json(cls, r: dict) -> "Run":
        info, data = r["info"], r.get("data", {})
        return cls(
            info["run_id"],
            info.get("run_name", ""),
            info["status"],
            info["experiment_id"],
            {p["key"]: p["value"] for p in data.get("params", [])},
            {m["key"]: m["value"] for m in data.get("metrics", [])},
            {t["key"]: t["value"] for t in data.get("tags", [])},
            int(info.get("start_time", 0)),
            int(info.get("end_time", 0)),
        )


class Rest:
    """The tracking server's REST API over plain HTTP (no MLflow client involved)."""

    def __init__(self, uri: str):
        self.uri = uri.rstrip("/")

    def _open(self, endpoint: str, params: Optional[dict] = None, body: Optional[dict] = None) -> bytes:
        url = f"{self.uri}/{endpoint.lstrip('/')}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{req.get_method()} {url} -> {e.code}: {e.read()[:2000]!r}") from None

    def get(self, endpoint: str, **params) -> dict:
        return json.loads(self._open(endpoint, params))

    def post(self, endpoint: str, body: dict) -> dict:
        return json.loads(self._open(endpoint, body=body))

    def experiment(self, name: str) -> dict:
        return self.get("api/2.0/mlflow/experiments/get-by-name", experiment_name=name)["experiment"]

    def runs(self, experiment_ids: Sequence[str], filter: str = "") -> list[Run]:
        out, token = [], None
        while True:
            body = {
                "experiment_ids": list(experiment_ids),
                "max_results": 1000,
                "run_view_type": "ALL",
                "filter": filter,
            }
            if token:
                body["page_token"] = token
            page = self.post("api/2.0/mlflow/runs/search", body)
            out += [Run.from_json(r) for r in page.get("runs", [])]
            token = page.get("next_page_token")
            if not token:
                return out

    def artifacts(self, run_id: str, path: Optional[str] = None) -> dict[str, dict]:
        params = {"run_id": run_id, **({"path": path} if path else {})}
        return {f["path"]: f for f in self.get("api/2.0/mlflow/artifacts/list", **params).get("files", [])}

    def artifact(self, run_id: str, path: str) -> bytes:
        return self._open("get-artifact", {"run_uuid": run_id, "path": path})

    def history(self, run_id: str, key: str) -> list[dict]:
        out, token = [], None
        while True:
            params = {"run_id": run_id, "metric_key": key, **({"page_token": token} if token else {})}
            page = self.get("api/2.0/mlflow/metrics/get-history", **params)
            out += page.get("metrics", [])
            token = page.get("next_page_token")
            if not token:
                return out


# ----------------------------------------------------------------------------- headless Chromium


def find_chromium() -> Optional[str]:
    """Debian's chromium (/usr/bin/chromium or on PATH); $GRRR_CHROMIUM overrides."""
    for c in (os.environ.get("GRRR_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


class Chromium:
    """Headless Chromium driven through the DevTools protocol on a pipe (fds 3 and 4 of the browser).

    One page; ``evaluate`` runs JavaScript in it, ``screenshot`` writes a PNG. Use as a context manager:
    the browser's process group is always stopped on exit."""

    def __init__(
        self,
        exe: str,
        profile: Path,
        *,
        width: int = 1600,
        height: int = 1200,
        log: Optional[Path] = None,
        extra_args: Sequence[str] = (),
    ):
        self._id = 0
        self._buf = b""
        self.events: list[dict] = []  # DevTools events received so far (console messages, exceptions, ...)
        profile = Path(profile)
        profile.mkdir(parents=True, exist_ok=True)
        # pipes at fds >= 10, so that the 3< and 4> redirections cannot clobber them (bash: dash
        # takes one-digit fds only)
        cmd_r, cmd_w = (self._high(fd) for fd in os.pipe())
        res_r, res_w = (self._high(fd) for fd in os.pipe())
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--mute-audio",
            "--disable-extensions",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            *extra_args,
            "about:blank",
        ]
        self.log = log or profile / "chromium.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                ["bash", "-c", f'exec "$0" "$@" 3<&{cmd_r} 4>&{res_w} {cmd_r}<&- {res_w}>&-', exe, *args],
                pass_fds=(cmd_r, res_w),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        os.close(cmd_r)
        os.close(res_w)
        self._w, self._r = cmd_w, res_r
        try:
            targets = self.call("Target.getTargets")["targetInfos"]
            pages = [t["targetId"] for t in targets if t["type"] == "page"]
            target = pages[0] if pages else self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _high(fd: int) -> int:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return high

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method: str, params: Optional[dict] = None, *, session: bool = False, timeout: float = 30.0) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if "method" in reply:
                    self.events.append(reply)
                if reply.get("id") == self._id:  # events and stale replies are skipped
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"Chromium did not answer {method} within {timeout:.0f} s")
            ready, _, _ = select.select([self._r], [], [], left)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the DevTools pipe; log:\n{self.log_tail()}")
                self._buf += chunk

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.is_file() else ""

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", {"url": url}, session=True)

    def evaluate(self, expression: str, *, timeout: float = 30.0) -> Any:
        r = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
            timeout=timeout,
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"JavaScript failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60.0, interval: float = 0.25) -> Any:
        """Poll a JavaScript expression until it is truthy; return its value (TimeoutError otherwise)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value, error = self.evaluate(expression), None
            except RuntimeError as e:  # e.g. the context went away with a navigation: try again
                value, error = None, e
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout:.0f} s ({error or 'no error'}): {expression}")
            time.sleep(interval)

    def watch_console(self) -> None:
        """Collect the page's console messages, log entries and uncaught exceptions as events from now on."""
        for domain in ("Runtime.enable", "Log.enable"):
            self.call(domain, session=True)

    def console_errors(self) -> list[str]:
        """The errors among the events: uncaught exceptions, console.error calls and error log entries."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(f"exception: {p['exceptionDetails'].get('text')} {p['exceptionDetails'].get('url', '')}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in p["args"]))
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def evaluate_in_frame(self, frame_id: str, expression: str, *, timeout: float = 30.0) -> Any:
        """Evaluate in a child frame (e.g. a sandboxed iframe, whose document the page's scripts cannot reach)."""
        ctx = self.call("Page.createIsolatedWorld", {"frameId": frame_id, "worldName": "grrr-test"}, session=True)[
            "executionContextId"
        ]
        r = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True, "contextId": ctx},
            session=True,
            timeout=timeout,
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"JavaScript failed: {r['exceptionDetails']}")
        return r["result"].get("value")

    # keep sandboxed iframes (MLflow's HTML artifact view) in the page's process, where Page.getFrameTree and
    # Page.createIsolatedWorld reach them; Chromium isolates them in a process of their own by default
    SAME_PROCESS_FRAMES = ("--disable-features=IsolateSandboxedIframes",)

    def child_frames(self) -> list[dict]:
        """The page's child frames (id, url, name), depth first."""
        out, todo = [], list(self.call("Page.getFrameTree", session=True)["frameTree"].get("childFrames", []))
        while todo:
            node = todo.pop(0)
            out.append(node["frame"])
            todo += node.get("childFrames", [])
        return out

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True, timeout=60)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                self.call("Browser.close", timeout=5)
        for fd in (self._w, self._r):
            with contextlib.suppress(OSError):
                os.close(fd)
        stop_group(self.proc, grace=5.0)


# JavaScript for the compare page: scroll the virtualised Metrics table (only a few rows are in the
# DOM at a time) until the row of a metric is rendered, put it at the top and return the texts of
# that row's cells joined by " | " (name first, then one value per run); '' when it is not there.
SCROLL_TO_METRIC = r"""
(async (name) => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const link = () => [...document.querySelectorAll('a[title="Plot chart"]')]
      .find((a) => a.textContent.trim() === name);
  const first = document.querySelector('a[title="Plot chart"]');
  if (!first) return '';
  const section = first.closest('.du-bois-light-collapse-content') || document;
  // a names column (overflow hidden) and a values grid, kept in step by a ScrollSync that, driven
  // from script, lags one scroll behind: scroll the values grid, then set the others to match
  const grids = [...section.querySelectorAll('.ReactVirtualized__Grid')];
  const scroller = grids.find((g) => getComputedStyle(g).overflowY !== 'hidden') || grids[grids.length - 1];
  const scrollTo = async (y) => {
    scroller.scrollTop = y;
    await sleep(50);
    for (const g of grids) if (g !== scroller) g.scrollTop = scroller.scrollTop;
    await sleep(50);
  };
  const step = Math.max(45, scroller.clientHeight - 45);
  for (let y = 0; !link() && y <= scroller.scrollHeight; y += step) await scrollTo(y);
  let a = link();
  if (!a) return '';
  await scrollTo(parseFloat(a.closest('[style*="top"]').style.top));
  a = link();
  const top = a.closest('[style*="top"]').style.top;
  const cells = grids.flatMap((g) => [...g.querySelectorAll('[style*="top"]')]).filter((c) => c.style.top === top);
  return cells.map((c) => c.innerText.trim()).join(' | ');
})
"""


def scroll_to_metric(browser: Chromium, name: str) -> str:
    return browser.evaluate(f"{SCROLL_TO_METRIC}({json.dumps(name)})", timeout=60)


# JavaScript for a screenshot of the compare page's Metrics table from a metric's row on: fold the Visualizations
# and Parameters sections, bring the Run details (the runs' names) to the top of the window, the Metrics below
# them, scroll the Metrics' values grid to the row
# and set the names column to the same place (a ScrollSync driven from script lags one scroll behind: set it
# until they agree). Returns every grid's scrollTop (all equal when the names sit beside their values).
SHOW_METRIC_ROWS = r"""
(async (name) => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  for (const h of document.querySelectorAll('div[aria-expanded="true"]'))
    if (['Visualizations', 'Parameters'].includes(h.innerText.trim())) h.click();
  await sleep(500);
  const link = () => [...document.querySelectorAll('a[title="Plot chart"]')].find((a) => a.textContent.trim() === name);
  const section = link().closest('.du-bois-light-collapse-content') || document;
  const grids = [...section.querySelectorAll('.ReactVirtualized__Grid')];
  const scroller = grids.find((g) => getComputedStyle(g).overflowY !== 'hidden') || grids[grids.length - 1];
  const header = [...document.querySelectorAll('div[aria-expanded]')].find((h) => h.innerText.trim() === 'Run details');
  (header || section).scrollIntoView({block: 'start'});
  await sleep(300);
  const y = parseFloat(link().closest('[style*="top"]').style.top);
  for (let i = 0; i < 5; i++) {
    scroller.scrollTop = y;
    await sleep(150);
    for (const g of grids) if (g !== scroller) g.scrollTop = scroller.scrollTop;
    await sleep(150);
    if (grids.every((g) => g.scrollTop === scroller.scrollTop)) break;
  }
  await sleep(300);
  return grids.map((g) => g.scrollTop);
})
"""


def show_metric_rows(browser: Chromium, first: str) -> list[float]:
    return browser.evaluate(f"{SHOW_METRIC_ROWS}({json.dumps(first)})", timeout=60)


# JavaScript for the experiment's runs table (an AG Grid; a run's cells sit in several row elements, one
# per pinned part, all with the run's id as row-id). Nested runs are hidden under their parent's expand
# button, which toggles: the UI remembers what was open, so a click that hides rows is clicked back.
EXPAND_NESTED_RUNS = r"""
(async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const count = () => new Set([...document.querySelectorAll('.ag-row')].map((r) => r.getAttribute('row-id'))).size;
  const button = (id) => document.querySelector(`.ag-row[row-id="${id}"] [col-id="attributes.\`Run Name\`"] button`);
  const seen = new Set();
  for (let round = 0; round < 20; round++) {
    const id = [...document.querySelectorAll('.ag-row')].map((r) => r.getAttribute('row-id'))
      .find((id) => !seen.has(id) && button(id));
    if (!id) return count();
    seen.add(id);
    const before = count();
    button(id).click();
    await sleep(400);
    if (count() < before) { button(id).click(); await sleep(400); }
  }
  return count();
})()
"""

# {run id: {column id: text}} of the rows the table shows
READ_RUNS_TABLE = r"""
(() => {
  const rows = {};
  for (const r of document.querySelectorAll('.ag-row')) {
    const row = rows[r.getAttribute('row-id')] = rows[r.getAttribute('row-id')] || {};
    row['row-index'] = r.getAttribute('row-index');
    for (const c of r.querySelectorAll('[col-id]')) row[c.getAttribute('col-id')] = c.innerText.trim();
  }
  return rows;
})()
"""


# JavaScript for the runs page's chart cards in chart mode: each card's title and what its plot draws (a bar chart's
# trace: x the values, y the runs' ids, as Plotly holds them on the plot's element)
READ_CHART_CARDS = r"""
(() => [...document.querySelectorAll('[data-testid="experiment-view-compare-runs-card"]')].map((c) => {
  const plot = c.querySelector('.js-plotly-plot');
  const trace = plot && plot.data && plot.data[0];
  return {title: c.innerText.split('\n')[0].trim(), x: trace ? [...trace.x] : [], y: trace ? [...trace.y] : []};
}))()
"""


def charts_drawn(runs: int) -> str:
    """JavaScript, true once the runs page's first chart card draws ``runs`` runs."""
    return f"""(() => {{
        const c = document.querySelector('[data-testid="experiment-view-compare-runs-card"] .js-plotly-plot');
        return !!(c && c.data && c.data[0] && c.data[0].x.length === {runs});
    }})()"""


def chart_cards(browser: Chromium) -> list[tuple[str, dict[str, float]]]:
    """The runs page's chart cards in order: (title, {run id: value drawn}) each."""
    return [(c["title"], dict(zip(c["y"], c["x"]))) for c in browser.evaluate(READ_CHART_CARDS)]


def search_runs(browser: Chromium, expression: str) -> None:
    """Type a search expression into the runs page's search box and press Enter, as a person would."""
    browser.evaluate("""(() => { const i = document.querySelector('[data-testid="search-box"]');
                                 i.focus(); i.select(); })()""")
    browser.call("Input.insertText", {"text": expression}, session=True)
    for kind in ("keyDown", "keyUp"):
        browser.call(
            "Input.dispatchKeyEvent",
            {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "nativeVirtualKeyCode": 13},
            session=True,
        )


def runs_table(browser: Chromium) -> dict[str, dict]:
    """The runs table with every nested run shown: run id → {"name", "dataset", "duration", "position" (the row's
    place from the top), "metrics" (metric column → shown text)} as displayed."""
    browser.evaluate(EXPAND_NESTED_RUNS, timeout=60)
    rows = browser.evaluate(READ_RUNS_TABLE)
    return {
        rid: {
            "name": cells.get("attributes.`Run Name`", "").split("\n")[-1],
            "dataset": cells.get("attributes.`Dataset`", ""),
            "duration": cells.get("duration", ""),
            "position": int(cells.get("row-index") or -1),
            "metrics": {k[len("metrics.`") : -1]: v for k, v in cells.items() if k.startswith("metrics.`")},
        }
        for rid, cells in rows.items()
    }


_UNITS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> tuple[float, float]:
    """A duration as the UI shows it (Utils.formatDuration: '812ms', '2.8s', '1.5min', '1.2h', '3.0d') →
    (seconds, half a displayed step: how far the exact value may be from it)."""
    for unit in ("min", "ms", "s", "h", "d"):
        if text.endswith(unit):
            value = float(text[: -len(unit)])
            return value * _UNITS[unit], (0.5e-3 if unit == "ms" else 0.05 * _UNITS[unit])
    raise ValueError(f"not a duration: {text!r}")


# JavaScript for the HTML report (grrr_stream/report): what a reader sees of it. Every image's decoded width,
# the tables by id, and every cell that names its CSV source: [data-src, data-value, shown text].
READ_REPORT = r"""
(() => ({
  images: [...document.images].map((i) => [i.alt, i.complete ? i.naturalWidth : 0]),
  tables: [...document.querySelectorAll('table[data-table]')].map((t) => t.dataset.table),
  cells: [...document.querySelectorAll('[data-src]')].map((c) => [c.dataset.src, c.dataset.value,
                                                                    c.textContent.trim()]),
  groups: [...document.querySelectorAll('tr.group th')].map((t) => t.innerText.trim()),
  external: [...document.querySelectorAll('script, link, iframe, img:not([src^="data:"])')].length,
  title: document.title,
}))()
"""


def check_report_cells(cells: list, read_csv_rows) -> int:
    """Every [data-src, data-value, shown] cell of the report against the CSV it names (``read_csv_rows(name)``:
    that file's rows as text): the same text, and the shown number within its rounding. Returns how many."""
    import math

    for src, value, shown in cells:
        name, _, where = src.partition("#")
        row, _, column = where.partition(":")
        expected = read_csv_rows(name)[int(row)][column]
        assert value == expected, (src, value, expected)
        if shown == "—":  # the page's mark for undefined: an empty or NaN cell of the file
            assert expected.strip().lower() in ("", "nan"), (src, shown, expected)
            continue
        if expected in ("True", "False"):  # a boolean reads 'yes' / 'no'
            assert shown == {"True": "yes", "False": "no"}[expected], (src, shown, expected)
            continue
        try:
            number = float(expected)
        except ValueError:
            assert shown == expected, (src, shown, expected)
            continue
        if math.isfinite(number):
            assert float(shown) == __import__("pytest").approx(number, rel=1e-3, abs=1e-12), (src, shown, expected)
    return len(cells)
