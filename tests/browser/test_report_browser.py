"""The HTML report opened in headless Chromium: it renders, runs its script, plots, stays inert."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rtmatrix.report import render_report
from rtmatrix.report.views import ROWS
from rtmatrix.results import validate_run
from rtmatrix.results.records import RunRecord
from tests.browser.runs import XSS, sample_run, upgraded_run

if TYPE_CHECKING:
    from selenium.webdriver import Chrome as WebDriver

pytestmark = pytest.mark.browser


@dataclass
class Page:
    driver: WebDriver
    run: RunRecord
    baseline: RunRecord
    console: list[dict[str, Any]]
    screenshot: Path
    alerts: list[str]  # the texts of alerts the page opened


def _take_alerts(driver: WebDriver, wait_s: float = 0.0) -> list[str]:
    """Accept every alert the page opens, returning their texts; ``wait_s`` for the first."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    texts: list[str] = []
    while len(texts) < 50:
        try:
            alert = WebDriverWait(driver, wait_s if not texts else 0.5).until(
                expected_conditions.alert_is_present()
            )
        except TimeoutException:
            break
        if not alert:
            break
        texts.append(str(alert.text))
        alert.accept()
    return texts


def _full_page_screenshot(driver: WebDriver, path: Path) -> None:
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1400, min(height + 40, 16000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1400, 1000)


@pytest.fixture(scope="module")
def page(
    browser: WebDriver, tmp_path_factory: pytest.TempPathFactory, screenshot_dir: Path
) -> Page:
    baseline, run = sample_run(), upgraded_run()
    validate_run(baseline)
    validate_run(run)
    index = render_report([run], tmp_path_factory.mktemp("report"), baseline=baseline)
    browser.get(index.as_uri())
    alerts = _take_alerts(browser, wait_s=1.0)  # first: an open alert blocks other commands
    console = list(browser.get_log("browser"))  # type: ignore[no-untyped-call]  # read once
    shot = screenshot_dir / "report.png"
    _full_page_screenshot(browser, shot)
    print(f"screenshot: {shot}")
    return Page(browser, run, baseline, console, shot, alerts)


def _css(page: Page, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(page.driver.find_elements(By.CSS_SELECTOR, selector))


def test_no_alert_and_script_text_shown(page: Page) -> None:
    assert not page.alerts, f"the page ran a script: alert() with {page.alerts}"
    assert not _take_alerts(page.driver)
    assert page.driver.execute_script("return document.scripts.length") == 1
    shown = [td for td in _css(page, "#fixture-grid td.cell") if XSS in td.text]
    assert shown, "the error message with a script tag is not shown as text"
    assert all(td.is_displayed() for td in shown)


def test_no_console_errors(page: Page) -> None:
    severe = [e for e in page.console if e.get("level") == "SEVERE"]
    assert not severe, severe


def test_selection_matrix_has_a_column_per_runtime_and_every_row(page: Page) -> None:
    heads = [th.get_attribute("data-runtime") for th in _css(page, "#selection-matrix thead th")]
    assert heads[1:] == list(page.run["runtimes"])
    rows = [th.text.split("\n")[0] for th in _css(page, "#selection-matrix tbody th")]
    assert [r.split(" ")[0] for r in rows] == [label.split(" ")[0] for label, _, _ in ROWS]
    text = _css(page, "#selection-matrix")[0].text
    assert "0.3.40" in text and "MIT" in text and "not installed" in text
    assert "verbose_log" in text  # fakert's debug facilities
    assert "in 1 of 2 cells" in text


def test_stack_view_shows_four_layers_and_the_kernel_fallback(page: Page) -> None:
    rows = [th.text.split("\n")[0] for th in _css(page, "#stack-matrix tbody th")]
    assert rows == ["format", "runtime", "backend", "kernels", "numerics",
                    "specialized kernels for", "what this host changed"]  # fmt: skip
    text = _css(page, "#stack-matrix")[0].text
    assert "GGUF" in text and "kernel-level fallback: 57 DequantizeLinear" in text
    assert _css(page, "#stack-matrix .v-FAIL"), "the fallback is marked"
    assert "MatMul" in text


def test_fixture_grid_cells_carry_verdicts(page: Page) -> None:
    cells = _css(page, "#fixture-grid td.cell")
    assert len(cells) == len(page.run["cells"])
    got = sorted((td.get_attribute("data-verdict") or "") for td in cells)
    assert got == sorted(c["verdict"] for c in page.run["cells"])
    colours = {td.value_of_css_property("background-color") for td in cells}
    assert len(colours) >= 4  # PASS, WARN, FAIL, unavailable each coloured


def test_plots_are_present(page: Page) -> None:
    svgs = _css(page, "figure svg.plot")
    names = {s.get_attribute("data-plot") for s in svgs}
    assert {"pp-tg", "context", "cold-start", "upgrade"} <= names
    for svg in svgs:
        assert svg.size["width"] > 200 and svg.size["height"] > 100


def test_upgrade_view_lists_regressions_first(page: Page) -> None:
    rows = _css(page, "#upgrade tr.change")
    assert rows and rows[0].get_attribute("data-class") == "!"
    assert "0.3.36 → 0.3.40" in _css(page, "#upgrade")[0].text


def test_evidence_link_opens_its_panel(page: Page) -> None:
    from selenium.webdriver.common.by import By

    td = next(td for td in _css(page, "#fixture-grid td.cell") if XSS in td.text)
    link = td.find_element(By.LINK_TEXT, "evidence")
    target = (link.get_attribute("href") or "").split("#", 1)[1]
    link.click()
    panel = page.driver.find_element(By.ID, target)
    assert panel.get_attribute("open") is not None
    assert "completed" in panel.text or "llama_decode failed" in panel.text


def test_screenshot_kept(page: Page) -> None:
    assert page.screenshot.stat().st_size > 10_000


def test_the_first_screen_holds_the_answer(
    browser: WebDriver, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A team lead opening a run's report sees which runtime fits without scrolling."""
    from selenium.webdriver.common.by import By

    index = render_report([sample_run()], tmp_path_factory.mktemp("answer"))
    browser.set_window_size(1400, 1000)
    browser.get(index.as_uri())
    answer = browser.find_element(By.ID, "answer")
    top = float(browser.execute_script("return arguments[0].getBoundingClientRect().top", answer))
    height = float(browser.execute_script("return window.innerHeight"))
    assert top < height / 2, f"the answer starts at {top}px of a {height}px screen"
    first = browser.find_element(By.CSS_SELECTOR, "#answer ol.answer-ranked li")
    assert first.is_displayed() and "because" in first.text
