"""The status page in a real headless Chromium: timeline strip, pause, resume and run buttons.

Needs Debian's ``chromium`` and ``chromium-driver`` (installed by ``.ci/run``). The screenshot of
the page is kept as ``test-artifacts/status-page.png``.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from herdsched import Agent, Schedule, ThreadedScheduler, TriggerInfo
from herdsched.api import ALLOW_ANYONE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
        "chromium-driver; .ci/run installs them)",
    ),
]

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,700",
)


def flaky(info: TriggerInfo) -> str:
    if info.prompt == "fail":
        raise RuntimeError("upstream returned 503")
    return "all good"


@pytest.fixture(autouse=True)
def no_prefork_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start schedulers at once, whether or not gunicorn was imported in this process."""
    from herdsched import contrib

    monkeypatch.setattr(contrib, "_server", lambda: contrib._Server(False, None))


@pytest.fixture(autouse=True)
def quick_refresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages refresh every second, not every 5 s: the tests wait for refreshes, and what a
    refresh must keep (focus, filters, scroll) is put to the test five times as often."""
    from herdsched import html

    monkeypatch.setattr(html, "REFRESH_SECONDS", 1)


@pytest.fixture
def scheduler(tmp_path: Path) -> Iterator[ThreadedScheduler]:
    sched = ThreadedScheduler(state_dir=tmp_path / "state", timezone="Europe/Berlin")
    later = "2099-01-01T00:00:00Z"
    sched.add_agent(
        Agent(
            "triage",
            job=flaky,
            schedules={
                "check": Schedule.interval("5m", prompt="Check issues", start_at=later),
                "report": Schedule.cron("0 9 * * 1-5", prompt="Daily report"),
            },
        )
    )
    sched.start()
    for prompt in ("ok", "fail", "ok", "ok", "fail"):  # recent runs for the timeline
        sched.trigger("triage", "check", prompt=prompt, wait=True)
    yield sched
    sched.stop(timeout=10)


@pytest.fixture
def base_url(scheduler: ThreadedScheduler) -> Iterator[str]:
    from flask import Flask
    from werkzeug.serving import make_server

    from herdsched.contrib.flask import init_app

    app = Flask("browser")
    init_app(app, scheduler, auth=ALLOW_ANYONE)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/herdsched/"
    finally:
        server.shutdown()
        thread.join(5)


def chromium(profile: Path, *, javascript: bool = True) -> Any:
    """A headless Chromium driven by selenium (``javascript=False``: with scripts off)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    assert CHROMIUM is not None and CHROMEDRIVER is not None
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def test_status_page_pause_resume_run_in_chromium(
    browser: Any, base_url: str, scheduler: ThreadedScheduler
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 10)
    browser.get(base_url)
    assert browser.title == "herdsched"
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-key='triage/check']")
    assert row.find_element(By.CSS_SELECTOR, ".status").text == "idle"
    # the timeline strip: one coloured cell per recent run, oldest first
    cells = row.find_elements(By.CSS_SELECTOR, ".timeline .run")
    outcomes = [c.get_attribute("class").split()[-1] for c in cells]
    assert outcomes == [f"run-{s}" for s in ("success", "failed", "success", "success", "failed")]
    colours = {c.value_of_css_property("background-color") for c in cells}
    assert len(colours) == 2  # success and failure look different
    assert "upstream returned 503" in cells[-1].get_attribute("title")
    assert "upstream returned 503" in row.find_element(By.CSS_SELECTOR, ".error").text
    assert row.find_element(By.CSS_SELECTOR, ".failures").text == "1"
    ARTIFACTS.mkdir(exist_ok=True)

    row.find_element(By.CSS_SELECTOR, "button[data-action='pause']").click()
    wait.until(lambda _: row.find_element(By.CSS_SELECTOR, ".status").text == "paused")
    assert row.find_element(By.CSS_SELECTOR, ".msg").text == "paused"  # next to its row
    assert scheduler.store.get_schedule_state("triage", "check").status == "paused"
    resume = row.find_element(By.CSS_SELECTOR, "button[data-action='resume']")
    assert resume.is_displayed()
    assert not row.find_element(By.CSS_SELECTOR, "button[data-action='pause']").is_displayed()
    browser.save_screenshot(str(ARTIFACTS / "status-page.png"))

    browser.refresh()  # the server renders the paused state too
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-key='triage/check']")
    assert row.find_element(By.CSS_SELECTOR, ".status").text == "paused"
    row.find_element(By.CSS_SELECTOR, "button[data-action='resume']").click()
    wait.until(lambda _: row.find_element(By.CSS_SELECTOR, ".status").text == "idle")
    assert scheduler.store.get_schedule_state("triage", "check").status == "idle"

    before = len(scheduler.history("triage", "check", limit=50))
    row.find_element(By.CSS_SELECTOR, "button[data-action='run']").click()
    wait.until(lambda _: "started" in row.find_element(By.CSS_SELECTOR, ".msg").text)
    assert scheduler.wait_until_idle(10)
    assert len(scheduler.history("triage", "check", limit=50)) == before + 1
    assert (ARTIFACTS / "status-page.png").stat().st_size > 0


