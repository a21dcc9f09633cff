"""The history view, the selection matrix at 1400 px (sticky criterion column, five rows without
horizontal scrolling) and the marks of contention, leaks, error kinds and reference ratios, in
headless Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rtmatrix.report import render_report
from rtmatrix.results import validate_run
from rtmatrix.results.records import RunRecord
from tests.browser.runs import LEAKED_PID, history_run, history_runs, sample_run
from tests.browser.test_report_browser import Page, _take_alerts

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

pytestmark = pytest.mark.browser
WIDTH = 1400


def _open(browser: WebDriver, runs: list[RunRecord], folder: Path) -> Page:
    for run in runs:
        validate_run(run)
    index = render_report(runs, folder)
    browser.set_window_size(WIDTH, 1000)
    browser.get(index.as_uri())
    alerts = _take_alerts(browser, wait_s=0.5)
    console = list(browser.get_log("browser"))  # type: ignore[no-untyped-call]  # read once
    return Page(browser, runs[-1], runs[0], console, folder / "index.html", alerts)


def _css(page: Page, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(page.driver.find_elements(By.CSS_SELECTOR, selector))


def _js(page: Page, script: str, *args: Any) -> Any:
    return page.driver.execute_script(script, *args)


def _shot(page: Page, selector: str, path: Path) -> Path:
    """A screenshot of one element, the window tall enough to hold it."""
    (el,) = _css(page, selector)
    height = int(_js(page, "return arguments[0].getBoundingClientRect().height", el))
    page.driver.set_window_size(WIDTH, min(height + 200, 16000))
    _js(page, "arguments[0].scrollIntoView()", el)
    el.screenshot(str(path))
    page.driver.set_window_size(WIDTH, 1000)
    print(f"screenshot: {path}")
    return path


@pytest.fixture(scope="module")
def hist(browser: WebDriver, tmp_path_factory: pytest.TempPathFactory) -> Page:
    return _open(browser, history_runs(), tmp_path_factory.mktemp("history"))


def test_history_page_is_inert_and_clean(hist: Page) -> None:
    assert not hist.alerts  # script tags in a leaked command line and a reference command
    assert _js(hist, "return document.scripts.length") == 1
    assert not [e for e in hist.console if e.get("level") == "SEVERE"]


def test_history_plots_show_versions_spreads_and_marks(hist: Page, screenshot_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    articles = _css(hist, "#history article.history")
    assert [a.get_attribute("data-runtime") for a in articles][:2] == ["llama_cpp", "onnxruntime"]
    llama = articles[0]
    svg = llama.find_element(By.CSS_SELECTOR, "svg.plot")
    assert svg.is_displayed() and svg.size["width"] > 600 and svg.size["height"] > 200
    ticks = svg.text
    assert "0.3.36" in ticks and "0.3.40" in ticks  # versions on the axis, as text
    assert "contended (not comparable)" in ticks and "significantly worse" in ticks
    verdicts = llama.find_element(By.CSS_SELECTOR, 'table[data-table="verdicts over runs"]')
    changed = verdicts.find_elements(By.CSS_SELECTOR, 'td[data-mark="!"]')
    assert len(changed) == 1 and "WARN" in changed[0].text and changed[0].is_displayed()
    steps = llama.find_elements(By.CSS_SELECTOR, "ul.steps li")
    assert [s.get_attribute("data-mark") for s in steps] == ["-", "!"]
    assert "tg_tps" in steps[0].text and "0.3.40" in steps[0].text
    busy = articles[1].find_elements(By.CSS_SELECTOR, "thead .mark.contended")
    assert len(busy) == 1 and busy[0].is_displayed()
    data = llama.find_element(By.CSS_SELECTOR, "details.history-data")
    assert not data.find_element(By.CSS_SELECTOR, "tbody tr").is_displayed()  # on demand
    data.find_element(By.TAG_NAME, "summary").click()
    assert data.find_element(By.CSS_SELECTOR, "tbody tr").is_displayed()
    shot = _shot(hist, "#history", screenshot_dir / "history.png")
    assert shot.stat().st_size > 20_000


def test_history_step_links_to_its_evidence(hist: Page) -> None:
    from selenium.webdriver.common.by import By

    step = _css(hist, '#history ul.steps li[data-mark="!"]')[0]
    link = step.find_element(By.LINK_TEXT, "evidence")
    target = (link.get_attribute("href") or "").split("#", 1)[1]
    link.click()
    panel = hist.driver.find_element(By.ID, target)
    assert panel.get_attribute("open") is not None and "not for the expected reason" in panel.text


def test_five_rows_fit_1400_px_without_horizontal_scrolling(hist: Page) -> None:
    hist.driver.set_window_size(WIDTH, 1000)
    heads = _css(hist, "#selection-matrix thead th[data-runtime]")
    assert len(heads) == 5
    inner, scroll = _js(hist, "return [window.innerWidth, document.documentElement.scrollWidth]")
    assert scroll <= inner, f"the page scrolls sideways: {scroll} px in a {inner} px window"
    right = _js(hist, "return arguments[0].getBoundingClientRect().right", heads[-1])
    assert right <= inner


def test_selection_marks_best_ties_spread_and_swings(hist: Page) -> None:
    matrix = _css(hist, "#selection-matrix")[0]
    for css in ("best", "tie", "cv", "swing"):
        found = [m for m in _css(hist, f"#selection-matrix .mark.{css}") if m.is_displayed()]
        assert found, f"no visible .mark.{css}"
    tie = _css(hist, "#selection-matrix .mark.tie")[0]
    assert "within noise of the best" in (tie.get_attribute("title") or "")
    assert "Mann–Whitney" in matrix.get_attribute("innerHTML") or "bootstrap" in (
        tie.get_attribute("title") or ""
    )
    assert "PP ÷ llama-bench" in matrix.text and "0.86×" in matrix.text
    assert "older run (1.22.0)" in matrix.text  # onnxruntime's newest cell was contended


def test_all_figures_on_demand(hist: Page) -> None:
    details = _css(hist, "#selection-matrix .part.detail")
    assert details and not any(d.is_displayed() for d in details)
    (button,) = _css(hist, "#all-figures")
    button.click()
    assert all(d.is_displayed() for d in details[:5])
    assert button.get_attribute("aria-pressed") == "true"
    button.click()
    assert not any(d.is_displayed() for d in details[:5])


def test_grid_and_evidence_badges(hist: Page, screenshot_dir: Path) -> None:
    from selenium.webdriver.common.by import By

    (busy,) = _css(hist, '#fixture-grid td[data-contended="true"]')
    mark = busy.find_element(By.CSS_SELECTOR, ".mark.contended")
    assert mark.is_displayed() and "1.40 cores busy" in mark.text
    assert mark.value_of_css_property("background-color") == "rgba(192, 57, 43, 1)"
    (leak,) = _css(hist, '#fixture-grid td[data-leaked="1"]')
    assert "⚠ 1 leaked process" in leak.text and "outlived the cell" in leak.text
    (kind,) = _css(hist, '#fixture-grid .kinds[data-kind-ok="false"]')
    assert kind.is_displayed() and kind.text == "kind: expected bad-file · observed unclassified"
    llama = _css(hist, '#fixture-grid tr[data-key^="tiny/f32|"] td.cell')[0]
    assert "PP ÷ llama-bench 0.86×" in llama.text and "TG ÷ llama-bench 0.80×" in llama.text
    link = leak.find_element(By.LINK_TEXT, "evidence")
    link.click()
    target = (link.get_attribute("href") or "").split("#", 1)[1]
    panel = hist.driver.find_element(By.ID, target)
    table = panel.find_element(By.CSS_SELECTOR, "table.leaked")
    assert table.is_displayed() and str(LEAKED_PID) in table.text and "<script>" in table.text
    _shot(hist, "#fixtures", screenshot_dir / "badges-grid.png")
    shot = _shot(hist, "#selection", screenshot_dir / "badges.png")
    assert shot.stat().st_size > 20_000


@pytest.fixture(scope="module")
def wide(browser: WebDriver, tmp_path_factory: pytest.TempPathFactory) -> Page:
    """Eight runtime rows: the newest history run beside a run of another matrix."""
    return _open(browser, [sample_run(), history_run(2)], tmp_path_factory.mktemp("wide"))


def test_criterion_column_sticks_while_rows_scroll(wide: Page, screenshot_dir: Path) -> None:
    wide.driver.set_window_size(WIDTH, 1000)
    heads = _css(wide, "#selection-matrix thead th[data-runtime]")
    assert len(heads) == 8
    inner, scroll = _js(wide, "return [window.innerWidth, document.documentElement.scrollWidth]")
    assert scroll > inner  # eight rows do not fit: the page scrolls sideways
    row = _css(wide, "#selection-matrix tbody th.criterion")[6]
    top = _js(wide, "return arguments[0].getBoundingClientRect().top + window.scrollY", row)
    before = _js(wide, "return arguments[0].getBoundingClientRect().left", heads[2])
    _js(wide, "window.scrollTo(arguments[0], arguments[1])", scroll - inner, top - 200)
    after = _js(wide, "return arguments[0].getBoundingClientRect().left", heads[2])
    assert after < before - 100  # the rows moved
    left = _js(wide, "return arguments[0].getBoundingClientRect().left", row)
    assert abs(left) < 2, f"the criterion column scrolled away (left {left} px)"
    corner = "var r = arguments[0].getBoundingClientRect(); return [r.x + 20, r.y + 10]"
    box = _js(wide, corner, row)
    hit = _js(wide, "return document.elementFromPoint(arguments[0], arguments[1])", *box)
    assert _js(wide, "return arguments[0].contains(arguments[1])", row, hit)  # on top, readable
    path = screenshot_dir / "sticky.png"
    wide.driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    assert path.stat().st_size > 20_000
    _js(wide, "window.scrollTo(0, 0)")


def test_a_contended_figure_without_history_is_marked_in_the_matrix(wide: Page) -> None:
    ort = [h.get_attribute("data-runtime") for h in _css(wide, "#selection-matrix thead th")]
    assert ort.count("onnxruntime") == 2
    marks = [m for m in _css(wide, "#selection-matrix .mark.contended") if m.text]
    assert marks and all("cores busy" in m.text for m in marks)
    assert "not comparable and not ranked" in (marks[0].get_attribute("title") or "")