def test_the_leaders_since_is_shown_like_the_other_times(
    browser: Any, base_url: str, scheduler: ThreadedScheduler
) -> None:
    """It was the raw UTC text ("since 2026-11-25T10:34:24.882Z") on a page that says its
    times are in the browser's zone."""
    from selenium.webdriver.common.by import By

    browser.get(base_url)
    meta = browser.find_element(By.ID, "meta")
    started = scheduler.get_status().leader["started_at"]  # type: ignore[index]
    since = meta.find_element(By.CSS_SELECTOR, f"time[datetime='{started}']")
    assert since.text.endswith(" ago)"), since.text  # "11:34:24 (3 s ago)", as the rows read
    assert started not in meta.text
    assert "times in your browser's zone (server: Europe/Berlin)" in meta.text
    assert "JavaScript is off" not in browser.find_element(By.TAG_NAME, "body").text


def test_a_runs_title_and_a_once_schedules_time_are_in_the_browsers_zone(
    browser: Any, base_url: str, scheduler: ThreadedScheduler
) -> None:
    """Under "times in your browser's zone" a run's title read "failed · 2026-11-26 12:42:23
    CET · ..." (the scheduler's zone) and a once schedule's cadence the UTC instant."""
    from selenium.webdriver.common.by import By

    scheduler.add_schedule("triage", "launch", Schedule.once("2099-06-01T08:00:00Z"))
    browser.get(base_url)
    shown_zone = browser.execute_script("return new Date().toString().split(' GMT')[1]")
    run = browser.find_element(By.CSS_SELECTOR, "tr[data-key='triage/check'] .run[data-at]")
    title = run.get_attribute("title")
    assert title.split(" · ")[1].endswith(shown_zone), (
        title
    )  # Date.toString(): "... GMT+0000 (...)"
    assert " CET" not in title and " CEST" not in title
    cadence = browser.find_element(By.CSS_SELECTOR, "tr[data-key='triage/launch'] td.cadence")
    assert cadence.text.startswith("once at "), cadence.text
    assert "2099-06-01T08:00:00" not in cadence.text
    assert (
        cadence.find_element(By.CSS_SELECTOR, "time")
        .get_attribute("datetime")
        .startswith("2099-06-01T08:00:00")
    )


def test_without_javascript_the_page_says_so_and_shows_the_servers_zone(
    base_url: str, scheduler: ThreadedScheduler, tmp_path: Path
) -> None:
    """It claimed the browser's zone for times rendered in the server's, and showed buttons
    that do nothing without a word."""
    from selenium.webdriver.common.by import By

    driver = chromium(tmp_path / "profile", javascript=False)
    try:
        driver.get(base_url)
        notice = driver.find_element(By.CLASS_NAME, "nojs")
        assert notice.is_displayed()
        assert "JavaScript is off: times are in the server's zone" in notice.text
        assert "buttons do nothing" in notice.text
        meta = driver.find_element(By.ID, "meta").text
        assert "times in the server's zone (Europe/Berlin)" in meta
        assert "browser" not in meta
        assert re.search(r"since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T", meta), meta
    finally:
        driver.quit()


def test_relative_times_move_on_with_each_refresh(browser: Any, base_url: str) -> None:
    """They were set when a cell's HTML changed only: "(3 s ago)" stayed for hours."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def shown() -> str:  # found again each time: the first refresh replaces the cell's HTML
        text: str = browser.find_element(By.CSS_SELECTOR, f"{row} td.last time").text
        return text

    row = "tr[data-key='triage/check']"
    browser.get(base_url)
    first = shown()
    assert first.endswith(" ago)"), first
    # the page refreshes every second; the last run's time stays the same, its age does not
    WebDriverWait(browser, 20).until(lambda _: shown() != first)
    second = shown()
    WebDriverWait(browser, 20).until(lambda _: shown() != second)
    assert shown().endswith(" ago)"), shown()


def test_status_page_shows_api_errors(
    browser: Any, base_url: str, scheduler: ThreadedScheduler
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(base_url)
    scheduler.remove_schedule("triage", "report")  # gone after the page was rendered
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-key='triage/report']")
    row.find_element(By.CSS_SELECTOR, "button[data-action='pause']").click()
    message = row.find_element(By.CSS_SELECTOR, ".msg")
    WebDriverWait(browser, 10).until(lambda _: "not found" in message.text)
    assert message.get_attribute("class") == "msg bad"


def test_a_runs_detail_shows_the_run_or_the_apis_error(
    browser: Any, base_url: str, scheduler: ThreadedScheduler
) -> None:
    """The detail looked the run up in the schedule's history and said "not in the recent
    history any more" for every failed request (a 401 once the login expired, a 503), and for
    a run of a schedule removed meanwhile, whose record is still kept: it asks for the run
    itself (``GET .../runs/<id>``) and shows the API's error."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 10)
    browser.get(base_url)
    failed = scheduler.history("triage", "check", limit=1)[0]  # the newest run: "fail"
    run = f"tr[data-key='triage/check'] .run[data-run='{failed.run_id}']"
    browser.find_element(By.CSS_SELECTOR, run).click()
    detail = wait.until(lambda _: browser.find_element(By.CSS_SELECTOR, "tr.detail"))
    wait.until(lambda _: "upstream returned 503" in detail.text)
    assert f"run: {failed.run_id} · manual · failed" in detail.text
    browser.execute_script(
        "document.querySelector(arguments[0]).dataset.run = 'no-such-run'; "
        "document.querySelector(\"tr[data-key='triage/check'] .run[data-run='no-such-run']\")"
        ".click()",
        run,
    )
    wait.until(lambda _: "no-such-run" in detail.text)
    shown = detail.find_element(By.CSS_SELECTOR, ".bad").text
    assert shown == "run no-such-run: no run 'no-such-run' of triage/check", shown


def test_status_page_says_when_it_could_not_refresh(
    browser: Any, base_url: str, scheduler: ThreadedScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It kept showing the last rows, leader included, with no sign they were old."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from herdsched import StateError

    browser.get(base_url)
    stale = browser.find_element(By.ID, "stale")
    assert not stale.is_displayed()

    def store_down() -> None:
        raise StateError("could not connect to the database")

    monkeypatch.setattr(scheduler, "get_status", store_down)
    WebDriverWait(browser, 20).until(lambda _: stale.is_displayed())
    assert stale.text.startswith("Not refreshed since ")
    assert "state store unavailable: could not connect to the database" in stale.text
    monkeypatch.undo()
    WebDriverWait(browser, 20).until(lambda _: not stale.is_displayed())


def test_status_page_says_so_when_the_server_hangs(
    browser: Any, base_url: str, scheduler: ThreadedScheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that hung (a frozen host, a network cut) rather than refusing left the page
    waiting for its answer for ever: no word that it was stale, and its "(3 s ago)" stood
    still. It gives up after two refreshes' time now, says so, and the times move on."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(base_url)
    stale = browser.find_element(By.ID, "stale")
    released = threading.Event()
    status = scheduler.get_status

    def hangs() -> object:
        released.wait(60)
        return status()

    def age() -> str:
        text: str = browser.find_element(
            By.CSS_SELECTOR, "tr[data-key='triage/check'] td.last time"
        ).text
        return text

    monkeypatch.setattr(scheduler, "get_status", hangs)
    try:
        WebDriverWait(browser, 20).until(lambda _: stale.is_displayed())
        assert "the server did not answer within 2 s" in stale.text, stale.text
        first = age()
        WebDriverWait(browser, 20).until(lambda _: age() != first)
    finally:
        released.set()
    monkeypatch.undo()
    WebDriverWait(browser, 20).until(lambda _: not stale.is_displayed())


@pytest.fixture
def fleet_url(tmp_path: Path) -> Iterator[tuple[str, ThreadedScheduler]]:
    """1,000 schedules over 10 agents; some failing, paused and auto-disabled."""
    from flask import Flask
    from werkzeug.serving import make_server

    from herdsched.contrib.flask import init_app

    sched = ThreadedScheduler(state_dir=None, timezone="Europe/Berlin")
    later = "2099-01-01T00:00:00Z"
    for a in range(10):
        schedules = {
            f"job-{i:03d}": Schedule.interval(f"{5 + i % 7}m", prompt="ok", start_at=later)
            for i in range(100)
        }
        sched.add_agent(Agent(f"agent-{a}", job=flaky, schedules=schedules))
    sched.start()
    for i in range(12):
        sched.trigger("agent-3", f"job-{i:03d}", prompt="fail", wait=True)
    for i in range(5):
        sched.pause("agent-7", f"job-{i:03d}")
    app = Flask("fleet")
    init_app(app, sched, auth=ALLOW_ANYONE)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/herdsched/", sched
    finally:
        server.shutdown()
        thread.join(5)
        sched.stop(timeout=10)


def test_status_page_at_1000_schedules(
    browser: Any, fleet_url: tuple[str, ThreadedScheduler]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select, WebDriverWait

    url, sched = fleet_url
    wait = WebDriverWait(browser, 15)
    browser.get(url)

    def count(name: str) -> str:
        return browser.find_element(By.CSS_SELECTOR, f"#counts [data-count='{name}'] b").text

    assert (count("total"), count("failing"), count("paused")) == ("1000", "12", "5")
    rows = browser.find_elements(By.CSS_SELECTOR, "#rows tr[data-key]")
    assert len(rows) == 50  # one page, not a 1,000-row table
    assert "of 1000 matching" in browser.find_element(By.ID, "summary").text
    # times are the browser's own, readable: "14:05:03 (in 4 min)"-like, never raw ISO
    last = browser.find_element(By.CSS_SELECTOR, "tr[data-key='agent-0/job-000'] td.next").text
    assert "2099-01-01T" not in last and "2099" in last and "days)" in last
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "status-page-1000.png"))

    # filter by status and agent, then search by name: the URL keeps the filters
    Select(browser.find_element(By.NAME, "status")).select_by_value("failing")
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#rows tr[data-key]")) == 12)
    assert "status=failing" in browser.current_url
    browser.find_element(By.CSS_SELECTOR, "#counts [data-count='paused']").click()
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#rows tr[data-key]")) == 5)
    assert browser.find_element(By.CSS_SELECTOR, "#rows tr td.next").text == "paused"
    Select(browser.find_element(By.NAME, "status")).select_by_value("")
    Select(browser.find_element(By.NAME, "agent")).select_by_value("agent-3")
    search = browser.find_element(By.NAME, "q")
    search.send_keys("job-01")
    wait.until(lambda _: len(browser.find_elements(By.CSS_SELECTOR, "#rows tr[data-key]")) == 10)
    row = browser.find_element(By.CSS_SELECTOR, "tr[data-key='agent-3/job-011']")
    assert "upstream returned 503" in row.find_element(By.CSS_SELECTOR, ".error").text
    cells = [td.get_attribute("class") for td in row.find_elements(By.CSS_SELECTOR, "td")]
    assert cells[:3] == ["name", "cadence", "status"]  # rows made by the refresh: header order

    # a run's detail: output summary and error
    row.find_element(By.CSS_SELECTOR, ".timeline .run").click()
    detail = wait.until(lambda _: browser.find_element(By.CSS_SELECTOR, "tr.detail"))
    wait.until(lambda _: "upstream returned 503" in detail.text)
    assert "error:" in detail.text
    browser.save_screenshot(str(ARTIFACTS / "status-page-detail.png"))

    # the refresh: a change made elsewhere shows up; focus, filter and detail stay
    search.send_keys(Keys.END)
    assert browser.switch_to.active_element == search
    sched.pause("agent-3", "job-011")
    wait.until(lambda _: row.find_element(By.CSS_SELECTOR, ".status").text == "paused")
    assert browser.switch_to.active_element == search
    assert search.get_attribute("value") == "job-01"
    assert browser.find_elements(By.CSS_SELECTOR, "tr.detail")

    # paging through everything keeps the scroll position across a refresh
    search.clear()
    search.send_keys(Keys.BACKSPACE)
    Select(browser.find_element(By.NAME, "agent")).select_by_value("")
    wait.until(lambda _: "of 1000 matching" in browser.find_element(By.ID, "summary").text)
    browser.find_element(By.ID, "next").click()
    wait.until(lambda _: "page 2 of 20" in browser.find_element(By.ID, "summary").text)
    browser.execute_script("window.scrollTo(0, 900)")
    before = browser.execute_script("return window.scrollY")
    sched.resume("agent-3", "job-011")
    marker = browser.find_element(By.ID, "summary")
    browser.execute_script("arguments[0].dataset.seen = 'yes'", marker)
    wait.until(
        lambda _: (
            browser.execute_script("return document.querySelector('tr[data-key]').dataset.key")
            == "agent-0/job-050"
        )
    )
    import time as _time

    _time.sleep(2.5)  # at least two refreshes
    assert browser.execute_script("return window.scrollY") == before
    assert "page 2 of 20" in browser.find_element(By.ID, "summary").text


def test_a_page_asked_for_while_a_refresh_is_under_way_is_the_page_shown(
    browser: Any, fleet_url: tuple[str, ThreadedScheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A click on "next" while a refresh was under way was dropped, and that refresh's answer
    then put the page back to 1: the reader's page was lost (the page's own refreshes kept
    asking for page 1)."""
    import time as _time

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, sched = fleet_url
    browser.get(url)
    summary = browser.find_element(By.ID, "summary")
    assert "page 1 of 20" in summary.text
    asking, status = threading.Event(), sched.get_status

    def slow_status() -> Any:  # every refresh takes a second to answer
        asking.set()
        _time.sleep(1.0)
        return status()

    monkeypatch.setattr(sched, "get_status", slow_status)
    assert asking.wait(10)  # a refresh is under way
    browser.find_element(By.ID, "next").click()
    WebDriverWait(browser, 15).until(lambda _: "page 2 of 20" in summary.text)
    asking.clear()
    assert asking.wait(10)  # refreshes go on, for page 2
    _time.sleep(2.5)
    assert "page 2 of 20" in summary.text
